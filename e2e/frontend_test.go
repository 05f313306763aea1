package e2e_test

// htmx and Turbo in a real Chromium (issue 35, "A real-browser matrix"):
// a GOTH-style shop (net/http ServeMux, the kit's Mount, a CSRF library
// inside it) whose gated action is an htmx form that swaps a fragment, a
// Turbo form in a frame, or a Turbo Drive form, with the CSRF token only
// in a header (gorilla/csrf: the token in a <meta>, sent by htmx's
// hx-headers or Turbo's own X-CSRF-Token) or in the form (justinas/nosurf).
// The page loads /_opsgate/card.js once in its layout, as
// webkit/FRONTENDS.md "htmx and Turbo" asks, and nothing else changes. In each cell the browser presses
// the button (a real click), the Gate answers 403 with the waiting card,
// which the page shows inside itself (W65) in the kit's style; the
// reference agent approves; the page repeats the request itself the
// framework's way, so the CSRF header rides along (W62, W93); the card's
// status changes to approved; the handler, where the side effect is
// counted, runs exactly once (W32, W135).
//
// The frameworks' files are the npm packages' own (htmx.org 2.0.11 and
// 4.0.1, @hotwired/turbo 8.0.23), vendored with their licences under
// e2e/testdata (see its README.md).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"html/template"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/e2e/internal/gothshop"
	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
)

// feFramework is a front-end framework of the matrix.
type feFramework struct {
	name string
	lib  string // its file under testdata
	// htmx is 2 or 4 for htmx; 0 for Turbo.
	htmx int
	// frame: the Turbo form is in a <turbo-frame>; else Turbo Drive.
	frame bool
}

var feFrameworks = []feFramework{
	{name: "htmx2", lib: "htmx2/htmx.min.js", htmx: 2},
	{name: "htmx4", lib: "htmx4/htmx.min.js", htmx: 4},
	{name: "turbo8-frame", lib: "turbo8/turbo.es2017-umd.js", frame: true},
	{name: "turbo8-drive", lib: "turbo8/turbo.es2017-umd.js"},
}

// feToken is where the page keeps the CSRF token: only in a header
// (gorilla/csrf) or in the form (nosurf).
type feToken struct {
	name   string
	prot   mxProtection
	header bool // the token only in a header, never in a form
}

func feTokens() []feToken {
	var out []feToken
	for _, p := range mxProtections {
		switch p.name {
		case "gorillacsrf":
			out = append(out, feToken{name: "header-gorillacsrf", prot: p, header: true})
		case "nosurf":
			out = append(out, feToken{name: "form-nosurf", prot: p})
		}
	}
	return out
}

// feSite is one shop of the matrix.
type feSite struct {
	kit    *webkit.Kit
	url    string
	fw     feFramework
	tok    feToken
	noCard bool // the layout does not load card.js (TestCardWithoutItsScript)
	// htmxAttrs replaces the htmx form's hx-target with other attributes
	// (TestHtmxSwaps); headersOnForm puts hx-headers on the form itself
	// rather than the body.
	htmxAttrs     template.HTMLAttr
	headersOnForm bool
	// goth: the shop of issue 35: its templ pages (gothshop), its own
	// login (a cookie /shop needs) and a fetch-driven widget beside the
	// htmx form (TestGOTHShop).
	goth bool
	lib  []byte

	mu         sync.Mutex
	runs       int      // every run of the gated handler, counted at the handler
	performed  []string // what each run performed
	deliveries []string // the fetch widget's runs (TestGOTHShop)
	refusals   []string // why the CSRF library refused a request
	refused    chan string
}

