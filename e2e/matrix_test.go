package e2e_test

// The documented wiring on every router and CSRF library it names, in a
// real Chromium driven by the reference agent (issue 22, "A real-browser
// matrix in CI"). Each site is built from the docs alone (README "For
// website teams"; webkit/GUIDE.md "Any router", "CSRF"; webkit/FRONTENDS.md
// "Single-page apps and fetch-driven pages"), not from the demo shop:
// webkit.New, endpoint.NewMount, kit.Gate(describe)(handler), the site's
// CSRF protection inside the Mount, a server-rendered form and a page whose
// script calls opsgate.fetch. In each cell the browser submits the action
// (a real click), gets the waiting page or the 403 JSON (W53, W65), the
// agent approves, presses the waiting page's own Continue (W62: Continue
// makes the original request again, its fields included, whoever read the
// body first) or lets opsgate.fetch repeat it (W93), and the handler, where
// the side effect is counted, runs exactly once (W32, W135).

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gorilla/csrf"
	"github.com/gorilla/mux"
	"github.com/justinas/nosurf"
	"github.com/labstack/echo/v4"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

const (
	mxOrder = "ord_5Tq9"
	mxSize  = "L"
	mxDate  = "2030-04-17"
	mxNote  = "leave it at the door"
)

// mxTabs bounds the browser contexts open at once in the shared Chromium.
const mxTabs = 4

// mxRouter wires a site's routes on one router, the way webkit/GUIDE.md
// "Any router" does, and puts the Mount and the CSRF protection around it
// as webkit/GUIDE.md "CSRF" recommends: the protection inside the Mount.
type mxRouter struct {
	name  string
	build func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler
}

// mxProtection is a CSRF library in the composition webkit/GUIDE.md gives it.
type mxProtection struct {
	name string
	// field and header are where a page puts the token; "" for a
	// protection without tokens (CrossOriginProtection).
	field, header string
	// protect returns the middleware; refused is its failure handler.
	protect func(refused http.Handler) func(http.Handler) http.Handler
	token   func(r *http.Request) string
	reason  func(r *http.Request) string
}

var mxRouters = []mxRouter{
	{"servemux", func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler {
		mx := http.NewServeMux()
		param := func(r *http.Request) string { return r.PathValue("order") }
		mx.HandleFunc("GET /orders/{order}", s.orderPage(param))
		mx.HandleFunc("GET /orders/{order}/delivery", s.deliveryPage(param))
		mx.HandleFunc("GET /app.js", s.appJS)
		mx.HandleFunc("POST /notes", s.note)
		mx.Handle("POST /orders/{order}/exchange", s.kit.Gate(s.describeExchange(param))(http.HandlerFunc(s.exchange)))
		mx.Handle("POST /api/orders/{order}/delivery", s.kit.Gate(s.describeDelivery(param))(http.HandlerFunc(s.delivery)))
		return m.Handler(protect(mx))
	}},
	{"chi", func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler {
		r := chi.NewRouter()
		r.Use(m.Handler, protect) // the Mount first, the protection inside it
		param := func(r *http.Request) string { return chi.URLParam(r, "order") }
		r.Get("/orders/{order}", s.orderPage(param))
		r.Get("/orders/{order}/delivery", s.deliveryPage(param))
		r.Get("/app.js", s.appJS)
		r.Post("/notes", s.note)
		r.Post("/orders/{order}/exchange", s.kit.Gate(s.describeExchange(param))(http.HandlerFunc(s.exchange)).ServeHTTP)
		r.Post("/api/orders/{order}/delivery", s.kit.Gate(s.describeDelivery(param))(http.HandlerFunc(s.delivery)).ServeHTTP)
		return r
	}},
	{"gorillamux", func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler {
		r := mux.NewRouter()
		param := func(r *http.Request) string { return mux.Vars(r)["order"] }
		r.HandleFunc("/orders/{order}", s.orderPage(param)).Methods("GET")
		r.HandleFunc("/orders/{order}/delivery", s.deliveryPage(param)).Methods("GET")
		r.HandleFunc("/app.js", s.appJS).Methods("GET")
		r.HandleFunc("/notes", s.note).Methods("POST")
		r.Handle("/orders/{order}/exchange", s.kit.Gate(s.describeExchange(param))(http.HandlerFunc(s.exchange))).Methods("POST")
		r.Handle("/api/orders/{order}/delivery", s.kit.Gate(s.describeDelivery(param))(http.HandlerFunc(s.delivery))).Methods("POST")
		return m.Handler(protect(r))
	}},
	{"echo", func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler {
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		// echo keeps path parameters in its own context: describe parses
		// the path (webkit/GUIDE.md "Any router").
		param := orderInPath
		e.GET("/orders/:order", echo.WrapHandler(s.orderPage(param)))
		e.GET("/orders/:order/delivery", echo.WrapHandler(s.deliveryPage(param)))
		e.GET("/app.js", echo.WrapHandler(http.HandlerFunc(s.appJS)))
		e.POST("/notes", echo.WrapHandler(http.HandlerFunc(s.note)))
		e.POST("/orders/:order/exchange", echo.WrapHandler(s.kit.Gate(s.describeExchange(param))(http.HandlerFunc(s.exchange))))
		e.POST("/api/orders/:order/delivery", echo.WrapHandler(s.kit.Gate(s.describeDelivery(param))(http.HandlerFunc(s.delivery))))
		return m.Handler(protect(e))
	}},
	{"gin", func(m *endpoint.Mount, protect func(http.Handler) http.Handler, s *mxSite) http.Handler {
		g := gin.New()
		param := orderInPath // as for echo
		g.GET("/orders/:order", gin.WrapH(s.orderPage(param)))
		g.GET("/orders/:order/delivery", gin.WrapH(s.deliveryPage(param)))
		g.GET("/app.js", gin.WrapH(http.HandlerFunc(s.appJS)))
		g.POST("/notes", gin.WrapH(http.HandlerFunc(s.note)))
		g.POST("/orders/:order/exchange", gin.WrapH(s.kit.Gate(s.describeExchange(param))(http.HandlerFunc(s.exchange))))
		g.POST("/api/orders/:order/delivery", gin.WrapH(s.kit.Gate(s.describeDelivery(param))(http.HandlerFunc(s.delivery))))
		return m.Handler(protect(g))
	}},
}

