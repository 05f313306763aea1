// Command agent is opsgate's reference Personal Agent against the demo shop
// (package refagent): it joins a Chromium to its Session, does one action
// on the shop, and approves it in the terminal or under a standing
// instruction, printing each step of the protocol.
//
//	go run ./demo &                                   # the shop on :8080
//	go run ./demo/agent                               # exchange; asks you
//	go run ./demo/agent -approve 'exchange<=100USD'   # approves it itself
//	go run ./demo/agent -do delivery -date 2026-11-07
//	go run ./demo/agent -do cancel -signed-in         # you approve the cancellation
//	go run ./demo/agent -do cancel -signed-in -approver agent  # the agent approves; the shop declines
//	go run ./demo/agent -approve 'cancel<=100USD' -do cancel -signed-in
//	go run ./demo/agent -show                         # watch the browser
//
// and the conformance checker, for any site (package conformance):
//
//	go run ./demo/agent check -site http://localhost:8080 -token-url http://localhost:8080/demo/token
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
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(check(os.Args[2:]))
	}
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
	flag.Var(&standing, "approve", "a standing instruction, repeatable: kind<=amountCURRENCY, e.g. 'exchange<=100USD' approves, as the agent, any exchange whose amounts (price difference, refund, fee) are all at most 100 USD; a kind alone approves any amount")
	approver := flag.String("approver", "user", "who approves the -do action: user (you, at the terminal) or agent (the agent itself, on your instruction given by this flag; the shop may decline it)")
	timeout := flag.Duration("timeout", 30*time.Second, "how long each step may wait for the shop or the browser")
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

	if *approver != "user" && *approver != "agent" {
		return fmt.Errorf("-approver %q: choose user or agent", *approver)
	}
	a, err := refagent.New(ctx, refagent.Config{Shop: strings.TrimRight(*shop, "/"), Browser: tab, Listen: *listen, Log: os.Stdout, StepTimeout: *timeout})
	if err != nil {
		return err
	}
	defer a.Close()
	if !a.Discovery().Operations {
		fmt.Println("The shop doesn't support operations v3: the agent would use it without the extension (A03). Nothing to show.")
		return nil
	}

	if _, err := a.Join(ctx, refagent.JoinOptions{SignedIn: *signedIn}); err != nil {
		return joinFailed(err)
	}

	origin := a.Origin()
	fmt.Printf("agent: the browser does %q on %s\n", *do, origin)
	actx, cancelAction := context.WithTimeout(tab, *timeout)
	// kind is the path segment of the action's request, which a standing
	// instruction names.
	kind := *do
	switch *do {
	case "exchange":
		err = refagent.ExchangeItem(actx, origin, *order, *item, *sku)
	case "delivery":
		kind = "deliveries"
		err = refagent.ChangeDeliveryDate(actx, origin, *delivery, *date)
	case "cancel":
		if !*signedIn {
			cancelAction()
			return errors.New("-do cancel needs -signed-in: only the account holder cancels the subscription")
		}
		err = refagent.CancelSubscription(actx, origin)
	default:
		cancelAction()
		return fmt.Errorf("-do %q: choose exchange, delivery or cancel", *do)
	}
	cancelAction()
	if err != nil {
		return fmt.Errorf("the browser could not do %q on %s within %s: %w", *do, origin, *timeout, err)
	}

	var decider refagent.Decider = &refagent.Prompt{In: os.Stdin, Out: os.Stdout}
	if *approver == "agent" {
		// The user's instruction is this command line: do this action
		// and approve it as the agent (A23), whatever its amounts. A new
		// revision after it, or after a decline, goes to the user (A26, A43).
		standing = append(standing, refagent.Rule{Kind: kind, Text: "-do " + *do + " -approver agent"})
	}
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
	if out.Result == refagent.Declined {
		fmt.Println("agent: the shop declined the approval: the action was NOT performed (A44). Approve it yourself (-approver user), or follow the shop's alternative above.")
	}
	if loc, err := chromedp.Run(tab, chromedp.Location()); err == nil {
		fmt.Printf("agent: the browser is at %s\n", loc)
	}
	return nil
}

// joinFailed is a failed join as the CLI prints it: a refused join (401,
// 409, …) on several lines, with the status, the website's words and what
// to do (refagent.JoinRefusedError); any other error as it is.
func joinFailed(err error) error {
	var refused *refagent.JoinRefusedError
	if !errors.As(err, &refused) {
		return err
	}
	return explained{text: refused.Explain(), err: err}
}

// explained is an error printed in other words, still err to errors.Is.
type explained struct {
	text string
	err  error
}

func (e explained) Error() string { return e.text }
func (e explained) Unwrap() error { return e.err }