func newFeSite(t *testing.T, fw feFramework, tok feToken, noCard bool) *feSite {
	t.Helper()
	lib, err := os.ReadFile(filepath.Join("testdata", fw.lib))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &feSite{url: "http://" + ln.Addr().String(), fw: fw, tok: tok, noCard: noCard, lib: lib, refused: make(chan string, 16)}
	hashKey, encKey := make([]byte, 32), make([]byte, 32)
	rand.Read(hashKey)
	rand.Read(encKey)
	s.kit = webkit.New(hashKey, encKey)
	m, err := endpoint.NewMount(endpoint.Config{Origin: s.url, Name: "Ridge " + fw.name, Kit: s.kit, AllowLocal: true})
	if err != nil {
		t.Fatal(err)
	}
	refused := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		why := r.Method + " " + r.URL.Path + ": " + tok.prot.reason(r)
		s.mu.Lock()
		s.refusals = append(s.refusals, why)
		s.mu.Unlock()
		select {
		case s.refused <- why:
		default:
		}
		http.Error(w, "refused by "+tok.prot.name, http.StatusForbidden)
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /static/lib.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Write(s.lib)
	})
	mux.HandleFunc("GET /static/shop.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		fmt.Fprint(w, feShopCSS)
	})
	mux.HandleFunc("GET /shop", s.shop)
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Sign in</title><form id="login" method="post" action="/login"><input type="hidden" name="%s" value="%s"><input name="email" value="ann@example.com"><input type="password" name="password" value="hunter2"><button>Sign in</button></form>`,
			template.HTMLEscapeString(tok.prot.field), template.HTMLEscapeString(tok.prot.token(r)))
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "shop_login", Value: rand.Text(), Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/shop", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		fmt.Fprint(w, feWidgetJS)
	})
	mux.Handle("POST /api/orders/{order}/delivery", s.kit.Gate(s.describeDelivery)(http.HandlerFunc(s.delivery)))
	mux.Handle("POST /orders/{order}/exchange", s.kit.Gate(s.describe)(http.HandlerFunc(s.exchange)))
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: m.Handler(tok.prot.protect(refused)(mux))}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

var feShopT = template.Must(template.New("shop").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ridge shop</title>
{{if .Meta}}<meta name="csrf-token" content="{{.Token}}">{{end}}
<link rel="stylesheet" href="/static/shop.css">
<script src="/static/lib.js"></script>
{{if .Card}}<script src="/_opsgate/card.js" defer></script>{{end}}
{{if .Widget}}<meta name="csrf-header" content="{{.Header}}"><meta name="csrf-token" content="{{.Token}}"><script src="/_opsgate/fetch.js"></script><script src="/app.js" defer></script>{{end}}
</head>
{{if .OnForm}}<body>{{else if eq .HTMX 2}}<body hx-headers='{{.Headers}}'>{{else if eq .HTMX 4}}<body hx-headers:inherited='{{.Headers}}'>{{else}}<body>{{end}}
<header id="masthead">Ridge shop</header>
<main id="cart">
<h1>Order {{.Order}}</h1>
{{if .HTMX}}
<form id="exchange" hx-post="/orders/{{.Order}}/exchange" {{if .Attrs}}{{.Attrs}}{{else}}hx-target="#result"{{end}}{{if .OnForm}} hx-headers='{{.Headers}}'{{end}}>
{{if .Field}}<input type="hidden" name="{{.Field}}" value="{{.Token}}">{{end}}
<label>Size <select name="size"><option>M</option><option selected>L</option></select></label>
<button type="submit">Exchange</button>
</form>
<div id="notice"></div>
<div id="result">Nothing exchanged yet.</div>
{{if .Widget}}<p><button id="deliver" type="button" data-order="{{.Order}}">Deliver on 2030-04-17</button> <span id="status">Ready</span></p>{{end}}
{{else}}
{{if .Frame}}<turbo-frame id="exchange-frame">{{end}}
<form id="exchange" method="post" action="/orders/{{.Order}}/exchange">
{{if .Field}}<input type="hidden" name="{{.Field}}" value="{{.Token}}">{{end}}
<label>Size <select name="size"><option>M</option><option selected>L</option></select></label>
<button type="submit">Exchange</button>
</form>
{{if .Frame}}</turbo-frame>{{end}}
{{if .Done}}<p id="done">{{.Done}}</p>{{end}}
{{end}}
</main>
<footer id="footer">Ridge shop, since 1987</footer>
</body></html>`))

