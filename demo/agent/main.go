// Command agent is opsgate's reference Personal Agent against the demo shop
// (package refagent): it joins a Chromium to its Session, does one action
// on the shop, and approves it in the terminal or under a standing
// instruction, printing each step of the protocol.
//
//	go run ./demo &                                   # the shop on :8080
//	go run ./demo/agent                               # exchange; asks you
//	go run ./demo/agent -approve 'exchange<=100USD'   # approves it itself
//	go run ./demo/agent -do delivery -date $(date -d +12days +%F)   # GNU date; macOS: date -v+12d +%F
//	go run ./demo/agent -do delivery -approve 'delivery<=0USD'      # the default date: 10 days from today
//	go run ./demo/agent -do cancel -signed-in         # you approve the cancellation
//	go run ./demo/agent -do cancel -signed-in -approver agent  # the agent approves; the shop declines
//	go run ./demo/agent -approve 'cancel<=100USD' -do cancel -signed-in
//	go run ./demo/agent -show                         # watch the browser
//
// One User across runs: the demo keeps one copy of its data per agent and
// User, so give the User and keep the agent's address and keys (-user does
// all three; its key is kept in a file, so a rerun joins at once):
//
//	go run ./demo/agent -user alice -approve 'exchange<=100USD'   # to the Insulated M
//	go run ./demo/agent -user alice -approve 'exchange<=100USD'   # and back: the default SKU is the other one
//
// Any shop, off loopback: its client_id must be a public HTTPS URL. Point
// a tunnel or reverse proxy at -listen, or host the two documents the
// agent writes beside its key (-user):
//
//	go run ./demo/agent -shop https://shop.example -agent-url https://agent.example/poppy -user alice
//
// Any website, not only the demo: -start is the page the joined browser
// lands on and -press the control (a CSS selector) the browser presses
// there, a form's button or an htmx or Turbo control. The agent then
// approves (asking you, or under -approve), and the request is repeated:
// by the waiting page's Continue, by the page's own script (opsgate.fetch,
// the kit's card.js on an htmx or Turbo page), or, when nothing on the
// page repeats it, by the agent pressing the waiting card's Continue (or
// -press again), once:
//
//	go run ./demo/agent -shop http://localhost:3000 -start /orders/ord_1 -press '#exchange button'
//
// A standing instruction -approve 'kind<=amountCURRENCY' approves, as the
// agent, an action of that kind whose amounts of money (a price
// difference, a refund, a fee: every amount in the terms) are all at most
// that much; a kind alone approves any amount. An operation names no kind,
// so the kind is a word of the path the browser's request went to, in the
// singular or the plural: exchange (POST /orders/…/items/…/exchange),
// delivery or deliveries (POST /api/deliveries/…), cancel (POST
// /account/subscription/cancel). When no rule covers an operation, the
// agent says which kinds its request had.
//
// Exit status: 0 the action was performed (now, or already before), 2 not
// approved (you or the standing instructions didn't approve it), 3 the
// shop declined the approval (approval_declined), 1 any error (a bad flag,
// the browser or the shop failing, approved but not performed).
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
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
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
	os.Exit(agent(os.Args[1:], os.Stdout, os.Stderr))
}

// The exit statuses of the agent (not of `agent check`).
const (
	exitPerformed   = 0 // performed, by this run or before it (already_performed)
	exitError       = 1 // any error, or approved and not performed
	exitNotApproved = 2 // the user or the standing instructions didn't approve
	exitDeclined    = 3 // the shop declined the approval (approval_declined)
)

const exitHelp = `Exit status: 0 the action was performed (now, or already before); 2 not
approved (you or the standing instructions didn't approve it); 3 the shop
declined the approval (approval_declined); 1 any error (a bad flag, the
browser or the shop failing, approved but not performed).
`

// exitStatus is the agent's exit status for how Approve ended: its result,
// or an error.
func exitStatus(result string, err error) int {
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitPerformed
	case err != nil:
		return exitError
	}
	switch result {
	case refagent.Performed, refagent.AlreadyPerformed:
		return exitPerformed
	case refagent.NotApproved:
		return exitNotApproved
	case refagent.Declined:
		return exitDeclined
	}
	return exitError // not_performed, earlier_approval_pending, …
}

