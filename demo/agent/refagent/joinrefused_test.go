package refagent

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/internal/testenv"
)

// joinShop is the demo shop on loopback, in-process, in demo mode (agents
// on 127.0.0.1 over http are accepted): its real join,
// the kit's join, behind endpoint.Mount.
func joinShop(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	s, err := shop.NewServer(shop.Config{BaseURL: base, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	return base
}

// loopbackAgent is an Agent without a browser: its keys, its metadata and
// JWKS on loopback (which the shop fetches), and the shop's poppy.json.
func loopbackAgent(t *testing.T, shopURL string, clock func() time.Time) *Agent {
	t.Helper()
	a, err := start(t.Context(), Config{Shop: shopURL, Clock: clock, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// browserClient is a browser's cookies without its pages: the test sees
// each answer of the join itself.
func browserClient(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var (
	htmlTitle = regexp.MustCompile(`(?s)<title>.*?</title>`)
	htmlTag   = regexp.MustCompile(`<[^>]*>`)
)

// postJoin submits a's join form from browser, as Join's page does, and
// reads the answer as Join does: the status, the headers and the text the
// browser shows (an HTML page without its title and tags).
func postJoin(t *testing.T, a *Agent, browser *http.Client, opts JoinOptions) (status int, err error) {
	t.Helper()
	s, form, _, err := a.joinForm(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := browser.PostForm(a.disc.Join, form)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusSeeOther {
		return res.StatusCode, nil
	}
	text := string(raw)
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		text = htmlTag.ReplaceAllString(htmlTitle.ReplaceAllString(text, ""), " ")
	}
	return res.StatusCode, a.joinRefusal(res.StatusCode, res.Header, text, s.SignedIn)
}

// A join into a browser already joined to another agent's Session: the
// demo shop answers 409, and the agent says so in words, with what to do.
func TestJoinRefusedConflict(t *testing.T) {
	t.Parallel()
	shopURL := joinShop(t)
	first, second := loopbackAgent(t, shopURL, nil), loopbackAgent(t, shopURL, nil)
	browser := browserClient(t)
	if status, err := postJoin(t, first, browser, JoinOptions{}); status != http.StatusSeeOther {
		t.Fatalf("the first join: %d %v, want 303", status, err)
	}
	status, err := postJoin(t, second, browser, JoinOptions{})
	if status != http.StatusConflict {
		t.Fatalf("the second agent's join into the same browser: %d %v, want 409", status, err)
	}
	if !errors.Is(err, ErrJoinRefused) || !errors.Is(err, ErrJoinConflict) || errors.Is(err, ErrSessionRefused) {
		t.Fatalf("err = %v: want ErrJoinRefused and ErrJoinConflict, not ErrSessionRefused", err)
	}
	var refused *JoinRefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusConflict || refused.Endpoint != shopURL+shop.PathJoin {
		t.Fatalf("errors.As: %#v", refused)
	}
	if !strings.Contains(refused.Description, "This browser is already joined to another session") {
		t.Errorf("Description %q lacks the website's words", refused.Description)
	}
	for _, want := range []string{"409 Conflict", shopURL + shop.PathJoin, "already joined to another agent's", "clear the browser's cookies for " + shopURL, "fresh browser profile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Error() lacks %q:\n%s", want, err)
		}
	}
	ex := refused.Explain()
	if !strings.Contains(ex, "what to do:") || strings.Count(ex, "\n") < 3 {
		t.Errorf("Explain:\n%s", ex)
	}
	t.Logf("%s\n%s", err, ex)
	// The same agent and User may join the browser to a new Session.
	if status, err := postJoin(t, first, browser, JoinOptions{}); status != http.StatusSeeOther {
		t.Fatalf("the first agent's join again: %d %v, want 303", status, err)
	}
}

// A join the website can't verify (here: the agent's clock is 10 minutes
// slow, so its assertion has expired): the demo shop answers 401 with
// Poppy-Session error="invalid_session", and the agent says so in words,
// with what to check.
func TestJoinRefusedUnauthorized(t *testing.T) {
	t.Parallel()
	shopURL := joinShop(t)
	slow := loopbackAgent(t, shopURL, func() time.Time { return time.Now().Add(-10 * time.Minute) })
	status, err := postJoin(t, slow, browserClient(t), JoinOptions{})
	if status != http.StatusUnauthorized {
		t.Fatalf("join with an expired assertion: %d %v, want 401", status, err)
	}
	if !errors.Is(err, ErrJoinRefused) || !errors.Is(err, ErrSessionRefused) || errors.Is(err, ErrJoinConflict) {
		t.Fatalf("err = %v: want ErrJoinRefused and ErrSessionRefused, not ErrJoinConflict", err)
	}
	var refused *JoinRefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized || refused.Code != "invalid_session" {
		t.Fatalf("errors.As: %#v", refused)
	}
	// The demo explains its refusals: the website's words say which check
	// failed, and the advice follows them.
	if !strings.HasPrefix(refused.Description, "the join could not be verified (invalid_session): browser assertion: exp ") || !strings.Contains(refused.Description, "has passed") {
		t.Errorf("Description %q, want the website's words with the reason", refused.Description)
	}
	t.Logf("%s\n%s", err, refused.Explain())
	for _, want := range []string{"401 Unauthorized", "error invalid_session", "clocks disagree"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Error() lacks %q:\n%s", want, err)
		}
	}
}

// The website's words are plain text on one line, bounded; a JSON body's
// error and description are read.
func TestJoinRefusalBody(t *testing.T) {
	a := &Agent{origin: "http://shop.test", disc: Discovery{Join: "http://shop.test/poppy/join"}}
	e := a.joinRefusal(http.StatusBadRequest, http.Header{}, `{"error":"invalid_request","error_description":"no \u001b[31massertion"}`, false)
	if e.Code != "invalid_request" || e.Description != "no [31massertion" || !strings.Contains(e.Advice, "application/x-www-form-urlencoded") {
		t.Errorf("JSON body: %#v", e)
	}
	long := strings.Repeat("word ", 200) + "\n\n\tend"
	if e := a.joinRefusal(http.StatusConflict, nil, long, false); len([]rune(e.Description)) != maxJoinDescription || strings.ContainsAny(e.Description, "\n\t") {
		t.Errorf("long body kept as %d characters: %q", len([]rune(e.Description)), e.Description)
	}
	if e := a.joinRefusal(0, nil, "", false); !errors.Is(e, ErrJoinRefused) || !strings.Contains(e.Error(), "no answer") {
		t.Errorf("no answer: %v", e)
	}
}

// Through a real Chromium: Join reads the refusal from the browser (its
// status, WWW-Authenticate and the page's text) as joinRefusal expects.
func TestJoinRefusedInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	const chromiumPath = "/usr/bin/chromium"
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	shopURL := joinShop(t)
	newAgent := func(clock func() time.Time) *Agent {
		return agentFor(t, Config{Shop: shopURL, Browser: tab, Clock: clock, StepTimeout: 20 * time.Second, Log: io.Discard})
	}

	_, err := newAgent(func() time.Time { return time.Now().Add(-10 * time.Minute) }).Join(t.Context(), JoinOptions{})
	var refused *JoinRefusedError
	if !errors.Is(err, ErrSessionRefused) || !errors.As(err, &refused) || refused.Code != "invalid_session" || !strings.HasPrefix(refused.Description, "the join could not be verified (invalid_session): browser assertion: exp ") {
		t.Fatalf("401: err = %v", err)
	}
	if _, err := newAgent(nil).Join(t.Context(), JoinOptions{}); err != nil {
		t.Fatalf("the first agent's join: %v", err)
	}
	_, err = newAgent(nil).Join(t.Context(), JoinOptions{})
	if !errors.Is(err, ErrJoinConflict) || !errors.As(err, &refused) || !strings.HasPrefix(refused.Description, "This browser is already joined to another session. It was not joined again.") {
		t.Fatalf("409: err = %v", err)
	}
	t.Log(err)
}
