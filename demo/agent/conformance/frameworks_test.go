package conformance_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opsgate/opsgate/demo/agent/conformance"
	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/webkit"
)

// gothShop is issue 35's shop: net/http, htmx (hx-post buttons and forms
// with no method or action), its own login cookie, and a CSRF token bound
// to that login and sent only in a header (hx-headers), or, with turbo,
// the same shop on Turbo (the token in the csrf-token meta, which Turbo
// sends as X-CSRF-Token).
type gothShop struct {
	url   string
	key   []byte
	turbo bool

	mu        sync.Mutex
	performed map[string]int // by order
	refused   int            // requests the CSRF check refused
}

func newGothShop(t *testing.T, turbo bool) *gothShop {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &gothShop{url: "http://" + ln.Addr().String(), key: []byte(rand.Text()), turbo: turbo, performed: map[string]int{}}
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Sessions.(*webkit.CookieSessions).Insecure = true
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><form method="post" action="/login"><input name="email"><input type="password" name="password"><button>Sign in</button></form>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("email") != "ann@example.com" || r.PostFormValue("password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "shop_session", Value: rand.Text(), Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /{$}", s.home)
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		o, size := r.PathValue("order"), r.PostFormValue("size")
		if size == "" {
			return webkit.Action{}, fmt.Errorf("size: required")
		}
		return webkit.Action{Key: "exchange:" + o, Terms: map[string]string{"order_id": o, "size": size}, Summary: "Exchange order " + o + " for size " + size + "."}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.performed[r.PathValue("order")]++
		s.mu.Unlock()
		fmt.Fprintf(w, `<p id="done">Exchanged for %s</p>`, template.HTMLEscapeString(r.PostFormValue("size")))
	})))
	m, err := endpoint.NewMount(endpoint.Config{Origin: s.url, Name: "GOTH shop", Kit: kit, AllowLocal: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: m.Handler(s.protect(mux))}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

// token is the CSRF token of a login session.
func (s *gothShop) token(session string) string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// protect is the shop's login and CSRF check: every page but /login needs
// the login cookie; every POST but /login the token bound to it, in the
// X-CSRF-Token header only.
func (s *gothShop) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			next.ServeHTTP(w, r)
			return
		}
		c, err := r.Cookie("shop_session")
		if err != nil {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Header.Get("X-CSRF-Token") != s.token(c.Value) {
			s.mu.Lock()
			s.refused++
			s.mu.Unlock()
			http.Error(w, "CSRF token not found", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

var gothHome = template.Must(template.New("home").Parse(`<!doctype html>
<html><head><title>GOTH shop</title>
{{if .Turbo}}<meta name="csrf-token" content="{{.Token}}"><script src="/static/turbo.es2017-umd.js"></script>{{else}}<script src="/static/htmx.min.js"></script>{{end}}
<script src="/_opsgate/card.js" defer></script></head>
<body{{if not .Turbo}} hx-headers='{"X-CSRF-Token": "{{.Token}}"}'{{end}}>
{{if .Turbo}}
<form method="post" action="/orders/ord_1/exchange"><select name="size"><option>M</option><option selected>L</option></select><button>Exchange</button></form>
<turbo-frame id="second"><form method="post" action="/orders/ord_2/exchange"><input type="hidden" name="size" value="S"><button>Exchange</button></form></turbo-frame>
{{else}}
<form hx-post="/orders/ord_1/exchange" hx-target="#r"><select name="size"><option>M</option><option selected>L</option></select><button>Exchange</button></form>
<button hx-post="/orders/ord_2/exchange" hx-vals='{"size": "S"}' hx-target="#r">Exchange the other</button>
<div id="r"></div>
{{end}}
</body></html>`))

func (s *gothShop) home(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Cookie("shop_session")
	gothHome.Execute(w, map[string]any{"Token": s.token(c.Value), "Turbo": s.turbo})
}

func (s *gothShop) counts() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for k, v := range s.performed {
		m[k] = v
	}
	return m, s.refused
}

// Issue 35: the checker crawls htmx's hx-post elements and Turbo's
// forms, signs in through the site's login form, sends each request as
// the framework does (the header-only token from hx-headers or the
// csrf-token meta), repeats it as the page's script does, and passes
// the site; it performs the gated action once through the operation.
func TestChecksAnHtmxOrTurboShopBehindItsLogin(t *testing.T) {
	for _, turbo := range []bool{false, true} {
		name := map[bool]string{false: "htmx", true: "turbo"}[turbo]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newGothShop(t, turbo)
			var log bytes.Buffer
			rep, err := conformance.Run(t.Context(), conformance.Config{
				Site: s.url, Login: "/login email=ann@example.com&password=hunter2", Log: &log,
				Performed: func() int { m, _ := s.counts(); return m["ord_1"] },
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Failed() {
				t.Fatalf("the shop failed:\n%s\n%s", report(rep), log.String())
			}
			if !strings.Contains(rep.Action, "POST "+s.url+"/orders/ord_1/exchange") || !strings.Contains(rep.Action, "("+name+")") {
				t.Errorf("the gated action found: %q", rep.Action)
			}
			if r, ok := rep.Result("page and JSON answers"); !ok || r.Status != conformance.Pass {
				t.Errorf("W62 W65: %+v", r)
			}
			performed, _ := s.counts()
			if performed["ord_1"] != 1 {
				t.Errorf("the checker performed the checked action %d times through its operation, want once", performed["ord_1"])
			}
			if strings.Contains(log.String(), "hunter2") || strings.Contains(log.String(), s.token("")) {
				t.Errorf("the log shows a password or token")
			}
		})
	}
	t.Run("without the login, nothing is found", func(t *testing.T) {
		t.Parallel()
		s := newGothShop(t, false)
		rep, err := conformance.Run(t.Context(), conformance.Config{Site: s.url})
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := rep.Result("join and find a gated action"); r.Status != conformance.Fail {
			t.Errorf("found a gated action behind a login it did not sign in to: %+v", r)
		}
	})
}

// -list shows htmx's requests and the headers the checker adds, and
// submits nothing but the login form.
func TestListShowsHtmxRequests(t *testing.T) {
	t.Parallel()
	s := newGothShop(t, false)
	l, err := conformance.List(t.Context(), conformance.Config{Site: s.url, Login: "/login email=ann@example.com&password=hunter2"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	l.WriteText(&b)
	for _, want := range []string{"POST " + s.url + "/orders/ord_1/exchange size=L", "POST " + s.url + "/orders/ord_2/exchange size=S", "sent as htmx sends it", "with the headers Hx-Current-Url, Hx-Request, X-Csrf-Token (values not shown)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the listing lacks %q:\n%s", want, b.String())
		}
	}
	if m, refused := s.counts(); len(m) != 0 || refused != 0 {
		t.Errorf("-list submitted forms: %v, refused %d", m, refused)
	}
}

// The crawl takes every request htmx sends with an effect (hx-post,
// hx-put, hx-patch, hx-delete; never hx-get) and, on a page that loads
// Turbo, its forms (never one with data-turbo="false"); and a browser
// given the site's own cookie (Config.Cookies, -cookie) sees the pages
// behind the site's login. List submits none of them.
func TestListFindsHtmxVerbsAndTurboFormsWithTheSiteCookie(t *testing.T) {
	t.Parallel()
	var sent int
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("shop_session"); err != nil || c.Value != "s3cret-session" {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		fmt.Fprint(w, `<!doctype html><html><head><script src="/static/htmx.min.js"></script></head><body hx-headers='{"X-CSRF-Token": "tok"}'>
<button hx-put="/items/it_1" hx-vals='{"qty": "2"}'>Set</button>
<div data-hx-patch="/items/it_2" hx-vals='{"note": "gift"}'>Note</div>
<button hx-delete="/items/it_3">Remove</button>
<button hx-get="/items">Reload</button>
<a href="/turbo">Turbo</a></body></html>`)
	})
	mux.HandleFunc("GET /turbo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><html><head><meta name="csrf-token" content="tok"><script src="/static/turbo.es2017-umd.js"></script></head><body>
<form method="post" action="/orders/ord_9/cancel"><button>Cancel</button></form>
<form method="post" action="/orders/ord_9/plain" data-turbo="false"><button>Plain</button></form></body></html>`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			mu.Lock()
			sent++
			mu.Unlock()
		}
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	list := func(cookies []*http.Cookie) map[string]conformance.Form {
		l, err := conformance.List(t.Context(), conformance.Config{Site: srv.URL, Cookies: cookies})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]conformance.Form{}
		for _, f := range l.Forms {
			got[f.Method+" "+strings.TrimPrefix(f.URL, srv.URL)] = f
		}
		return got
	}
	if got := list(nil); len(got) != 0 {
		t.Errorf("without the site's cookie the crawl saw behind its login: %v", got)
	}
	got := list([]*http.Cookie{{Name: "shop_session", Value: "s3cret-session"}})
	for key, want := range map[string]struct{ via, fields string }{
		"PUT /items/it_1":           {"htmx", "qty=2"},
		"PATCH /items/it_2":         {"htmx", "note=gift"},
		"DELETE /items/it_3":        {"htmx", ""},
		"POST /orders/ord_9/cancel": {"turbo", ""},
		"POST /orders/ord_9/plain":  {"", ""},
	} {
		f, ok := got[key]
		if !ok || f.Via != want.via || f.Fields != want.fields {
			t.Errorf("%s: %+v (found %t), want via %q fields %q", key, f, ok, want.via, want.fields)
		}
	}
	if f := got["PUT /items/it_1"]; !slices.Contains(f.Headers, "X-Csrf-Token") {
		t.Errorf("the htmx PUT goes without its hx-headers: %v", f.Headers)
	}
	if f := got["POST /orders/ord_9/cancel"]; !slices.Contains(f.Headers, "X-Csrf-Token") {
		t.Errorf("the Turbo form goes without Turbo's X-CSRF-Token: %v", f.Headers)
	}
	if _, ok := got["GET /items"]; ok || len(got) != 5 {
		t.Errorf("the crawl took %d requests (an hx-get?): %v", len(got), got)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent != 0 {
		t.Errorf("List sent %d requests with an effect", sent)
	}
}
