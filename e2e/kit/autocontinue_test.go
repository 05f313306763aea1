package kit_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/e2e/internal/browsertest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/webkit"
)

// ---- a real browser: auto-continue (W93), fetch.js, and CSP ----

// TestBrowserAutoContinue drives Chromium: the waiting page's script makes
// the request again once the approval is recorded (§6 W93), and
// opsgate.fetch does the same for a fetch-driven page (W149), under a
// Content-Security-Policy that allows no inline script or style.
func TestBrowserAutoContinue(t *testing.T) {
	needChromium(t)
	// For the page left while its status answer is on its way: once held
	// is set, status requests wait until released is closed, and the
	// first one held says so on polled.
	var held atomic.Bool
	polled, released := make(chan struct{}), make(chan struct{})
	var pollOnce, leaveOnce sync.Once
	site := newKitSite(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'")
			if held.Load() && strings.HasSuffix(r.URL.Path, "/status") {
				pollOnce.Do(func() { close(polled) })
				select {
				case <-released:
				case <-r.Context().Done():
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	k := site.Kit
	clock := testclock.At(time.Now())
	k.Clock = clock.Now
	var runs atomic.Int64
	exchange := k.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"exchanged":%q}`, r.PostFormValue("size"))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Done</title><p id="done">exchanged to %s</p>`, html.EscapeString(r.PostFormValue("size")))
	}))
	mux := site.Mux
	mux.Handle("/exchange", exchange)
	mux.HandleFunc("/order", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><meta charset="utf-8"><title>Order</title>
<form method="post" action="/exchange?from=order"><input name="order" value="ord_7"><input name="size" value="L &quot;&gt;&lt;b&gt;✓"><input name="submit" value="shadow"><button id="go">Exchange</button></form>`)
	})
	mux.HandleFunc("/spa", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>SPA</title><div id="out"></div>
<script src="/_opsgate/fetch.js"></script><script src="/app.js"></script>`)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `
function show(id, text) { const p = document.createElement("p"); p.id = id; p.textContent = text; document.getElementById("out").append(p); }
opsgate.fetch("/exchange", {
  method: "POST",
  headers: { Accept: "application/json" },
  body: new URLSearchParams({ order: new URLSearchParams(location.search).get("order") || "ord_8", size: "S" }),
}, { onWaiting(ref) { show("spa-waiting", ref); }, onApproved() { show("spa-approved", "approved"); } })
  .then(r => r.json()).then(b => show("spa-done", JSON.stringify(b)));
`)
	})
	mux.HandleFunc("/leave", func(w http.ResponseWriter, r *http.Request) {
		// The navigation away is under way: the held status answer
		// ("approved") reaches the old page now, and this page commits
		// only after it has.
		leaveOnce.Do(func() { close(released) })
		time.Sleep(700 * time.Millisecond)
		fmt.Fprint(w, `<!doctype html><title>Elsewhere</title><p id="left">elsewhere</p>`)
	})
	srv := site
	tab := browsertest.Tab(t, 60*time.Second)
	consoleCtx, stopConsole := context.WithCancel(tab)
	defer stopConsole()
	console := chromedp.Console(consoleCtx) // CSP violations and script errors land here
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tab, steps...); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		return browsertest.Text(t, tab, sel, 10*time.Second)
	}

	// approve records an approval of the operation the latest 403 named,
	// as the endpoint would for the agent given its ref.
	approve := func() {
		clock.Set(time.Now())
		site.approve(site.lastRef())
	}
	do(
		chromedp.Navigate(srv.URL+"/join"),
		chromedp.WaitVisible(chromedp.CSS("#joined")),
		chromedp.Navigate(srv.URL+"/order"),
		chromedp.Click(chromedp.CSS("#go"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("#opsgate-waiting")),
	)
	if title := text("#opsgate-waiting h1"); title != "Waiting for approval" || runs.Load() != 0 {
		t.Fatalf("title %q, runs %d", title, runs.Load())
	}
	approve()
	do(chromedp.WaitVisible(chromedp.CSS("#done"))) // waiting.js pressed Continue itself
	if done := text("#done"); done != `exchanged to L "><b>✓` || runs.Load() != 1 {
		t.Errorf("auto-continue: %q, runs %d", done, runs.Load())
	}

	do(
		chromedp.Navigate(srv.URL+"/spa"),
		chromedp.WaitVisible(chromedp.CSS("#spa-waiting")),
	)
	ref := text("#spa-waiting")
	if !storekit.ValidRef(ref) {
		t.Fatalf("onWaiting got ref %q", ref)
	}
	clock.Set(time.Now())
	site.approve(ref)
	do(chromedp.WaitVisible(chromedp.CSS("#spa-done")))
	if got := text("#spa-done"); got != `{"exchanged":"S"}` || runs.Load() != 2 {
		t.Errorf("opsgate.fetch: %q, runs %d", got, runs.Load())
	}

	// W93 for opsgate.fetch when the approval is of a newer revision of
	// the same terms (the agent's own request a second later: a computed
	// operation's revision follows its expires_at, W39): the repeated
	// request takes it (§6 check 3), so the script must hear "approved".
	// Asked by ref, the status route knows only the ref's revision and
	// said "waiting" until the operation expired.
	do(
		chromedp.Navigate(srv.URL+"/spa?order=ord_9"),
		chromedp.WaitVisible(chromedp.CSS("#spa-waiting")),
	)
	ref = text("#spa-waiting")
	clock.Set(time.Now().Add(2 * time.Second))
	newer := issue(t, k, "ord_9", "S")
	if _, pageRev, _ := storekit.SplitRef(ref); newer.Operation.Revision == pageRev {
		t.Fatalf("the page's revision %s was issued again: no newer revision to approve", pageRev)
	}
	site.approve(newer.Ref)
	heard, stop := context.WithTimeout(tab, 15*time.Second) // polls are 2 s, then 2.5 s apart
	err := chromedp.Do(heard, chromedp.WaitVisible(chromedp.CSS("#spa-done")))
	stop()
	if err != nil {
		t.Fatalf("W93: opsgate.fetch never heard of the approval of a newer revision of its terms: %v", err)
	}
	if got := text("#spa-done"); got != `{"exchanged":"S"}` || runs.Load() != 3 {
		t.Errorf("opsgate.fetch, newer revision approved: %q, runs %d", got, runs.Load())
	}

	// W93 on a page that is being left: the browser (the user, or an
	// agent that pressed Continue or went elsewhere) navigates away while
	// a status answer saying "approved" is on its way. The old page's
	// script must not press Continue then: its form submission would
	// abort the navigation under way (net::ERR_ABORTED) and make the
	// request behind the browser's back.
	do(
		chromedp.Navigate(srv.URL+"/order"),
		chromedp.Click(chromedp.CSS("#go"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("#opsgate-waiting")),
	)
	held.Store(true)
	approve()
	select {
	case <-polled:
	case <-tab.Done():
		t.Fatal("the waiting page never asked its status route")
	}
	// A click on the page (an agent's or a person's) gives it the user
	// activation with which a script's form submission may cancel a
	// navigation the browser started.
	do(chromedp.Click(chromedp.CSS("#opsgate-waiting h1"), chromedp.NodeVisible))
	if _, err := chromedp.Run(tab, chromedp.Navigate(srv.URL+"/leave")); err != nil {
		t.Errorf("W93: leaving a waiting page whose status answer came late: %v", err)
	}
	do(chromedp.WaitVisible(chromedp.CSS("#left")))
	time.Sleep(300 * time.Millisecond) // a submission the script made would have reached the server
	if runs.Load() != 3 {
		t.Errorf("W93: the left page's script made the request again: runs %d, want 3", runs.Load())
	}

	// The 403s are logged as failed loads; a CSP violation or an exception
	// in the kit's scripts is a failure.
	time.AfterFunc(300*time.Millisecond, stopConsole) // end the queue's reading
	for m, err := range console {
		if err != nil {
			break
		}
		if m.Type == chromedp.ConsoleException || strings.Contains(m.Text, "Content Security Policy") {
			t.Errorf("browser console %s: %s", m.Type, m.Text)
		}
	}
}

// exchangeDescribe gates POST /exchange: order and size are the terms.
func exchangeDescribe(r *http.Request) (webkit.Action, error) {
	if r.Method != http.MethodPost {
		return webkit.Action{}, webkit.ErrNotGated
	}
	order, size := r.PostFormValue("order"), r.PostFormValue("size")
	if order == "" {
		return webkit.Action{}, errors.New(`field "order" is required`)
	}
	return webkit.Action{
		Key:     "exchange:" + order,
		Terms:   map[string]string{"order_id": order, "size": size},
		Summary: "Exchange the jacket on order " + order + " for size " + size + ".",
	}, nil
}

// issue asks the store for the operation of the exchange of order for
// size, as the Gate does for a request with those terms at the Kit's time.
func issue(t *testing.T, k *webkit.Kit, order, size string) storedriver.TakeResult {
	t.Helper()
	iss, err := storetest.Issue(context.Background(), storedriver.Steps(k.Store), sesIn.Owner(), storedriver.TakeRequest{
		Key:      "exchange:" + order,
		Terms:    []byte(`{"order_id":"` + order + `","size":"` + size + `"}`),
		Summary:  "Exchange the jacket on order " + order + " for size " + size + ".",
		Lifetime: 10 * time.Minute,
	}, k.Clock())
	if err != nil {
		t.Fatal(err)
	}
	return iss
}
