package kit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	"github.com/justinas/nosurf"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// mounted is a website wired with one Mount: its router, the Gate around
// an exchange handler, and the agent that approves.
type mounted struct {
	t      *testing.T
	m      *endpoint.Mount
	kit    *webkit.Kit
	server *httptest.Server
	agent  *agent
	runs   *atomic.Int32
	// form is added to the browser's POSTs (a CSRF token).
	form url.Values
	// header is added to every browser request.
	header http.Header
}

// newMounted builds the Mount and hands site the gated exchange handler,
// whose order comes from orderOf (each router has its own path values).
func newMounted(t *testing.T, obs webkit.Observer, site func(m *endpoint.Mount, exchange http.Handler, orderOf *func(*http.Request) string) http.Handler) *mounted {
	t.Helper()
	kit := webkit.New(cookieKeys...)
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Sessions.(*webkit.CookieSessions).Insecure = true
	kit.Observer = obs
	cfg := endpoint.Config{Origin: origin, Name: "Ridgeline", Kit: kit, Resolver: &identity.Resolver{AllowLocal: true}}
	m, err := endpoint.NewMount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &mounted{t: t, m: m, kit: kit, agent: newAgent(t), runs: new(atomic.Int32), header: http.Header{}}
	orderOf := func(r *http.Request) string { return r.PathValue("order") }
	exchange := kit.Gate(func(r *http.Request) (webkit.Action, error) {
		order, size := orderOf(r), r.PostFormValue("size")
		if order == "" || size == "" {
			return webkit.Action{}, errors.New("order and size are required")
		}
		return webkit.Action{
			Key: "exchange:" + order, Kind: "exchange",
			Terms:   map[string]string{"order_id": order, "size": size},
			Summary: "Exchange the jacket on order " + order + " for size " + size + ".",
		}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.runs.Add(1)
		fmt.Fprintf(w, "exchanged %s for size %s", orderOf(r), r.PostFormValue("size"))
	}))
	s.server = httptest.NewServer(site(m, exchange, &orderOf))
	t.Cleanup(s.server.Close)
	return s
}

// browser is the agent's browser on the mounted site.
type mountBrowser struct {
	s      *mounted
	client *http.Client
}

func (s *mounted) browser() *mountBrowser {
	jar, _ := cookiejar.New(nil)
	return &mountBrowser{s: s, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *mountBrowser) do(method, path string, form url.Values, h http.Header) (*http.Response, string) {
	b.s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.s.server.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range b.s.header {
		req.Header[k] = v
	}
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.s.t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(raw)
}

// crossSite is how the agent's browser posts the join: from the agent's
// own page, so a browser marks it cross-site.
var crossSite = http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://agent.example"}}

// join posts a fresh assertion for sid from the agent's page.
func (b *mountBrowser) join(sid string) (*http.Response, string) {
	b.s.t.Helper()
	joinPath := "/poppy/join"
	assertion, err := b.s.agent.dlg.BrowserAssertion(agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: origin + joinPath, SID: sid, User: "usr_1", Lifetime: 30 * time.Second},
		ReturnTo:      origin + "/orders",
		Extensions:    `"operations";v="3"`,
	})
	if err != nil {
		b.s.t.Fatal(err)
	}
	return b.do("POST", joinPath, url.Values{"assertion": {assertion}}, crossSite)
}

// exchange submits the exchange form as the site's own page does.
func (b *mountBrowser) exchange(order, size string, h http.Header) (*http.Response, string) {
	form := url.Values{"size": {size}}
	for k, v := range b.s.form {
		form[k] = v
	}
	if h == nil {
		h = http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {b.s.server.URL}}
	}
	h.Set("Accept", "text/html")
	return b.do("POST", "/orders/"+order+"/exchange", form, h)
}