const feOrder = "ord_3Gk7"

const feShopCSS = `body { background: #c9d3e3; font-family: sans-serif; margin: 0; } header, footer { padding: 1rem; background: #123; color: #fff; } main { padding: 1rem; }`

func (s *feSite) shop(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie("shop_login"); s.goth && err != nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	token := s.tok.prot.token(r)
	if s.goth { // the GOTH shop's own templ pages
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		gothshop.Page(gothshop.Shop{Order: feOrder, Header: s.tok.prot.header, Token: token}).Render(r.Context(), w)
		return
	}
	data := map[string]any{
		"Order": feOrder, "Token": token, "HTMX": s.fw.htmx, "Frame": s.fw.frame, "Card": !s.noCard,
		"Done": r.URL.Query().Get("done"), "Attrs": s.htmxAttrs, "OnForm": s.headersOnForm,
		"Widget": s.goth, "Header": s.tok.prot.header,
		// The header-only token: htmx sends it from hx-headers (htmx 4
		// inherits it only when it says so), Turbo from the csrf-token
		// meta; the form has no field.
		"Meta":    s.tok.header && s.fw.htmx == 0,
		"Headers": "{}",
	}
	if s.tok.header {
		data["Headers"] = fmt.Sprintf(`{"%s": "%s"}`, s.tok.prot.header, token)
	} else {
		data["Field"] = s.tok.prot.field
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	feShopT.Execute(w, data)
}

func (s *feSite) describe(r *http.Request) (webkit.Action, error) {
	size := r.PostFormValue("size")
	if size == "" {
		return webkit.Action{}, fmt.Errorf("size: required")
	}
	o := r.PathValue("order")
	return webkit.Action{Key: "exchange:" + o, Kind: "exchange", Terms: map[string]any{"order_id": o, "size": size},
		Summary: "Exchange order " + o + " for size " + size + "."}, nil
}

// exchange answers as webkit/FRONTENDS.md "htmx and Turbo" advises: htmx gets the
// fragment it swaps, a Turbo frame its frame, anything else a redirect to
// a page (so that a repeat from a page never lands on a bare fragment).
func (s *feSite) exchange(w http.ResponseWriter, r *http.Request) {
	size, o := r.PostFormValue("size"), r.PathValue("order")
	s.mu.Lock()
	s.runs++
	s.performed = append(s.performed, o+" "+size)
	s.mu.Unlock()
	done := "Exchanged order " + o + " for size " + size
	switch {
	case r.Header.Get("HX-Request") == "true" && s.goth:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		gothshop.Exchanged(done).Render(r.Context(), w)
	case r.Header.Get("HX-Request") == "true":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<p id="done">%s</p>`, template.HTMLEscapeString(done))
	case r.Header.Get("Turbo-Frame") != "":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><title>Exchanged</title></head><body><turbo-frame id="exchange-frame"><p id="done">%s</p></turbo-frame></body></html>`, template.HTMLEscapeString(done))
	default:
		http.Redirect(w, r, "/shop?done="+strings.ReplaceAll(done, " ", "+"), http.StatusSeeOther)
	}
}

func (s *feSite) counts() (runs int, performed, refusals []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs, slices.Clone(s.performed), slices.Clone(s.refusals)
}

func needBrowser(t *testing.T) {
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
}