var mxProtections = []mxProtection{
	{
		name: "crossorigin",
		protect: func(refused http.Handler) func(http.Handler) http.Handler {
			cop := http.NewCrossOriginProtection()
			cop.SetDenyHandler(refused)
			return cop.Handler
		},
		token:  func(*http.Request) string { return "" },
		reason: func(*http.Request) string { return "cross-origin request" },
	},
	{
		name:  "gorillacsrf",
		field: "gorilla.csrf.Token", header: "X-CSRF-Token",
		protect: func(refused http.Handler) func(http.Handler) http.Handler {
			key := make([]byte, 32)
			rand.Read(key)
			// On plain http (this test's 127.0.0.1), gorilla/csrf needs its
			// cookie without Secure and each request marked plaintext:
			// otherwise it takes every request for HTTPS and refuses the
			// browser's http Origin (ErrBadOrigin). Over HTTPS, neither.
			// Path "/": without it the cookie's path is the page's
			// directory, and a form posting elsewhere has no cookie.
			protect := csrf.Protect(key, csrf.Path("/"), csrf.Secure(false), csrf.ErrorHandler(refused))
			return func(next http.Handler) http.Handler {
				h := protect(next)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					h.ServeHTTP(w, csrf.PlaintextHTTPRequest(r))
				})
			}
		},
		token:  csrf.Token,
		reason: func(r *http.Request) string { return fmt.Sprint(csrf.FailureReason(r)) },
	},
	{
		name:  "nosurf",
		field: nosurf.FormFieldName, header: nosurf.HeaderName,
		protect: func(refused http.Handler) func(http.Handler) http.Handler {
			return func(next http.Handler) http.Handler {
				n := nosurf.New(next)
				// Path "/": without it the cookie's path is the page's
				// directory, and a form posting elsewhere has no cookie.
				n.SetBaseCookie(http.Cookie{Path: "/", HttpOnly: true, MaxAge: nosurf.MaxAge, SameSite: http.SameSiteLaxMode})
				n.SetFailureHandler(refused)
				return n
			}
		},
		token:  nosurf.Token,
		reason: func(r *http.Request) string { return fmt.Sprint(nosurf.Reason(r)) },
	},
}