// agent runs the agent with args and returns its exit status.
func agent(args []string, stdout, stderr io.Writer) int {
	result, err := run(args, stdout, stderr)
	var printed usageError
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.As(err, &printed) {
		fmt.Fprintln(stderr, "agent:", err)
	}
	return exitStatus(result, err)
}

// usageError is a bad flag, which the flag set printed with the usage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// userListen is where the agent listens with -user and no -listen: a fixed
// address, so that its client_id (which names it) is the same on every
// run, and the demo shows the same copy of its data.
const userListen = "127.0.0.1:8079"

// options are the agent's flags, checked.
type options struct {
	shop, listen, user, chromium   string
	do, order, item, sku, delivery string
	start, press                   string
	date, approver, via            string
	agentURL, keys                 string
	standing                       rules
	signedIn, waitPage, show       bool
	timeout                        time.Duration
	sameClientID                   bool // listen has a fixed port: the client_id of earlier runs
	listenGiven                    bool
}

// parseFlags reads and checks the agent's flags, all of them before
// Chromium starts. A bad flag is a usageError (printed with the usage on
// stderr), -h is flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./demo/agent [-do exchange|delivery|cancel] [-approve 'kind<=amountCURRENCY'] [-user NAME] [flags]\n       go run ./demo/agent check -site URL [flags]   (the conformance checker; check -h)")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\n"+exitHelp)
	}
	fs.StringVar(&o.shop, "shop", "http://localhost:8080", "the shop's origin: the demo's, or any website's with -start and -press")
	fs.StringVar(&o.start, "start", "", "any website: the page the joined browser lands on, a path on -shop such as /orders/ord_1 (default /)")
	fs.StringVar(&o.press, "press", "", "any website: the control the browser presses on -start, a CSS selector such as '#exchange button' (a form's button, an htmx or Turbo control); replaces -do")
	fs.StringVar(&o.listen, "listen", "", "where the agent serves its metadata document and JWKS (loopback); the address is in its client_id. Default 127.0.0.1:0 (any free port), or "+userListen+" with -user")
	fs.StringVar(&o.user, "user", "", "the agent's pairwise User ID at the shop (the Sessions' sub), such as alice; default a new random one each run. The demo keeps one copy of its data per agent and User, so the same -user (and -listen) sees its earlier runs' changes; the agent's key is kept in -keys, so a rerun joins at once")
	fs.StringVar(&o.agentURL, "agent-url", "", "the public URL of the agent's documents, such as https://agent.example/poppy: client_id is <url>/agent.json, jwks_uri <url>/jwks.json. "+
		"A shop off loopback accepts only a public HTTPS client_id: point a tunnel or reverse proxy at -listen, or host the two files the agent writes to -keys with -user. Default http://<listen>, for a shop on loopback")
	fs.StringVar(&o.keys, "keys", defaultKeysDir(), "with -user: the directory that keeps the agent's key (<user>.pem), and with -agent-url its documents to host (<user>.agent.json, <user>.jwks.json)")
	fs.BoolVar(&o.signedIn, "signed-in", false, "sign in for the demo account (DEMO ONLY: a token from the shop's /demo/token) and join signed in")
	fs.StringVar(&o.do, "do", "exchange", "the action: exchange, delivery or cancel (cancel needs -signed-in)")
	fs.StringVar(&o.order, "order", "ord_7Hk2", "exchange: the order")
	fs.StringVar(&o.item, "item", "itm_4Qa", "exchange: the item")
	fs.StringVar(&o.sku, "sku", "", "exchange: the replacement SKU, one the order page offers for the item (never its current SKU); when it isn't offered the agent lists what is. Default: stormline-insulated-m, or stormline-m when the item is that already, so the same command works again")
	fs.StringVar(&o.delivery, "delivery", "del_2Wn8", "delivery: the delivery")
	fs.StringVar(&o.date, "date", "", "delivery: the new date, YYYY-MM-DD: the demo offers tomorrow to 30 days from today, not the delivery's current date; default: 10 days from today, or 11 when the delivery is on that day already")
	fs.Var(&o.standing, "approve", "a standing instruction, repeatable: kind<=amountCURRENCY, e.g. 'exchange<=100USD' approves, as the agent, any exchange whose amounts (price difference, refund, fee) are all at most 100 USD; a kind alone approves any amount. "+
		"The kind is a word of the path of the browser's request, singular or plural: exchange, delivery (POST /api/deliveries/…), cancel")
	fs.StringVar(&o.via, "via", "web", "the interface the agent acts through: web (its browser, joined to a Session), api (the shop's JSON API, api.base_url in poppy.json) or mcp (its MCP server, mcp.url); api and mcp need no browser, and -do cancel is offered on the web only")
	fs.StringVar(&o.approver, "approver", "user", "who approves the -do action: user (you, at the terminal) or agent (the agent itself, on your instruction given by this flag; the shop may decline it)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long each step may wait for the shop or the browser")
	fs.BoolVar(&o.waitPage, "no-continue", false, "don't press Continue after the approval: let the waiting page repeat the request itself")
	fs.BoolVar(&o.show, "show", false, "show the browser window instead of running headless")
	fs.StringVar(&o.chromium, "chromium", "", "the Chromium or Chrome binary; default: found on the PATH")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err} // fs printed it, with the usage
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; the checker is `agent check`)", fs.Arg(0))
	}
	if o.start != "" {
		u, err := url.Parse(o.start)
		if err != nil || !strings.HasPrefix(u.Path, "/") || (u.Host != "" && u.Scheme+"://"+u.Host != strings.TrimRight(o.shop, "/")) {
			return nil, fmt.Errorf("-start %q: write a path on -shop, such as /orders/ord_1", o.start)
		}
		o.start = u.RequestURI()
	}
	if o.press != "" && o.approver == "agent" {
		return nil, errors.New("-press with -approver agent: give the standing instruction with -approve 'kind<=amountCURRENCY' (the kind is a word of the request's path)")
	}
	if o.approver != "user" && o.approver != "agent" {
		return nil, fmt.Errorf("-approver %q: choose user or agent", o.approver)
	}
	switch o.via {
	case "web", "api", "mcp":
	default:
		return nil, fmt.Errorf("-via %q: choose web, api or mcp", o.via)
	}
	if o.via != "web" && o.do == "cancel" {
		return nil, errors.New("-do cancel is offered on the shop's website only: use -via web")
	}
	switch o.do {
	case "exchange", "delivery":
	case "cancel":
		if !o.signedIn {
			return nil, errors.New("-do cancel needs -signed-in: only the account holder cancels the subscription")
		}
	default:
		return nil, fmt.Errorf("-do %q: choose exchange, delivery or cancel", o.do)
	}
	if _, err := time.Parse("2006-01-02", o.date); o.date != "" && err != nil {
		return nil, fmt.Errorf("-date %q: write a day YYYY-MM-DD, such as %s", o.date, time.Now().AddDate(0, 0, 10).Format("2006-01-02"))
	}
	if o.user != "" {
		if err := refagent.CheckUser(o.user); err != nil {
			return nil, fmt.Errorf("-user: %w", err)
		}
	}
	o.listenGiven = o.listen != ""
	switch {
	case o.listen == "" && o.user != "":
		o.listen = userListen
	case o.listen == "":
		o.listen = "127.0.0.1:0"
	}
	_, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: write host:port, such as %s", o.listen, userListen)
	}
	// A fixed port is the same client_id as an earlier run, with new keys.
	o.sameClientID = port != "0"
	return &o, nil
}

