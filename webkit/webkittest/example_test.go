package webkittest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// exchanges counts the exchanges the handler performed.
var exchanges atomic.Int32

// newShop wires a website as production does, around the harness's Site:
// the Gate on its exchange handler, the browser join and the operations
// endpoint, verifying with the harness's agents.
func newShop(decline func(context.Context, endpoint.DeclineRequest) *webkit.Decline) *webkittest.Site {
	site := webkittest.New("https://shop.example")
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	mux := http.NewServeMux()

	describe := func(r *http.Request) (webkit.Action, error) {
		return exchangeAction(r.PathValue("order"), r.PostFormValue("size")), nil
	}
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		fmt.Fprintf(w, "exchanged for size %s", r.PostFormValue("size"))
	})))
	// The same action for a fetch-driven page: a JSON body, a JSON answer.
	describeJSON := func(r *http.Request) (webkit.Action, error) {
		var req struct{ Size string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Size == "" {
			return webkit.Action{}, webkit.ErrNotGated // the handler answers 400
		}
		return exchangeAction(r.PathValue("order"), req.Size), nil
	}
	mux.Handle("POST /api/orders/{order}/exchange", kit.Gate(describeJSON)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Size string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Size == "" {
			http.Error(w, `{"error":"size is required"}`, http.StatusBadRequest)
			return
		}
		exchanges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"exchanged_for":%q}`, req.Size)
	})))
	m, err := endpoint.NewMount(endpoint.Config{
		Origin:       site.Origin,
		Kit:          kit,
		Resolver:     site.Resolver(),     // the harness's agents, in-process
		AccessTokens: site.AccessTokens(), // the harness's authorization server
		Decline:      decline,
	})
	if err != nil {
		panic(err)
	}
	site.Handler = m.Handler(mux)
	return site
}

// exchangeAction says what an exchange asks for: the same key, terms and
// summary whether a form or a script sends it.
func exchangeAction(order, size string) webkit.Action {
	return webkit.Action{
		Key:     "exchange:" + order,
		Terms:   map[string]any{"order_id": order, "size": size, "price_difference": map[string]string{"amount": "0.00", "currency": "USD"}},
		Summary: "Exchange the jacket on order " + order + " for size " + size + ", at no extra cost ($0.00).",
	}
}

// A joined browser's gated request gets the waiting page; once the agent
// approves, pressing the page's Continue performs the action, once,
// however many times it is pressed.
func Example() {
	exchanges.Store(0)
	site := newShop(nil)
	session := site.NewAgent().Session("usr_1")
	browser, err := session.Join()
	if err != nil {
		fmt.Println(err)
		return
	}

	res := browser.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
	fmt.Println("browser:", res.StatusCode, "ref given:", res.Ref != "", "performed:", exchanges.Load())

	look := session.Lookup(res.Ref)
	fmt.Println("lookup:", look.StatusCode, look.Error, look.Operation.Summary)

	fmt.Println("approve:", session.Approve(res.Ref).StatusCode)

	again := res.Continue() // press the waiting page's Continue, as the person does
	fmt.Println("continue:", again.StatusCode, string(again.Body), again.Err)

	for _, r := range res.ContinueConcurrently(5) { // five tabs on the same page
		if r.StatusCode == http.StatusOK {
			fmt.Println("performed again!")
		}
	}
	fmt.Println("performed:", exchanges.Load(), "status:", session.Lookup(res.Ref).OperationStatus)
	// Output:
	// browser: 403 ref given: true performed: 0
	// lookup: 403 approval_required Exchange the jacket on order ord_7 for size L, at no extra cost ($0.00).
	// approve: 204
	// continue: 200 exchanged for size L <nil>
	// performed: 1 status: performed
}

// A website declines an approval in its endpoint's decline hook: the agent
// gets approval_declined with the reason, and nothing is recorded.
func Example_decline() {
	exchanges.Store(0)
	site := newShop(func(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline {
		if d.Approval.Approver != store.ApproverAgent {
			return nil
		}
		// The reason says nothing the Session couldn't already see (W130).
		return &webkit.Decline{Reason: "The account holder decides exchanges themselves."}
	})
	session := site.NewAgent().Session("usr_1")
	browser, _ := session.Join()
	res := browser.PostForm("/orders/ord_7/exchange", url.Values{"size": {"M"}})
	ref := res.Ref

	ans := session.ApproveAs(ref, store.ApproverAgent)
	fmt.Println("agent approval:", ans.StatusCode, ans.Error, ans.Decline.Reason)
	fmt.Println("still waiting:", session.Lookup(ref).Error)
	waiting := res.Continue() // the waiting page again
	fmt.Println("continue:", waiting.StatusCode, "performed:", exchanges.Load())

	fmt.Println("user approval:", session.Approve(ref).StatusCode)
	fmt.Println("continue:", waiting.Continue().StatusCode, "performed:", exchanges.Load())
	// Output:
	// agent approval: 403 approval_declined The account holder decides exchanges themselves.
	// still waiting: approval_required
	// continue: 403 performed: 0
	// user approval: 204
	// continue: 200 performed: 1
}

// A browser joined signed in makes the account's operations: a signed-out
// Session of the same User meets the sign-in challenge, and an ordinary
// browser is never gated.
func Example_signedIn() {
	exchanges.Store(0)
	site := newShop(nil)
	agent := site.NewAgent()
	signedIn := agent.SignedInSession("usr_1", "acct_1")
	browser, err := signedIn.Join()
	if err != nil {
		fmt.Println(err)
		return
	}
	res := browser.PostForm("/orders/ord_7/exchange", url.Values{"size": {"S"}})
	ref := res.Ref

	fmt.Println("signed out:", agent.Session("usr_1").Lookup(ref).Error)
	fmt.Println("another User:", agent.SignedInSession("usr_2", "acct_1").Lookup(ref).Error)
	fmt.Println("signed in:", signedIn.Approve(ref).StatusCode)
	fmt.Println("continue:", res.Continue().StatusCode)

	ordinary := site.Browser().PostForm("/orders/ord_7/exchange", url.Values{"size": {"S"}})
	fmt.Println("ordinary browser:", ordinary.StatusCode, "performed:", exchanges.Load())
	// Output:
	// signed out: sign_in_required
	// another User: invalid_request
	// signed in: 204
	// continue: 200
	// ordinary browser: 200 performed: 2
}

// A fetch-driven page's script gets the JSON answer: approval_required
// with the Poppy-Operation header for the agent, then, once approved, the
// handler's own answer to the same request. There is no page and no
// Continue: the script sends its request again (opsgate.fetch does), as
// Again does.
func Example_json() {
	exchanges.Store(0)
	site := newShop(nil)
	session := site.NewAgent().Session("usr_1")
	browser, _ := session.Join()

	res := browser.PostJSON("/api/orders/ord_7/exchange", `{"size": "XL"}`)
	fmt.Println(res.StatusCode, string(bytes.TrimSpace(res.Body)), "ref given:", res.Ref != "")
	fmt.Println("summary:", session.Lookup(res.Ref).Operation.Summary)
	fmt.Println("approve:", session.Approve(res.Ref).StatusCode)
	again := browser.Again()
	fmt.Println(again.StatusCode, string(again.Body), "performed:", exchanges.Load())

	bad := browser.PostJSON("/api/orders/ord_7/exchange", `{}`)
	fmt.Println("bad input:", bad.StatusCode, "ref given:", bad.Ref != "")
	// Output:
	// 403 {"error":"approval_required"} ref given: true
	// summary: Exchange the jacket on order ord_7 for size XL, at no extra cost ($0.00).
	// approve: 204
	// 200 {"exchanged_for":"XL"} performed: 1
	// bad input: 400 ref given: false
}

// An htmx page's request: Browser.Header carries what htmx adds
// (HX-Request, and the page's hx-headers, such as a CSRF token header).
// The Gate answers with the waiting card, a fragment htmx swaps into the
// page; the page's script (/_opsgate/card.js) repeats the request itself
// once the agent approved, with the same headers and values, as Again
// does. Continue, a browser's own form submission, can't: it would send
// no header.
func Example_htmx() {
	exchanges.Store(0)
	site := newShop(nil)
	session := site.NewAgent().Session("usr_1")
	browser, _ := session.Join()
	browser.Header = http.Header{"HX-Request": {"true"}, "X-CSRF-Token": {"the page's token"}}

	res := browser.PostForm("/orders/ord_7/exchange", url.Values{"size": {"S"}})
	fmt.Println(res.StatusCode, "ref given:", res.Ref != "", "card:", bytes.HasPrefix(res.Body, []byte(`<section class="opsgate-card`)))
	fmt.Println("continue is the script's:", res.Continue().Err != nil)
	fmt.Println("approve:", session.Approve(res.Ref).StatusCode)
	again := browser.Again() // what card.js sends: htmx's request again
	fmt.Println(again.StatusCode, string(again.Body), "performed:", exchanges.Load())
	// Output:
	// 403 ref given: true card: true
	// continue is the script's: true
	// approve: 204
	// 200 exchanged for size S performed: 1
}

// A website wired with endpoint.NewMount gives the harness's Resolver and
// access tokens to the Mount; the rest of the test is the same.
func Example_mount() {
	site := webkittest.New("https://shop.example")
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	var performed atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return exchangeAction(r.PathValue("order"), r.PostFormValue("size")), nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		performed.Add(1)
		fmt.Fprint(w, "exchanged")
	})))
	m, err := endpoint.NewMount(endpoint.Config{
		Origin:       site.Origin,
		Kit:          kit,
		Resolver:     site.Resolver(),     // the harness's agents, in-process
		AccessTokens: site.AccessTokens(), // the harness's authorization server
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	site.Handler = m.Handler(mux)

	s := site.NewAgent().SignedInSession("usr_1", "acct_1")
	b, err := s.Join()
	if err != nil {
		fmt.Println(err)
		return
	}
	res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
	fmt.Println("browser:", res.StatusCode, "approve:", s.Approve(res.Ref).StatusCode)
	fmt.Println("continue:", res.Continue().StatusCode, "performed:", performed.Load())
	// Output:
	// browser: 403 approve: 204
	// continue: 200 performed: 1
}