// orderInPath is the order ID in /orders/{order}/… or /api/orders/{order}/…,
// for routers that keep their parameters in their own context.
func orderInPath(r *http.Request) string {
	segs := strings.Split(r.URL.Path, "/")
	if i := slices.Index(segs, "orders"); i >= 0 && i+1 < len(segs) {
		return segs[i+1]
	}
	return ""
}

// mxSite is one site of the matrix: its own kit, Mount and counters.
type mxSite struct {
	kit  *webkit.Kit
	prot mxProtection
	url  string

	mu                        sync.Mutex
	exchanges, deliveries     []string // what each handler run performed, counted at the handler
	exchangeRuns, deliverRuns int      // every run of the gated handlers, performed or not
	notes                     []string
	refusals                  []string // why the CSRF library refused a request
	refused                   chan string
}

func newMxSite(t *testing.T, r mxRouter, p mxProtection, configure ...func(*webkit.Kit)) *mxSite {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &mxSite{prot: p, url: "http://" + ln.Addr().String(), refused: make(chan string, 16)}
	hashKey, encKey := make([]byte, 32), make([]byte, 32)
	rand.Read(hashKey)
	rand.Read(encKey)
	s.kit = webkit.New(hashKey, encKey)
	for _, f := range configure {
		f(s.kit)
	}
	m, err := endpoint.NewMount(endpoint.Config{
		Origin:     s.url,
		Name:       "Matrix " + r.name + "/" + p.name,
		Kit:        s.kit,
		AllowLocal: true, // the agent and the site are on 127.0.0.1 over http
	})
	if err != nil {
		t.Fatal(err)
	}
	refused := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		why := p.reason(req)
		s.mu.Lock()
		s.refusals = append(s.refusals, req.Method+" "+req.URL.Path+": "+why)
		s.mu.Unlock()
		select {
		case s.refused <- req.Method + " " + req.URL.Path + ": " + why:
		default:
		}
		http.Error(w, "refused by "+p.name+": "+why, http.StatusForbidden)
	})
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: r.build(m, p.protect(refused), s)}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

var orderPageT = template.Must(template.New("order").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Order {{.Order}}</title></head>
<body><h1>Order {{.Order}}</h1>
<form id="exchange" method="post" action="/orders/{{.Order}}/exchange">
{{if .Field}}<input type="hidden" name="{{.Field}}" value="{{.Token}}">{{end}}
<label>Size <select name="size"><option>M</option><option selected>L</option></select></label>
<button type="submit">Exchange</button>
</form>
<form id="note" method="post" action="/notes">
{{if .Field}}<input type="hidden" name="{{.Field}}" value="{{.Token}}">{{end}}
<input name="text" value="{{.Note}}">
<button type="submit">Save the note</button>
</form>
</body></html>`))

var deliveryPageT = template.Must(template.New("delivery").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Delivery of {{.Order}}</title>
{{if .Header}}<meta name="csrf-header" content="{{.Header}}"><meta name="csrf-token" content="{{.Token}}">{{end}}
</head>
<body><h1>Delivery of order {{.Order}}</h1>
<button id="change" type="button" data-order="{{.Order}}" data-date="{{.Date}}">Deliver on {{.Date}}</button>
<p id="status">Ready</p>
<script src="/_opsgate/fetch.js"></script>
<script src="/app.js"></script>
</body></html>`))

// mxAppJS is the page's own script (webkit/FRONTENDS.md): the
// CSRF token goes in the library's header, the body is JSON.
const mxAppJS = `document.getElementById("change").addEventListener("click", async function () {
  var b = this, status = document.getElementById("status");
  var headers = { "Content-Type": "application/json", Accept: "application/json" };
  var name = document.querySelector('meta[name="csrf-header"]'), token = document.querySelector('meta[name="csrf-token"]');
  if (name && token) headers[name.content] = token.content;
  status.textContent = "Sending";
  var res = await opsgate.fetch("/api/orders/" + b.dataset.order + "/delivery", {
    method: "POST", headers: headers, body: JSON.stringify({ date: b.dataset.date }),
  }, {
    onWaiting: function () { status.textContent = "Waiting for approval in your agent"; },
    onApproved: function () { status.textContent = "Approved"; },
  });
  var text = await res.text();
  status.textContent = (res.ok ? "Done: " : "Failed " + res.status + ": ") + text;
});
`

func (s *mxSite) orderPage(order func(*http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		orderPageT.Execute(w, map[string]string{"Order": order(r), "Field": s.prot.field, "Token": s.prot.token(r), "Note": mxNote})
	}
}