// run is the agent's command: it returns Approve's result, or an error.
func run(args []string, stdout, stderr io.Writer) (string, error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return "", err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.via != "web" {
		return runDirect(ctx, o, stdout)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.Flag("disable-gpu", true))
	if o.show {
		opts = append(opts, chromedp.VisibleWindow)
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	if o.chromium != "" {
		opts = append(opts, chromedp.ExecPath(o.chromium))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil { // start the browser
		return "", fmt.Errorf("starting Chromium: %w", err)
	}

	cfg := refagent.Config{Shop: strings.TrimRight(o.shop, "/"), Browser: tab, Listen: o.listen, User: o.user, AgentURL: o.agentURL, Log: stdout, StepTimeout: o.timeout}
	if o.user != "" && o.keys != "" {
		cfg.KeyFile = filepath.Join(o.keys, url.PathEscape(o.user)+".pem")
	}
	a, err := refagent.New(ctx, cfg)
	if err != nil {
		if o.user != "" && !o.listenGiven && strings.Contains(err.Error(), "listen") {
			return "", fmt.Errorf("%w (with -user the agent listens on %s, so that its client_id stays the same across runs; is another agent with -user running? give it another -listen)", err, userListen)
		}
		return "", err
	}
	defer a.Close()
	if !a.Discovery().Operations {
		return "", errors.New("the shop doesn't support operations v3: the agent would use it without the extension (A03); nothing to show")
	}
	if o.user != "" {
		fmt.Fprintf(stdout, "agent: User %q at %s: the demo shows this agent and User its own copy of the data, the same on every run with -user %s\n", a.User(), a.ClientID(), o.user)
	}
	if o.agentURL != "" && cfg.KeyFile != "" {
		if err := writeDocuments(a, o.keys, o.user, stdout); err != nil {
			return "", err
		}
	}

	join := refagent.JoinOptions{SignedIn: o.signedIn, ReturnTo: o.start}
	_, err = a.Join(ctx, join)
	// A shop that has this client_id's keys of an earlier run without a
	// key file (new keys each run) loads them again at most every 30 s:
	// when it says when (the demo explains its refusals), wait that long
	// once. Any other refusal is said at once, with what to do.
	var refused *refagent.JoinRefusedError
	if errors.As(err, &refused) {
		if at, ok := refused.KeysReloadAt(); ok && time.Until(at) < 45*time.Second {
			wait := time.Until(at) + time.Second
			fmt.Fprintf(stdout, "agent: the join was refused: the shop still has this agent's keys of an earlier run at %s, and loads them again at %s; joining again in %s "+
				"(-user keeps the agent's key across runs)\n", a.ClientID(), at.Format(time.RFC3339), wait.Round(time.Second))
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(wait):
			}
			_, err = a.Join(ctx, join)
		}
	}
	if err != nil {
		return "", joinFailed(err)
	}

	origin := a.Origin()
	dctx, cancelAction := context.WithTimeout(tab, o.timeout)
	switch {
	case o.press != "":
		fmt.Fprintf(stdout, "agent: the browser presses %s on %s%s\n", o.press, origin, o.start)
		err = chromedp.Do(dctx, chromedp.Click(chromedp.CSS(o.press), chromedp.NodeVisible))
	case o.do == "exchange":
		fmt.Fprintf(stdout, "agent: the browser does %q on %s\n", o.do, origin)
		err = refagent.ExchangeItem(dctx, origin, o.order, o.item, o.sku)
	case o.do == "delivery":
		fmt.Fprintf(stdout, "agent: the browser does %q on %s\n", o.do, origin)
		err = refagent.ChangeDeliveryDate(dctx, origin, o.delivery, o.date)
	case o.do == "cancel":
		fmt.Fprintf(stdout, "agent: the browser does %q on %s\n", o.do, origin)
		err = refagent.CancelSubscription(dctx, origin)
	}
	cancelAction()
	if errors.Is(err, refagent.ErrNotOnPage) {
		return "", fmt.Errorf("-do %s: %w", o.do, err)
	}
	if err != nil {
		if o.press != "" {
			return "", fmt.Errorf("the browser could not press %s on %s%s within %s: %w", o.press, origin, o.start, o.timeout, err)
		}
		return "", fmt.Errorf("the browser could not do %q on %s within %s: %w", o.do, origin, o.timeout, err)
	}

	var decider refagent.Decider = &refagent.Prompt{In: os.Stdin, Out: stdout}
	if o.approver == "agent" {
		// The user's instruction is this command line: do this action
		// and approve it as the agent (A23), whatever its amounts. A new
		// revision after it, or after a decline, goes to the user (A26, A43).
		o.standing = append(o.standing, refagent.Rule{Kind: o.do, Text: "-do " + o.do + " -approver agent"})
	}
	if len(o.standing) > 0 {
		decider = &refagent.Standing{Rules: o.standing, Ask: decider, Log: stdout}
	}
	var aopts []refagent.Option
	if o.waitPage {
		aopts = append(aopts, refagent.LeaveRepeatToPage())
	}
	if o.press != "" {
		aopts = append(aopts, refagent.PressAgain(o.press))
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := a.Approve(wctx, decider, aopts...)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "\nagent: result: %s (operation %s, revision %s, approver %q, %d reference(s); exit status %d)\n", out.Result, out.OperationID, out.Revision, out.Approver, len(out.Refs), exitStatus(out.Result, nil))
	if out.Result == refagent.Declined {
		fmt.Fprintln(stdout, "agent: the shop declined the approval: the action was NOT performed (A44). Approve it yourself (-approver user), or follow the shop's alternative above.")
	}
	if loc, err := chromedp.Run(tab, chromedp.Location()); err == nil {
		fmt.Fprintf(stdout, "agent: the browser is at %s\n", loc)
	}
	return out.Result, nil
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

// defaultKeysDir is where -user keeps the agent's key: the user's
// configuration directory, or "" when there is none (no key is kept).
func defaultKeysDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "opsgate", "agent")
}