// agentCall sends POST {ref} to the mounted endpoint as the agent does:
// server to server, no browser headers.
func (s *mounted) agentCall(ref, approval string) (int, map[string]any) {
	s.t.Helper()
	jwt, err := s.agent.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
	if err != nil {
		s.t.Fatal(err)
	}
	endpointPath := "/poppy/operations"
	req, _ := http.NewRequest("POST", s.server.URL+endpointPath, strings.NewReader(`{"ref":"`+ref+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.Session, jwt)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`)
	if approval != "" {
		req.Header.Set(headers.Approval, approval)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body
}

// wholeFlow is what a new website does first: load fetch.js and
// poppy.json, join, get a 403 with a ref, approve, perform once.
func (s *mounted) wholeFlow() {
	t := s.t
	t.Helper()
	b := s.browser()
	if res, body := b.do("GET", "/_opsgate/fetch.js", nil, nil); res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), "javascript") || !strings.Contains(body, "opsgate") {
		t.Fatalf("fetch.js: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	res, body := b.do("GET", "/.well-known/poppy.json", nil, nil)
	var doc struct {
		Name       string `json:"name"`
		Extensions struct {
			Operations []struct{ Version, Endpoint string } `json:"operations"`
		} `json:"extensions"`
		Web struct {
			Join string `json:"browser_session_endpoint"`
		} `json:"web"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || res.StatusCode != 200 {
		t.Fatalf("poppy.json: %d %s", res.StatusCode, body)
	}
	// W01, W02, W04: the operations entry, its endpoint and the join.
	if doc.Name != "Ridgeline" || len(doc.Extensions.Operations) != 1 || doc.Extensions.Operations[0].Version != "3" ||
		doc.Extensions.Operations[0].Endpoint != origin+"/poppy/operations" || doc.Web.Join != origin+"/poppy/join" {
		t.Fatalf("poppy.json: %s", body)
	}
	if res, body := b.join("ses_1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("join: %d %s", res.StatusCode, body)
	}
	res, _ = b.exchange("ord_7", "L", nil)
	r1 := ref(t, res, "ses_1") // W52, W53
	if s.runs.Load() != 0 {
		t.Fatal("W33: performed before approval")
	}
	status, op := s.agentCall(r1, "")
	if status != 403 || op["error"] != "approval_required" {
		t.Fatalf("W72 lookup: %d %v", status, op)
	}
	if status, body := s.agentCall(r1, userApproval(op["operation"].(map[string]any))); status != 204 {
		t.Fatalf("W90 approval: %d %v", status, body)
	}
	res, body = b.exchange("ord_7", "L", nil)
	if res.StatusCode != 200 || body != "exchanged ord_7 for size L" || s.runs.Load() != 1 {
		t.Fatalf("W94 Continue: %d %q runs %d", res.StatusCode, body, s.runs.Load())
	}
}

// The Mount on each router webkit/GUIDE.md shows: the same flow, loading
// fetch.js through the router (chi's r.Handle("/_opsgate/") alone would
// have answered 404 and left the agent waiting).
func TestMountOnRouters(t *testing.T) {
	t.Parallel()
	routers := map[string]func(m *endpoint.Mount, exchange http.Handler, orderOf *func(*http.Request) string) http.Handler{
		"net/http ServeMux": func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{order}/exchange", exchange)
			return m.Handler(mux)
		},
		"go-chi/chi": func(m *endpoint.Mount, exchange http.Handler, orderOf *func(*http.Request) string) http.Handler {
			*orderOf = func(r *http.Request) string { return chi.URLParam(r, "order") }
			r := chi.NewRouter()
			r.Use(m.Handler) // middleware: the kit's routes before chi routes
			r.Method("POST", "/orders/{order}/exchange", exchange)
			return r
		},
		"gorilla/mux": func(m *endpoint.Mount, exchange http.Handler, orderOf *func(*http.Request) string) http.Handler {
			*orderOf = func(r *http.Request) string { return mux.Vars(r)["order"] }
			r := mux.NewRouter()
			r.Handle("/orders/{order}/exchange", exchange).Methods("POST")
			return m.Handler(r) // gorilla runs r.Use middleware only on a matched route
		},
		"ServeMux, routes registered one by one": func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{order}/exchange", exchange)
			ep, join, poppy, prefix := "/poppy/operations", "/poppy/join", "/.well-known/poppy.json", "/_opsgate/"
			for _, p := range []string{ep, join, poppy, prefix} {
				mux.Handle(p, m)
			}
			return mux
		},
	}
	for name, site := range routers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			newMounted(t, nil, site).wholeFlow()
		})
	}
}