func (s *mxSite) deliveryPage(order func(*http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		deliveryPageT.Execute(w, map[string]string{"Order": order(r), "Header": s.prot.header, "Token": s.prot.token(r), "Date": mxDate})
	}
}

func (s *mxSite) appJS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	io.WriteString(w, mxAppJS)
}

func (s *mxSite) note(w http.ResponseWriter, r *http.Request) {
	text := r.PostFormValue("text")
	s.mu.Lock()
	s.notes = append(s.notes, text)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><p id="noted">Noted: %s</p>`, template.HTMLEscapeString(text))
}

func (s *mxSite) describeExchange(order func(*http.Request) string) webkit.Describe {
	return func(r *http.Request) (webkit.Action, error) {
		o, size := order(r), r.PostFormValue("size")
		if o == "" || size == "" {
			return webkit.Action{}, fmt.Errorf("order and size: required")
		}
		return webkit.Action{
			Key:     "exchange:" + o,
			Kind:    "exchange",
			Terms:   map[string]any{"order_id": o, "size": size},
			Summary: "Exchange order " + o + " for size " + size + ".",
		}, nil
	}
}

func (s *mxSite) exchange(w http.ResponseWriter, r *http.Request) {
	size := r.PostFormValue("size")
	s.mu.Lock()
	s.exchangeRuns++
	if size != "" {
		s.exchanges = append(s.exchanges, orderInPath(r)+" "+size)
	}
	s.mu.Unlock()
	if size == "" { // the site's own validation (webkit/GUIDE.md "Where validation belongs")
		http.Error(w, "size: required", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><p id="done">Exchanged order %s for size %s</p>`, template.HTMLEscapeString(orderInPath(r)), template.HTMLEscapeString(size))
}

type mxDelivery struct {
	Date string `json:"date"`
}

func (s *mxSite) describeDelivery(order func(*http.Request) string) webkit.Describe {
	return func(r *http.Request) (webkit.Action, error) {
		var d mxDelivery
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil || d.Date == "" {
			return webkit.Action{}, fmt.Errorf("a JSON body with a date: required")
		}
		o := order(r)
		return webkit.Action{
			Key:     "delivery:" + o,
			Kind:    "delivery",
			Terms:   map[string]any{"order_id": o, "date": d.Date},
			Summary: "Deliver order " + o + " on " + d.Date + ".",
		}, nil
	}
}

