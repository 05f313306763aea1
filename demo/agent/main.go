// Command agent is opsgate's reference Personal Agent against the demo shop
// (package refagent): it joins a Chromium to its Session, does one action
// on the shop, and approves it in the terminal or under a standing
// instruction, printing each step of the protocol.
//
//	go run ./demo &                                   # the shop on :8080
//	go run ./demo/agent                               # exchange; asks you
//	go run ./demo/agent -approve 'exchange<=100USD'   # approves it itself
//	go run ./demo/agent -do delivery -date 2026-11-07
//	go run ./demo/agent -do cancel -signed-in         # declined for the agent
//	go run ./demo/agent -show                         # watch the browser
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
)

type rules []refagent.Rule

func (r *rules) String() string { return fmt.Sprint(*r) }
func (r *rules) Set(s string) error {
	rule, err := refagent.ParseRule(s)
	if err != nil {
		return err
	}
	*r = append(*r, rule)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run() error {
	shop := flag.String("shop", "http://localhost:8080", "the demo shop's origin")
	listen := flag.String("listen", "127.0.0.1:0", "where the agent serves its metadata document and JWKS (loopback)")
	signedIn := flag.Bool("signed-in", false, "sign in for the demo account (DEMO ONLY: a token from the shop's /demo/token) and join signed in")
	do := flag.String("do", "exchange", "the action: exchange, delivery or cancel (cancel needs -signed-in)")
	order := flag.String("order", "ord_7Hk2", "exchange: the order")
	item := flag.String("item", "itm_4Qa", "exchange: the item")
	sku := flag.String("sku", "stormline-insulated-m", "exchange: the replacement SKU")
	delivery := flag.String("delivery", "del_2Wn8", "delivery: the delivery")
	date := flag.String("date", time.Now().AddDate(0, 0, 10).Format("2006-01-02"), "delivery: the new date, YYYY-MM-DD")
	var standing rules
	flag.Var(&standing, "approve", "a standing instruction, repeatable: kind<=amountCURRENCY, e.g. 'exchange<=100USD' approves any exchange whose price difference is at most 100 USD, as the agent")
	waitPage := flag.Bool("no-continue", false, "don't press Continue after the approval: let the waiting page repeat the request itself")
	show := flag.Bool("show", false, "show the browser window instead of running headless")
	chromium := flag.String("chromium", "", "the Chromium or Chrome binary; default: found on the PATH")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.Flag("disable-gpu", true))
	if *show {
		opts = append(opts, chromedp.VisibleWindow)
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	if *chromium != "" {
		opts = append(opts, chromedp.ExecPath(*chromium))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil { // start the browser
		return fmt.Errorf("starting Chromium: %w", err)
	}

	a, err := refagent.New(ctx, refagent.Config{Shop: strings.TrimRight(*shop, "/"), Browser: tab, Listen: *listen, Log: os.Stdout})
	if err != nil {
		return err
	}
	defer a.Close()
	if !a.Discovery().Operations {
		fmt.Println("The shop doesn't support operations v3: the agent would use it without the extension (A03). Nothing to show.")
		return nil
	}

	if _, err := a.Join(ctx, refagent.JoinOptions{SignedIn: *signedIn}); err != nil {
		return err
	}

	origin := a.Origin()
	fmt.Printf("agent: the browser does %q on %s\n", *do, origin)
	switch *do {
	case "exchange":
		err = refagent.ExchangeItem(tab, origin, *order, *item, *sku)
	case "delivery":
		err = refagent.ChangeDeliveryDate(tab, origin, *delivery, *date)
	case "cancel":
		if !*signedIn {
			return errors.New("-do cancel needs -signed-in: only the account holder cancels the subscription")
		}
		err = refagent.CancelSubscription(tab, origin)
	default:
		return fmt.Errorf("-do %q: choose exchange, delivery or cancel", *do)
	}
	if err != nil {
		return err
	}

	var decider refagent.Decider = &refagent.Prompt{In: os.Stdin, Out: os.Stdout}
	if len(standing) > 0 {
		decider = &refagent.Standing{Rules: standing, Ask: decider, Log: os.Stdout}
	}
	var aopts []refagent.Option
	if *waitPage {
		aopts = append(aopts, refagent.LeaveRepeatToPage())
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := a.Approve(wctx, decider, aopts...)
	if err != nil {
		return err
	}
	fmt.Printf("\nagent: result: %s (operation %s, revision %s, approver %q, references %v)\n", out.Result, out.OperationID, out.Revision, out.Approver, out.Refs)
	if loc, err := chromedp.Run(tab, chromedp.Location()); err == nil {
		fmt.Printf("agent: the browser is at %s\n", loc)
	}
	return nil
}