// NewMount refuses what would fail later: no Origin, an Origin with a path,
// http on the internet, a Kit whose keys New refused.
func TestNewMountChecks(t *testing.T) {
	t.Parallel()
	good := webkit.New(cookieKeys...)
	for name, c := range map[string]endpoint.Config{
		"no kit":           {Origin: origin},
		"no origin":        {Kit: good},
		"origin with path": {Origin: origin + "/shop", Kit: good},
		"http origin":      {Origin: "http://shop.example", Kit: good},
		"short keys":       {Origin: origin, Kit: webkit.New([]byte("short"))},
	} {
		if _, err := endpoint.NewMount(c); err == nil || !strings.HasPrefix(err.Error(), "endpoint: mount: ") {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if _, err := endpoint.NewMount(endpoint.Config{Origin: "http://localhost:8080", Kit: good, AllowLocal: true}); err != nil {
		t.Errorf("local development origin: %v", err)
	}
}

// A Kit not built by webkit.New is a configuration error of NewMount that
// says to use New, not a Mount that half works.
func TestMountZeroKit(t *testing.T) {
	t.Parallel()
	kit := &webkit.Kit{Logger: slog.New(slog.DiscardHandler)}
	_, err := endpoint.NewMount(endpoint.Config{Origin: origin, Kit: kit})
	if err == nil || !strings.HasPrefix(err.Error(), "endpoint: mount: ") || !strings.Contains(err.Error(), "webkit.New") {
		t.Fatalf("NewMount of a zero Kit: %v, want a mount error saying to use webkit.New", err)
	}
}

// ---- CSRF that composes ----

// The whole site, join included, inside net/http's CrossOriginProtection:
// Mount.Bypass lets the join and the endpoint through; a cross-site POST
// to a gated route or an ordinary one is still refused, and performs
// nothing.
func TestMountUnderCrossOriginProtection(t *testing.T) {
	t.Parallel()
	var ordinary atomic.Int32
	site := func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", exchange)
		mux.HandleFunc("POST /account/email", func(w http.ResponseWriter, r *http.Request) { ordinary.Add(1) })
		cop := http.NewCrossOriginProtection()
		m.Bypass(cop)
		m.Bypass(cop) // twice is once
		return cop.Handler(m.Handler(mux))
	}
	s := newMounted(t, nil, site)
	s.wholeFlow()

	b := s.browser()
	if res, body := b.join("ses_1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("join under CrossOriginProtection: %d %s", res.StatusCode, body)
	}
	// A joined browser's gated route, posted from another site: refused
	// before the Gate, no operation issued (W33), nothing performed.
	res, _ := b.exchange("ord_9", "M", crossSite.Clone())
	if res.StatusCode != 403 || res.Header.Get("Poppy-Operation") != "" || s.runs.Load() != 1 {
		t.Fatalf("cross-site gated POST: %d Poppy-Operation %q runs %d", res.StatusCode, res.Header.Get("Poppy-Operation"), s.runs.Load())
	}
	if res, _ := b.do("POST", "/account/email", url.Values{"email": {"x@evil.example"}}, crossSite); res.StatusCode != 403 || ordinary.Load() != 0 {
		t.Fatalf("cross-site ordinary POST: %d, ran %d", res.StatusCode, ordinary.Load())
	}
}

// The site's CSRF protection inside the Mount needs no bypass at all: the
// kit's routes are answered before it.
func TestMountAroundCrossOriginProtection(t *testing.T) {
	t.Parallel()
	s := newMounted(t, nil, func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", exchange)
		return m.Handler(http.NewCrossOriginProtection().Handler(mux))
	})
	s.wholeFlow()
	if res, _ := s.browser().exchange("ord_9", "M", crossSite.Clone()); res.StatusCode != 403 || res.Header.Get("Poppy-Operation") != "" {
		t.Fatalf("cross-site gated POST: %d %q", res.StatusCode, res.Header.Get("Poppy-Operation"))
	}
}

// A site that forgot the exemption: the agent's join gets a 403 that says
// what happened and what to change, not a bare 403, and the Observer sees
// a join refused for "csrf".
func TestJoinRefusedByCSRFSaysWhy(t *testing.T) {
	t.Parallel()
	obs := &eventLog{}
	s := newMounted(t, obs, func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", exchange)
		cop := http.NewCrossOriginProtection() // no m.Bypass(cop)
		cop.SetDenyHandler(m.Refused(nil))
		return cop.Handler(m.Handler(mux))
	})
	res, body := s.browser().join("ses_1")
	if res.StatusCode != 403 || !strings.Contains(body, "cross-site request protection refused the join") || !strings.Contains(body, "Nothing was joined") {
		t.Fatalf("refused join: %d %q", res.StatusCode, body)
	}
	if !obs.has(webkit.Event{Route: "join", Outcome: "refused", Reason: "csrf"}) {
		t.Fatalf("observed %v", obs.events())
	}
}