func (s *mxSite) delivery(w http.ResponseWriter, r *http.Request) {
	var d mxDelivery
	err := json.NewDecoder(r.Body).Decode(&d)
	s.mu.Lock()
	s.deliverRuns++
	if err == nil && d.Date != "" {
		s.deliveries = append(s.deliveries, orderInPath(r)+" "+d.Date)
	}
	s.mu.Unlock()
	if err != nil || d.Date == "" {
		http.Error(w, `{"error":"a date is required"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"order": orderInPath(r), "date": d.Date})
}

// counts returns copies of what the handlers saw.
func (s *mxSite) counts() (exchanges, deliveries, notes, refusals []string, exchangeRuns, deliverRuns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.exchanges), slices.Clone(s.deliveries), slices.Clone(s.notes), slices.Clone(s.refusals), s.exchangeRuns, s.deliverRuns
}

// TestREADMEMatrix: every router × CSRF library the docs name, a form
// action and a fetch action each, performed once through the waiting
// page's Continue in Chromium (issue 22 "Done when": a site built from the
// docs with nosurf or gorilla/csrf inside the Mount performs through
// Continue on every router).
func TestREADMEMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	if browserErr != nil {
		t.Fatalf("chromium could not start: %v", browserErr)
	}
	gin.SetMode(gin.ReleaseMode)
	tabs := make(chan struct{}, mxTabs)
	for _, r := range mxRouters {
		for _, p := range mxProtections {
			for _, action := range []string{"form", "fetch"} {
				t.Run(r.name+"/"+p.name+"/"+action, func(t *testing.T) {
					t.Parallel()
					tabs <- struct{}{}
					defer func() { <-tabs }()
					s := newMxSite(t, r, p)
					if action == "form" {
						mxForm(t, s)
					} else {
						mxFetch(t, s)
					}
				})
			}
		}
	}
}

// mxAgent starts a reference agent in a fresh browser context (its own
// cookies) of the shared Chromium and joins it, landing on returnTo.
func mxAgent(t *testing.T, s *mxSite, returnTo string) (*refagent.Agent, context.Context) {
	t.Helper()
	w := &testLog{t: t}
	t.Cleanup(w.close)
	tab, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	a, err := refagent.New(t.Context(), refagent.Config{Shop: s.url, Browser: tab, Log: w, StepTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	join(t, a, refagent.JoinOptions{ReturnTo: returnTo})
	return a, tab
}

// mxApprover approves as the user and keeps the questions. It prints
// nothing: a question's differences may quote a CSRF token.
type mxApprover struct {
	mu    sync.Mutex
	asked []refagent.Question
}

func (u *mxApprover) Decide(_ context.Context, q refagent.Question) (refagent.Decision, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asked = append(u.asked, q)
	return refagent.Decision{Approve: true, Approver: store.ApproverUser, InputType: "tap"}, nil
}

// approve runs the agent's Approve (which presses Continue, or waits for
// opsgate.fetch to repeat) and fails at once, saying why, when the CSRF
// library refuses a request meanwhile: the repeat was refused, so nothing
// can be performed.
func (s *mxSite) approve(t *testing.T, a *refagent.Agent, u *mxApprover, opts ...refagent.Option) refagent.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
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
		if res.err != nil {
			t.Fatalf("approve: %v (the CSRF library refused: %q)", res.err, s.refusalList())
		}
		return res.out
	case why := <-s.refused:
		cancel()
		<-done
		t.Fatalf("W62: after the approval, %s refused the repeated request (%s): Continue did not make the original request again, and nothing was performed", s.prot.name, why)
	}
	return refagent.Outcome{}
}

func (s *mxSite) refusalList() []string {
	_, _, _, r, _, _ := s.counts()
	return r
}

// fieldNames reads the names (never the values: one is a CSRF token) of
// the inputs of the form sel in tab.
func fieldNames(t *testing.T, tab context.Context, sel string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+jsString(sel+` input, `+sel+` select`)+`)).map(e => e.name).filter(n => n)`))
	if err != nil {
		t.Fatalf("fields of %s: %v", sel, err)
	}
	slices.Sort(names)
	return names
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mxForm: the server-rendered form, through the waiting page's Continue.
func mxForm(t *testing.T, s *mxSite) {
	page := "/orders/" + mxOrder
	a, tab := mxAgent(t, s, page)

	// An ordinary (ungated) route works for the joined browser, with the
	// CSRF library's token as the site gives it.
	in(t, tab, chromedp.Click(chromedp.CSS("#note button"), chromedp.NodeVisible))
	waitText(t, tab, "#noted", "Noted: "+mxNote)

	in(t, tab, chromedp.Navigate(s.url+page))
	want := fieldNames(t, tab, "#exchange")
	in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
	waitingPage(t, tab) // W53, W65
	if got := fieldNames(t, tab, "#opsgate-continue"); !slices.Equal(got, want) {
		t.Errorf("W62: the waiting page's Continue form has the fields %q; the form the browser submitted had %q", got, want)
	}
	if ex, _, _, _, runs, _ := s.counts(); runs != 0 || len(ex) != 0 {
		t.Fatalf("W33: the handler ran %d times before an approval", runs)
	}

	u := &mxApprover{}
	out := s.approve(t, a, u) // the agent presses the page's Continue (A41)
	if out.Result != refagent.Performed {
		t.Fatalf("outcome %q, want performed (the CSRF library refused: %q)", out.Result, s.refusalList())
	}
	if len(u.asked) != 1 || !strings.Contains(string(u.asked[0].Operation.Terms), `"size":"`+mxSize+`"`) {
		t.Errorf("the agent was asked %d times; terms %v", len(u.asked), terms(u.asked))
	}
	waitText(t, tab, "#done", "Exchanged order "+mxOrder+" for size "+mxSize)
	time.Sleep(300 * time.Millisecond) // a late repeat (the page's own script) would land here
	ex, _, notes, refusals, runs, _ := s.counts()
	if runs != 1 || !slices.Equal(ex, []string{mxOrder + " " + mxSize}) {
		t.Errorf("W32, W135: the handler ran %d times and performed %q; want once, %q", runs, ex, mxOrder+" "+mxSize)
	}
	if len(refusals) != 0 {
		t.Errorf("%s refused %q", s.prot.name, refusals)
	}

	// The gated and the ordinary route stay protected: a request without
	// the CSRF library's token (CrossOriginProtection: a cross-origin
	// request) is refused by the library, and no handler runs.
	for _, path := range []string{"/notes", "/orders/" + mxOrder + "/exchange"} {
		status := s.unprotectedPost(t, path)
		ex2, _, notes2, refusals2, runs2, _ := s.counts()
		if status != http.StatusForbidden || len(refusals2) != len(refusals)+1 || runs2 != runs || len(notes2) != len(notes) || len(ex2) != len(ex) {
			t.Errorf("a POST to %s without CSRF protection got %d; %s refused %d, handlers ran %d (exchange) and %d (notes) times; want 403 from %s and no handler",
				path, status, s.prot.name, len(refusals2)-len(refusals), runs2-runs, len(notes2)-len(notes), s.prot.name)
		}
		refusals = refusals2
	}
}

func terms(qs []refagent.Question) []string {
	var out []string
	for _, q := range qs {
		out = append(out, string(q.Operation.Terms))
	}
	return out
}

// unprotectedPost sends what a forged request would: for a token library,
// the site's cookies (a GET first) without the token, from the site's own
// origin so that only the token is missing; for CrossOriginProtection, a
// request a browser marks cross-site.
func (s *mxSite) unprotectedPost(t *testing.T, path string) int {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	res, err := c.Get(s.url + "/orders/" + mxOrder)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	form := url.Values{"size": {mxSize}, "text": {mxNote}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if s.prot.field == "" {
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "http://attacker.example")
	} else {
		req.Header.Set("Origin", s.url)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	res, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// mxFetch: the page's script, through opsgate.fetch's own repeat (W93).
func mxFetch(t *testing.T, s *mxSite) {
	page := "/orders/" + mxOrder + "/delivery"
	a, tab := mxAgent(t, s, page)
	in(t, tab, chromedp.Click(chromedp.CSS("#change"), chromedp.NodeVisible))
	waitText(t, tab, "#status", "Waiting for approval in your agent") // 403 {"error":"approval_required"} (W66)
	if r := lastRef(t, a); r.Resource != "Fetch" || !strings.Contains(string(r.Body), mxDate) {
		t.Errorf("A08: the reference came from %q", r.Resource)
	}
	if _, d, _, _, _, runs := s.counts(); runs != 0 || len(d) != 0 {
		t.Fatalf("W33: the handler ran %d times before an approval", runs)
	}

	u := &mxApprover{}
	out := s.approve(t, a, u)
	if out.Result != refagent.Performed {
		t.Fatalf("outcome %q, want performed (the CSRF library refused: %q)", out.Result, s.refusalList())
	}
	if len(u.asked) != 1 || !strings.Contains(string(u.asked[0].Operation.Terms), `"date":"`+mxDate+`"`) {
		t.Errorf("the agent was asked %d times; terms %v", len(u.asked), terms(u.asked))
	}
	waitText(t, tab, "#status", `Done: {"date":"`+mxDate+`","order":"`+mxOrder+`"}`)
	_, d, _, refusals, _, runs := s.counts()
	if runs != 1 || !slices.Equal(d, []string{mxOrder + " " + mxDate}) {
		t.Errorf("W32, W135: the handler ran %d times and performed %q; want once, %q", runs, d, mxOrder+" "+mxDate)
	}
	if len(refusals) != 0 {
		t.Errorf("%s refused %q", s.prot.name, refusals)
	}

	// Without the CSRF library's header the same script's request is
	// refused by the library (CrossOriginProtection passes a same-origin
	// fetch: it needs no token, and refuses cross-origin ones, which the
	// form cell checks).
	if s.prot.header == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/api/orders/`+mxOrder+`/delivery", {method: "POST", headers: {"Content-Type": "application/json", Accept: "application/json"}, body: JSON.stringify({date: "2031-01-01"})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	_, d2, _, refusals2, _, runs2 := s.counts()
	if status != http.StatusForbidden || len(refusals2) != 1 || runs2 != runs || len(d2) != len(d) {
		t.Errorf("a fetch without %s got %d; %s refused %d; the handler ran %d more times", s.prot.header, status, s.prot.name, len(refusals2), runs2-runs)
	}
}
