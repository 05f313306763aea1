// Package e2e_test drives the demo shop with the reference agent
// (demo/agent/refagent) in a real headless Chromium, and checks the shop's
// data after each flow (issue 5, "End-to-end tests").
//
// Chromium is /usr/bin/chromium. Without it the tests SKIP, unless
// OPSGATE_REQUIRE names chromium (CI), and then they fail.
package e2e_test

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/e2e/internal/browsertest"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/store"
)

const chromiumPath = "/usr/bin/chromium"

// One Chromium for the whole run; each test gets its own browser context
// (its own cookies) and tabs in it.
var (
	browserCtx context.Context
	browserErr error
)

func TestMain(m *testing.M) {
	flag.Parse() // for testing.Short: under -short no test needs Chromium
	var stop func()
	if _, err := os.Stat(chromiumPath); err == nil && !testing.Short() {
		browserCtx, stop, browserErr = startChromium()
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

func startChromium() (context.Context, func(), error) {
	dir, err := os.MkdirTemp("", "opsgate-e2e-chromium-")
	if err != nil {
		return nil, nil, err
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.WindowSize(1200, 900),
		chromedp.UserDataDir(dir),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	stop := func() {
		cancelBrowser()
		cancelAlloc()
		os.RemoveAll(dir)
	}
	if err := chromedp.Do(bctx); err != nil { // start it
		stop()
		return nil, nil, err
	}
	return bctx, stop, nil
}

// clock is the shop's and the agent's clock: real time plus an offset the
// test can move (a revision's expiry without sleeping).
type clock = testclock.Clock

// env is one demo shop on loopback, in-process, with its own store.
type env struct {
	shop  *shop.Server
	url   string
	clock *clock
	// mux serves the shop; a test may add test-only routes to it.
	mux *http.ServeMux
	// endpointCalls counts requests to the operations endpoint.
	endpointCalls atomic.Int64
	// actionPosts counts the browser's POSTs to gated routes, by path.
	mu          sync.Mutex
	actionPosts map[string]int
	// lastAgent is the agent newAgent made last: db reads its sandbox.
	lastAgent *refagent.Agent
}

// customerPassword is the demo customer's password for the shop's own login.
const customerPassword = "e2e customer password"

func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	if browserErr != nil {
		t.Fatalf("chromium could not start: %v", browserErr)
	}
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{clock: testclock.Real(), mux: http.NewServeMux(), url: "http://" + ln.Addr().String(), actionPosts: map[string]int{}}
	e.shop, err = shop.NewServer(shop.Config{
		BaseURL:    e.url,
		Clock:      e.clock.Now,
		AllowLocal: true, // demo mode: the agent is on 127.0.0.1 over http
		Logger:     slog.New(slog.DiscardHandler),
		// The shop's own login, typed by the person (W56).
		CustomerPassword: customerPassword,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.shop.Handler()
	e.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == shop.PathOperations {
			e.endpointCalls.Add(1)
		} else if r.Method == http.MethodPost {
			e.mu.Lock()
			e.actionPosts[r.URL.Path]++
			e.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: e.mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return e
}

func (e *env) posts(path string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.actionPosts[path]
}

// newAgent starts a reference agent with a fresh browser context (its own
// cookies) in the shared Chromium. Its steps go to the test log.
func (e *env) newAgent(t *testing.T) (*refagent.Agent, context.Context) {
	t.Helper()
	w := &testLog{t: t}
	t.Cleanup(w.close) // registered first, so it runs after the tab closes
	tab, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	a, err := refagent.New(t.Context(), refagent.Config{Shop: e.url, Browser: tab, Clock: e.clock.Now, Log: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	e.mu.Lock()
	e.lastAgent = a
	e.mu.Unlock()
	return a, tab
}

// db is the demo data that the test's (last made) agent sees: its User's
// own sandbox, which every browser joined to one of its Sessions shares.
func (e *env) db(t *testing.T) *shopdb.DB {
	t.Helper()
	e.mu.Lock()
	a := e.lastAgent
	e.mu.Unlock()
	if a == nil {
		t.Fatal("no agent yet: the shop's data is per agent")
	}
	return e.shop.Sandbox(a.ClientID(), a.User())
}

// testLog writes the agent's steps to the test log, line by line, until
// the test ends.
type testLog struct {
	mu     sync.Mutex
	t      *testing.T
	buf    bytes.Buffer
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			break
		}
		l.t.Log(strings.TrimRight(line, "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// --- helpers ---

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func join(t *testing.T, a *refagent.Agent, opts refagent.JoinOptions) *refagent.Session {
	t.Helper()
	s, err := a.Join(ctxTimeout(t, 20*time.Second), opts)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	return s
}

func do(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// in runs chromedp steps on a tab with a timeout.
func in(t *testing.T, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// text reads a visible element's text (browsertest.Text).
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	return browsertest.Text(t, tab, sel, 20*time.Second)
}

// waitText waits until the element's text contains want.
func waitText(t *testing.T, tab context.Context, sel, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
		cancel()
		if err == nil && strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never read %q (last %q, %v)", sel, want, s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPath waits until tab shows a page at path, loaded: text that a page
// before it also shows can't tell a navigation under way from one done.
func waitPath(t *testing.T, tab context.Context, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + " " + document.readyState`))
		cancel()
		if err == nil && got == path+" complete" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tab never showed %s (last %q, %v)", path, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitingPage waits for the kit's waiting page in tab (§4, W65).
func waitingPage(t *testing.T, tab context.Context) {
	t.Helper()
	waitText(t, tab, "#opsgate-waiting h1", "Waiting for approval")
}

// screenshot saves the tab's page under e2e/artifacts (gitignored).
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.MkdirAll("artifacts", 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("artifacts", name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: e2e/%s", path)
}

func location(t *testing.T, tab context.Context) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// exchangeOnce is the standing instruction of most tests: approve any
// exchange whose price difference is at most 100 USD, as the agent.
func exchangeOnce(t *testing.T) *refagent.Standing {
	r, err := refagent.ParseRule("exchange<=100USD")
	if err != nil {
		t.Fatal(err)
	}
	return &refagent.Standing{Rules: []refagent.Rule{r}}
}

// userApproves is a user who approves whatever is asked, recording the
// questions.
type userApproves struct {
	mu    sync.Mutex
	asked []refagent.Question
}

func (u *userApproves) Decide(_ context.Context, q refagent.Question) (refagent.Decision, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asked = append(u.asked, q)
	return refagent.Decision{Approve: true, Approver: store.ApproverUser, InputType: "tap"}, nil
}

func (u *userApproves) questions() []refagent.Question {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]refagent.Question(nil), u.asked...)
}

func noDecider(t *testing.T) refagent.Decider {
	return refagent.DeciderFunc(func(_ context.Context, q refagent.Question) (refagent.Decision, error) {
		t.Errorf("the agent asked about %s revision %s; it must not approve or ask here", q.Operation.ID, q.Operation.Revision)
		return refagent.Decision{}, nil
	})
}

func lastRef(t *testing.T, a *refagent.Agent) refagent.Reference {
	t.Helper()
	r, ok := a.LastOperationHeader()
	if !ok {
		t.Fatal("the agent took no reference")
	}
	return r
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
