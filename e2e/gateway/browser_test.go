package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/e2e/internal/browsertest"
	"github.com/opsgate/opsgate/endpoint/gateway"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/store"
)

const chromiumPath = "/usr/bin/chromium"

// W62 W65 W96 W141 A real Chromium, joined by the reference agent, in front of a
// plain net/http shop that knows nothing of the kit: the form's POST gets
// the waiting page, the agent approves, pressing the real Continue
// performs the exchange once, and pressing it again performs nothing.
func TestBrowserContinueThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}

	var exchanges atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Shop</title><p id="home">Welcome</p>`)
	})
	mux.HandleFunc("GET /orders/{order}", func(w http.ResponseWriter, r *http.Request) {
		done := ""
		if r.URL.Query().Get("done") != "" {
			done = `<p id="flash">Exchanged for size ` + r.URL.Query().Get("done") + `</p>`
		}
		fmt.Fprintf(w, `<!doctype html><title>Order</title>%s
<form method="post" action="/orders/%s/exchange"><input type="hidden" name="size" value="L"><button id="exchange">Exchange for L</button></form>`, done, r.PathValue("order"))
	})
	mux.HandleFunc("POST /orders/{order}/exchange", func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		http.Redirect(w, r, "/orders/"+r.PathValue("order")+"?done="+r.PostFormValue("size"), http.StatusSeeOther)
	})
	up := httptest.NewServer(mux)
	defer up.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	setKeys(t)
	cfg := strings.NewReplacer("https://shop.example", origin, "store: memory", "store: memory\nallow_local: true", "UPSTREAM", up.URL).Replace(shopConfig)
	c, err := gateway.Parse("gateway.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gw := &httptest.Server{Listener: ln, Config: &http.Server{Handler: g}}
	gw.Start()
	defer gw.Close()

	dir := t.TempDir()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir))
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("chromium: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	a, err := refagent.New(ctx, refagent.Config{Shop: origin, Browser: tab, Log: &testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Join(ctx, refagent.JoinOptions{}); err != nil {
		t.Fatalf("join: %v", err)
	}
	run := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	run(chromedp.Navigate(origin+"/orders/ord_7"), chromedp.Click("#exchange", chromedp.NodeVisible))
	if h := browsertest.Text(t, tab, "#opsgate-waiting h1", 20*time.Second); !strings.Contains(h, "Waiting for approval") {
		t.Fatalf("the waiting page says %q", h)
	}
	if exchanges.Load() != 0 {
		t.Fatal("performed before approval")
	}
	if h := browsertest.Text(t, tab, ".site-header", 5*time.Second); h != "Ridgeline masthead" {
		t.Errorf("the waiting page's header is %q, want the site's chrome", h)
	}
	out, err := a.Approve(ctx, refagent.DeciderFunc(func(_ context.Context, q refagent.Question) (refagent.Decision, error) {
		if q.Summary != "Exchange the jacket on order ord_7 for size L." {
			t.Errorf("the agent was asked %q", q.Summary)
		}
		return refagent.Decision{Approve: true, Approver: store.ApproverUser, InputType: "tap"}, nil
	}), refagent.NoRepeat())
	if err != nil {
		t.Fatalf("approve: %v (%+v)", err, out)
	}
	// The person presses the page's real Continue.
	run(chromedp.Click("#opsgate-continue button", chromedp.NodeVisible))
	if f := browsertest.Text(t, tab, "#flash", 20*time.Second); f != "Exchanged for size L" {
		t.Fatalf("after Continue the page says %q", f)
	}
	if n := exchanges.Load(); n != 1 {
		t.Fatalf("performed %d times, want 1", n)
	}
	// The same form again: the approval is used up (W96), so the
	// browser waits again (a new operation, W141) and nothing more is
	// performed.
	run(chromedp.Navigate(origin+"/orders/ord_7"), chromedp.Click("#exchange", chromedp.NodeVisible))
	if h := browsertest.Text(t, tab, "#opsgate-waiting h1", 20*time.Second); !strings.Contains(h, "Waiting for approval") {
		t.Fatalf("the second exchange's page says %q", h)
	}
	if n := exchanges.Load(); n != 1 {
		t.Fatalf("performed %d times, want 1", n)
	}
}

// testLog sends the agent's steps to the test's log.
type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