// writeDocuments writes the agent's metadata document and JWKS beside its
// key, for a developer who hosts them at -agent-url: they are the same on
// every run with the same key.
func writeDocuments(a *refagent.Agent, dir, user string, out io.Writer) error {
	base := filepath.Join(dir, url.PathEscape(user))
	for _, f := range []struct {
		name string
		body []byte
	}{{base + ".agent.json", a.Metadata()}, {base + ".jwks.json", a.JWKS()}} {
		if err := os.WriteFile(f.name, append(f.body, '\n'), 0o644); err != nil {
			return fmt.Errorf("-agent-url: writing the agent's documents: %w", err)
		}
	}
	fmt.Fprintf(out, "agent: to host them yourself: %s.agent.json at %s, %s.jwks.json at its jwks_uri\n", base, a.ClientID(), base)
	return nil
}

// runDirect is the agent acting through the shop's JSON API or its MCP
// server (-via api|mcp): no browser, a Session on each request
// (webkit/RULES.md choices 7 and 8), the approval on the same request
// made again (§6).
func runDirect(ctx context.Context, o *options, stdout io.Writer) (string, error) {
	cfg := refagent.Config{Shop: strings.TrimRight(o.shop, "/"), Listen: o.listen, User: o.user, AgentURL: o.agentURL, Log: stdout, StepTimeout: o.timeout}
	if o.user != "" && o.keys != "" {
		cfg.KeyFile = filepath.Join(o.keys, url.PathEscape(o.user)+".pem")
	}
	a, err := refagent.New(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer a.Close()
	if !a.Discovery().Operations {
		return "", errors.New("the shop doesn't support operations v3: the agent would use it without the extension (A03); nothing to show")
	}
	var c refagent.Call
	switch o.do {
	case "exchange":
		sku := o.sku
		if sku == "" {
			sku = "stormline-insulated-m"
		}
		c = refagent.Call{Method: http.MethodPost, Path: "/api/orders/" + url.PathEscape(o.order) + "/items/" + url.PathEscape(o.item) + "/exchanges", Body: map[string]string{"replacement_sku": sku},
			Tool: "exchange_item", Args: map[string]string{"order_id": o.order, "item_id": o.item, "replacement_sku": sku}}
	case "delivery":
		date := o.date
		if date == "" {
			date = time.Now().AddDate(0, 0, 10).Format("2006-01-02")
		}
		c = refagent.Call{Method: http.MethodPost, Path: "/api/deliveries/" + url.PathEscape(o.delivery), Body: map[string]string{"date": date},
			Tool: "reschedule_delivery", Args: map[string]string{"delivery_id": o.delivery, "date": date}}
	}
	var decider refagent.Decider = &refagent.Prompt{In: os.Stdin, Out: stdout}
	if o.approver == "agent" {
		o.standing = append(o.standing, refagent.Rule{Kind: o.do, Text: "-do " + o.do + " -approver agent"})
	}
	if len(o.standing) > 0 {
		decider = &refagent.Standing{Rules: o.standing, Ask: decider, Log: stdout}
	}
	fmt.Fprintf(stdout, "agent: %q through the shop's %s\n", o.do, map[string]string{"api": "JSON API", "mcp": "MCP server"}[o.via])
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := a.CallThrough(wctx, o.via, c, o.signedIn, decider)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "\nagent: result: %s (operation %s, revision %s, approver %q; exit status %d)\n", out.Result, out.OperationID, out.Revision, out.Approver, exitStatus(out.Result, nil))
	return out.Result, nil
}