// The same with a token-based CSRF library. nosurf rather than
// gorilla/csrf: it has an exemption hook that takes the request
// (ExemptFunc, which Mount.Exempt fits) and a replaceable failure handler,
// depends on the standard library only, and its same-origin check can be
// told the connection is plain http, which httptest needs; gorilla/csrf
// can only be skipped per request by a middleware placed before it.
func TestMountUnderNosurf(t *testing.T) {
	t.Parallel()
	s := newMounted(t, nil, func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", exchange)
		mux.HandleFunc("GET /orders/{order}", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, nosurf.Token(r)) // the page's form carries the token
		})
		ns := nosurf.New(m.Handler(mux))
		ns.ExemptFunc(m.Exempt)
		ns.SetIsTLSFunc(func(*http.Request) bool { return false }) // httptest is plain http
		ns.SetFailureHandler(m.Refused(nil))
		return ns
	})
	b := s.browser()
	res, token := b.do("GET", "/orders/ord_7", nil, nil)
	if res.StatusCode != 200 || token == "" {
		t.Fatalf("token page: %d", res.StatusCode)
	}
	// Without the token a joined browser's gated POST is refused before
	// the Gate: protected, and nothing issued or performed.
	if res, body := b.join("ses_1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("join under nosurf: %d %s", res.StatusCode, body)
	}
	if res, _ := b.exchange("ord_7", "L", nil); res.StatusCode != 403 || res.Header.Get("Poppy-Operation") != "" {
		t.Fatalf("no token: %d %q", res.StatusCode, res.Header.Get("Poppy-Operation"))
	}
	// With it, the whole flow (the browser keeps its cookies).
	s.form = url.Values{"csrf_token": {token}}
	res, _ = b.exchange("ord_7", "L", nil)
	r1 := ref(t, res, "ses_1")
	status, op := s.agentCall(r1, "")
	if status != 403 {
		t.Fatalf("lookup: %d %v", status, op)
	}
	if status, _ := s.agentCall(r1, userApproval(op["operation"].(map[string]any))); status != 204 {
		t.Fatalf("approval through nosurf: %d", status)
	}
	if res, body := b.exchange("ord_7", "L", nil); res.StatusCode != 200 || s.runs.Load() != 1 {
		t.Fatalf("Continue: %d %q", res.StatusCode, body)
	}
}

// eventLog is an Observer that keeps every event.
type eventLog struct {
	mu  sync.Mutex
	log []webkit.Event
}

func (*eventLog) StoreStep(context.Context, string, time.Duration, error) {}

func (o *eventLog) Observe(_ context.Context, e webkit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, e)
}

func (o *eventLog) events() []webkit.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]webkit.Event(nil), o.log...)
}

func (o *eventLog) has(e webkit.Event) bool {
	for _, got := range o.events() {
		if got == e {
			return true
		}
	}
	return false
}

// The Observer hears why a join was refused: the request's shape, or its
// assertion; and that a good one joined.
func TestJoinEvents(t *testing.T) {
	t.Parallel()
	obs := &eventLog{}
	s := newMounted(t, obs, func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		return m.Handler(http.NotFoundHandler())
	})
	b := s.browser()
	if res, _ := b.do("GET", "/poppy/join", nil, nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET join: %d", res.StatusCode)
	}
	if res, _ := b.do("POST", "/poppy/join", url.Values{"assertion": {"not-a-jwt"}}, crossSite); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged assertion: %d", res.StatusCode)
	}
	if res, _ := b.join("ses_1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("join: %d", res.StatusCode)
	}
	for _, want := range []webkit.Event{
		{Route: "join", Outcome: "refused", Reason: "request"},
		{Route: "join", Outcome: "refused", Reason: "assertion"},
		{Route: "join", Outcome: "joined", Reason: "signed_out"},
	} {
		if !obs.has(want) {
			t.Errorf("not observed: %+v (got %+v)", want, obs.events())
		}
	}
}