// feAgent starts a reference agent in a fresh browser context of the
// shared Chromium, joins it and lands on the shop; log gets its steps.
func feAgent(t *testing.T, s *feSite, log *agentLog) (*refagent.Agent, context.Context) {
	t.Helper()
	tab, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	a, err := refagent.New(t.Context(), refagent.Config{Shop: s.url, Browser: tab, Log: log, StepTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	join(t, a, refagent.JoinOptions{ReturnTo: "/shop"})
	return a, tab
}

// agentLog keeps the agent's steps and writes them to the test log.
type agentLog struct {
	testLog
	mu    sync.Mutex
	lines strings.Builder
}

func newAgentLog(t *testing.T) *agentLog {
	l := &agentLog{testLog: testLog{t: t}}
	t.Cleanup(l.close)
	return l
}

func (l *agentLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines.Write(p)
	l.mu.Unlock()
	return l.testLog.Write(p)
}

func (l *agentLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.String()
}

// eval runs js in tab and returns its value.
func eval[T any](t *testing.T, tab context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// cardJS is the live card (card.js bound it), whatever the framework.
const cardSel = ".opsgate-card[data-opsgate-via]"

// recordStates keeps every text the card's status line shows, from now
// on, in window.opsgateStates: the status changes fast once approved.
const recordStates = `(() => {
	const read = () => { const s = document.querySelector('.opsgate-card[data-opsgate-via] .opsgate-state'); return s ? s.textContent : null; };
	window.opsgateStates = [read()];
	new MutationObserver(() => { const v = read(); if (v !== null && window.opsgateStates[window.opsgateStates.length - 1] !== v) window.opsgateStates.push(v); })
		.observe(document.documentElement, { subtree: true, childList: true, characterData: true });
	return true;
})()`

// checkCardInPage checks, in the DOM and in a screenshot, that the card is
// shown inside the shop's page, in the kit's style: inside the target the
// framework swaps (htmx: #result; a Turbo frame: the frame), or over the
// page (Turbo Drive), the shop's masthead and footer once each.
func checkCardInPage(t *testing.T, s *feSite, tab context.Context, name string) {
	t.Helper()
	in(t, tab, chromedp.WaitVisible(chromedp.CSS(cardSel+" .opsgate-state")))
	var where string
	switch {
	case s.fw.htmx != 0:
		where = "#result > " + cardSel
	case s.fw.frame:
		where = "turbo-frame#exchange-frame > " + cardSel
	default:
		where = "body > .opsgate-overlay > " + cardSel
	}
	got := eval[map[string]any](t, tab, `(() => {
		const c = document.querySelector(`+jsString(where)+`), any = document.querySelector(`+jsString(cardSel)+`);
		const r = any ? any.getBoundingClientRect() : {width: 0, height: 0, top: -1, bottom: -1};
		return {
			inPlace: !!c,
			cards: document.querySelectorAll('.opsgate-card').length,
			mastheads: document.querySelectorAll('#masthead').length,
			footers: document.querySelectorAll('#footer').length,
			pages: document.querySelectorAll('html html, body body, main.opsgate-card, #opsgate-waiting').length,
			radius: any ? getComputedStyle(any).borderTopLeftRadius : '',
			background: any ? getComputedStyle(any).backgroundColor : '',
			state: any ? any.querySelector('.opsgate-state').textContent : '',
			visible: r.width > 200 && r.height > 100 && r.top >= 0 && r.bottom <= innerHeight,
			form: !!document.querySelector('form#exchange'),
		};
	})()`)
	if got["inPlace"] != true || got["cards"] != 1.0 || got["mastheads"] != 1.0 || got["footers"] != 1.0 || got["pages"] != 0.0 {
		t.Errorf("W65: the card is not shown once inside the shop's page at %s: %v", where, got)
	}
	if got["radius"] != "12px" || got["background"] != "rgb(255, 255, 255)" || got["visible"] != true {
		t.Errorf("the card is not in the kit's style (opsgate.css, which card.js links) or not on screen: %v", got)
	}
	if got["state"] != "Nothing has been done yet." {
		t.Errorf("the card's status line: %q", got["state"])
	}
	if !s.fw.frame && s.fw.htmx == 0 && got["form"] != true {
		t.Errorf("Turbo Drive: the card must go over the page, the form stays: %v", got)
	}

	// The screenshot: the card's own pixels are the kit's card (white,
	// on the shop's blue-grey page), at the size the DOM says.
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(cardSel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("screenshot of the card: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 200 || b.Dy() < 100 {
		t.Errorf("the card's screenshot is %dx%d", b.Dx(), b.Dy())
	}
	if r, g, bl, _ := img.At(b.Max.X-20, b.Min.Y+20).RGBA(); r>>8 < 250 || g>>8 < 250 || bl>>8 < 250 {
		t.Errorf("the card's screenshot is not the kit's white card at its corner: rgb(%d,%d,%d)", r>>8, g>>8, bl>>8)
	}
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil && os.MkdirAll("artifacts", 0o755) == nil {
		os.WriteFile(filepath.Join("artifacts", "frontend-"+name+".png"), full, 0o644)
	}
}

// feRun: the browser presses Exchange, the card shows, the agent
// approves, the page repeats the request, the handler runs once.
func feRun(t *testing.T, s *feSite, opts ...refagent.Option) (log *agentLog, tab context.Context) {
	log = newAgentLog(t)
	a, tab := feAgent(t, s, log)
	in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
	checkCardInPage(t, s, tab, strings.ReplaceAll(t.Name(), "/", "-"))
	if runs, _, _ := s.counts(); runs != 0 {
		t.Fatalf("W33: the handler ran %d times before an approval", runs)
	}
	if r := lastRef(t, a); r.Method != "POST" || !strings.HasSuffix(r.URL, "/orders/"+feOrder+"/exchange") || r.Resource == "Document" {
		t.Errorf("A08: the reference came from %s %s (%s)", r.Method, r.URL, r.Resource)
	}
	eval[bool](t, tab, recordStates)

	u := &mxApprover{}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	type result struct {
		out refagent.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := a.Approve(ctx, u, opts...)
		done <- result{out, err}
	}()
	select {
	case res := <-done:
		if res.err != nil || res.out.Result != refagent.Performed {
			_, _, refusals := s.counts()
			t.Fatalf("approve: %q %v (the CSRF library refused: %q)", res.out.Result, res.err, refusals)
		}
	case why := <-s.refused:
		cancel()
		<-done
		t.Fatalf("W62: %s refused the repeated request (%s): it lost the page's CSRF token", s.tok.prot.name, why)
	}
	if len(u.asked) != 1 || !strings.Contains(string(u.asked[0].Operation.Terms), `"size":"L"`) {
		t.Errorf("the agent was asked %d times; terms %v", len(u.asked), terms(u.asked))
	}

	waitText(t, tab, "#done", "Exchanged order "+feOrder+" for size L")
	time.Sleep(500 * time.Millisecond) // a late second repeat would land here
	runs, performed, refusals := s.counts()
	if runs != 1 || !slices.Equal(performed, []string{feOrder + " L"}) {
		t.Errorf("W32, W135: the handler ran %d times (%q); want once", runs, performed)
	}
	if len(refusals) != 0 {
		t.Errorf("%s refused %q", s.tok.prot.name, refusals)
	}
	states := eval[[]string](t, tab, `window.opsgateStates || []`)
	if !slices.Contains(states, "Approved. Continuing\u2026") {
		t.Errorf("W93: the card's status never said approved: %q", states)
	}
	left := eval[map[string]any](t, tab, `({cards: document.querySelectorAll('.opsgate-card').length, mastheads: document.querySelectorAll('#masthead').length})`)
	if left["cards"] != 0.0 || left["mastheads"] != 1.0 {
		t.Errorf("after the repeat: %v; want no card, the page once", left)
	}
	t.Logf("cell %s: handler runs %d, states %q", t.Name(), runs, states)
	return log, tab
}

// TestFrontendMatrix: htmx 2, htmx 4, Turbo 8 (a frame and Drive), each
// with a CSRF token only in a header and one in the form, performed once
// through the page's own repeat when the reference agent approves (issue
// 35 "Done when").
func TestFrontendMatrix(t *testing.T) {
	needBrowser(t)
	tabs := make(chan struct{}, mxTabs)
	for _, fw := range feFrameworks {
		for _, tok := range feTokens() {
			t.Run(fw.name+"/"+tok.name, func(t *testing.T) {
				t.Parallel()
				tabs <- struct{}{}
				defer func() { <-tabs }()
				s := newFeSite(t, fw, tok, false)
				log, _ := feRun(t, s)
				if !strings.Contains(log.String(), "the page repeated POST "+s.url+"/orders/"+feOrder+"/exchange itself") {
					t.Errorf("W93: the page did not repeat the request itself (card.js); the agent's steps:\n%s", log)
				}
			})
		}
	}
}

// TestCardWithoutItsScript: an htmx 4 page that does not load card.js
// still shows the card (htmx 4 swaps a 4xx) and its Continue is htmx's own
// request: the reference agent, seeing that no page script repeats it,
// presses it once (A41), and the header-only token rides along from
// hx-headers (W62).
func TestCardWithoutItsScript(t *testing.T) {
	needBrowser(t)
	var tok feToken
	for _, x := range feTokens() {
		if x.header {
			tok = x
		}
	}
	s := newFeSite(t, feFrameworks[1], tok, true)
	log := newAgentLog(t)
	a, tab := feAgent(t, s, log)
	in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
	in(t, tab, chromedp.WaitVisible(chromedp.CSS("#result > "+cardSel+" form[data-opsgate-continue] button")))
	out, err := a.Approve(ctxTimeout(t, 60*time.Second), &mxApprover{})
	if err != nil || out.Result != refagent.Performed {
		_, _, refusals := s.counts()
		t.Fatalf("approve: %q %v (refused: %q)", out.Result, err, refusals)
	}
	waitText(t, tab, "#done", "Exchanged order "+feOrder+" for size L")
	time.Sleep(500 * time.Millisecond)
	if runs, performed, refusals := s.counts(); runs != 1 || len(refusals) != 0 {
		t.Errorf("W32: the handler ran %d times (%q); refused %q", runs, performed, refusals)
	}
	if !strings.Contains(log.String(), "pressed Continue on the waiting card in the page, once") {
		t.Errorf("A41: the agent did not press the card's Continue:\n%s", log)
	}
}

// TestHtmxSwaps: where htmx would put the answer decides where the card
// goes, and the repeat answers there. The token is only in a header,
// here on the form itself (not inherited), so that a repeat that lost the
// element's own attributes would be refused (W62).
func TestHtmxSwaps(t *testing.T) {
	needBrowser(t)
	var tok feToken
	for _, x := range feTokens() {
		if x.header {
			tok = x
		}
	}
	cases := []struct {
		name   string
		attrs  template.HTMLAttr
		cardAt string // where the card shows
		done   string // where the handler's answer shows; "" for nowhere (hx-swap none)
	}{
		// The card takes the form's place; the form has left the page,
		// so card.js repeats from the card, with the form's headers, and
		// the answer replaces the card.
		{"outerHTML", `hx-target="this" hx-swap="outerHTML"`, "#cart > " + cardSel, "#cart > #done"},
		// A swap that shows nothing: the card goes over the page.
		{"none", `hx-target="#result" hx-swap="none"`, "body > .opsgate-overlay > " + cardSel, ""},
		// The site names where cards go.
		{"data-opsgate-target", `hx-target="#result" data-opsgate-target="#notice"`, "#notice > " + cardSel, "#result > #done"},
	}
	for _, fw := range feFrameworks[:2] {
		for _, c := range cases {
			t.Run(fw.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				s := newFeSite(t, fw, tok, false)
				s.htmxAttrs, s.headersOnForm = c.attrs, true
				log := newAgentLog(t)
				a, tab := feAgent(t, s, log)
				in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
				in(t, tab, chromedp.WaitVisible(chromedp.CSS(cardSel+" .opsgate-state")))
				if n := eval[int](t, tab, `document.querySelectorAll(`+jsString(c.cardAt)+`).length`); n != 1 {
					t.Fatalf("the card is not at %s:\n%s", c.cardAt, eval[string](t, tab, `document.body.outerHTML`))
				}
				out, err := a.Approve(ctxTimeout(t, 60*time.Second), &mxApprover{})
				if err != nil || out.Result != refagent.Performed {
					_, _, refusals := s.counts()
					t.Fatalf("approve: %q %v (refused: %q)", out.Result, err, refusals)
				}
				if c.done != "" {
					waitText(t, tab, c.done, "Exchanged order "+feOrder+" for size L")
				}
				time.Sleep(500 * time.Millisecond)
				if runs, performed, refusals := s.counts(); runs != 1 || len(refusals) != 0 {
					t.Errorf("W32, W62: the handler ran %d times (%q); refused %q", runs, performed, refusals)
				}
				deadline := time.Now().Add(5 * time.Second)
				for eval[int](t, tab, `document.querySelectorAll('.opsgate-card').length`) != 0 {
					if time.Now().After(deadline) {
						t.Errorf("the card stayed after the repeat was answered")
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
}

// TestHtmxOwnRefused: a site's own Kit.Refused answers htmx with the
// card inside a fragment of its own (webkit/FRONTENDS.md: the card
// alone is templates.WaitingCard, for your own fragment) and names where
// it goes with HX-Retarget. htmx 2 swaps it all the same (card.js knows a
// 403 with Poppy-Operation and HTML for a card, whatever wraps it), the
// card binds to the request, and the repeat performs once, with the
// header-only token from the form's own hx-headers (W62, W65).
func TestHtmxOwnRefused(t *testing.T) {
	needBrowser(t)
	var tok feToken
	for _, x := range feTokens() {
		if x.header {
			tok = x
		}
	}
	for _, fw := range feFrameworks[:2] {
		t.Run(fw.name, func(t *testing.T) {
			t.Parallel()
			s := newFeSite(t, fw, tok, false)
			s.headersOnForm = true
			s.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v, ok := pages.WaitingOf(r)
				if !ok || r.Header.Get("HX-Request") != "true" {
					s.kit.Refuse(w, r)
					return
				}
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.Header().Set("HX-Retarget", "#notice")
				w.Header().Set("HX-Reswap", "innerHTML")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, `<div class="site-notice"><p>Your agent asks you first.</p>`)
				templates.WaitingCard(v).Render(r.Context(), w)
				fmt.Fprint(w, `</div>`)
			})
			log := newAgentLog(t)
			a, tab := feAgent(t, s, log)
			in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
			in(t, tab, chromedp.WaitVisible(chromedp.CSS("#notice > .site-notice > "+cardSel+" .opsgate-state")))
			if got := eval[string](t, tab, `document.querySelector('#result').textContent`); got != "Nothing exchanged yet." {
				t.Errorf("the site's fragment went elsewhere: #result is %q", got)
			}
			out, err := a.Approve(ctxTimeout(t, 60*time.Second), &mxApprover{})
			if err != nil || out.Result != refagent.Performed {
				_, _, refusals := s.counts()
				t.Fatalf("approve: %q %v (refused: %q)", out.Result, err, refusals)
			}
			waitText(t, tab, "#result > #done", "Exchanged order "+feOrder+" for size L")
			time.Sleep(500 * time.Millisecond)
			if runs, performed, refusals := s.counts(); runs != 1 || len(refusals) != 0 {
				t.Errorf("W32, W62: the handler ran %d times (%q); refused %q", runs, performed, refusals)
			}
			if !strings.Contains(log.String(), "the page repeated POST "+s.url+"/orders/"+feOrder+"/exchange itself") {
				t.Errorf("W93: the page did not repeat the request itself; the agent's steps:\n%s", log)
			}
		})
	}
}

// feWidgetJS is the shop's fetch-driven widget (webkit/FRONTENDS.md
// "Single-page apps and fetch-driven pages"): opsgate.fetch, the CSRF token from the meta in its header.
const feWidgetJS = `document.getElementById("deliver").addEventListener("click", async function () {
  var status = document.getElementById("status");
  var headers = { "Content-Type": "application/json", Accept: "application/json" };
  headers[document.querySelector('meta[name="csrf-header"]').content] = document.querySelector('meta[name="csrf-token"]').content;
  var res = await opsgate.fetch("/api/orders/" + this.dataset.order + "/delivery", { method: "POST", headers: headers, body: JSON.stringify({ date: "2030-04-17" }) },
    { onWaiting: function () { status.textContent = "Waiting for approval"; } });
  status.textContent = (res.ok ? "Done: " : "Failed " + res.status + ": ") + await res.text();
});`

func (s *feSite) describeDelivery(r *http.Request) (webkit.Action, error) {
	var d mxDelivery
	if err := json.NewDecoder(r.Body).Decode(&d); err != nil || d.Date == "" {
		return webkit.Action{}, fmt.Errorf("a JSON body with a date: required")
	}
	o := r.PathValue("order")
	return webkit.Action{Key: "delivery:" + o, Kind: "delivery", Terms: map[string]any{"order_id": o, "date": d.Date}, Summary: "Deliver order " + o + " on " + d.Date + "."}, nil
}

func (s *feSite) delivery(w http.ResponseWriter, r *http.Request) {
	var d mxDelivery
	json.NewDecoder(r.Body).Decode(&d)
	s.mu.Lock()
	s.deliveries = append(s.deliveries, r.PathValue("order")+" "+d.Date)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"date": d.Date})
}

// TestGOTHShop is issue 35's shop, as its "Done when" asks: net/http, templ
// pages (e2e/internal/gothshop), htmx 4, gorilla/csrf with its token in a <meta> and only in hx-headers, the
// shop's own login, and a fetch-driven widget; opsgate added from the
// docs (the Gate on two handlers, the Mount, card.js and fetch.js in
// the layout). The person signs in, the agent's browser presses the htmx
// button, the reference agent approves, the page repeats: once; then the
// widget, through opsgate.fetch: once.
func TestGOTHShop(t *testing.T) {
	needBrowser(t)
	var tok feToken
	for _, x := range feTokens() {
		if x.header {
			tok = x
		}
	}
	s := newFeSite(t, feFrameworks[1], tok, false)
	s.goth = true
	log := newAgentLog(t)
	a, tab := feAgent(t, s, log) // lands on /shop: the login page
	in(t, tab, chromedp.Click(chromedp.CSS("#login button"), chromedp.NodeVisible))
	waitPath(t, tab, "/shop")
	in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
	checkCardInPage(t, s, tab, "goth")
	out, err := a.Approve(ctxTimeout(t, 60*time.Second), &mxApprover{})
	if err != nil || out.Result != refagent.Performed {
		_, _, refusals := s.counts()
		t.Fatalf("approve the exchange: %q %v (refused: %q)", out.Result, err, refusals)
	}
	waitText(t, tab, "#result #done", "Exchanged order "+feOrder+" for size L")

	in(t, tab, chromedp.Click(chromedp.CSS("#deliver"), chromedp.NodeVisible))
	waitText(t, tab, "#status", "Waiting for approval")
	out, err = a.Approve(ctxTimeout(t, 60*time.Second), &mxApprover{})
	if err != nil || out.Result != refagent.Performed {
		t.Fatalf("approve the delivery: %q %v", out.Result, err)
	}
	waitText(t, tab, "#status", `Done: {"date":"2030-04-17"}`)
	time.Sleep(500 * time.Millisecond)
	runs, performed, refusals := s.counts()
	s.mu.Lock()
	deliveries := slices.Clone(s.deliveries)
	s.mu.Unlock()
	if runs != 1 || len(deliveries) != 1 || len(refusals) != 0 {
		t.Errorf("W32: the exchange ran %d times (%q), the delivery %d times (%q); refused %q", runs, performed, len(deliveries), deliveries, refusals)
	}
	t.Logf("GOTH shop: exchange handler runs %d, delivery handler runs %d", runs, len(deliveries))
}
