package e2e_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/gorilla/csrf"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// Issue 35 "Done when": webkittest's Continue fails on a site whose CSRF
// token is only in a header, as Chromium does, here with the real
// gorilla/csrf: its token in a <meta>, sent by the page's script in
// X-CSRF-Token. Continue is the browser's own form submission, which can't
// send it; the page's script's repeat (Again, what opsgate.fetch or
// card.js sends) performs once.
func TestWebkittestContinueWithAHeaderOnlyToken(t *testing.T) {
	site := webkittest.New("https://shop.example")
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	var runs atomic.Int32
	mux := http.NewServeMux()
	page := template.Must(template.New("p").Parse(`<!doctype html><meta name="csrf-token" content="{{.}}"><button hx-post="/orders/ord_1/exchange">Exchange</button>`))
	mux.HandleFunc("GET /orders/ord_1", func(w http.ResponseWriter, r *http.Request) { page.Execute(w, csrf.Token(r)) })
	mux.Handle("POST /orders/ord_1/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:ord_1", Terms: map[string]string{"size": r.PostFormValue("size")}, Summary: "Exchange for " + r.PostFormValue("size") + "."}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		fmt.Fprint(w, "exchanged")
	})))
	key := make([]byte, 32)
	rand.Read(key)
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = m.Handler(csrf.Protect(key, csrf.Path("/"))(mux))

	s := site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	meta := regexp.MustCompile(`content="([^"]+)"`).FindSubmatch(b.Get("/orders/ord_1").Body)
	if meta == nil {
		t.Fatal("no token on the page")
	}
	b.Header = http.Header{"X-CSRF-Token": {html.UnescapeString(string(meta[1]))}}
	res := b.PostForm("/orders/ord_1/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("the gated request: %d %s", res.StatusCode, res.Body)
	}
	if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d", a.StatusCode)
	}
	if c := res.Continue(); !errors.Is(c.Err, webkittest.ErrNotRepeatable) || runs.Load() != 0 {
		t.Fatalf("W62: Continue on a site whose token is only in a header: %d %v, runs %d; want ErrNotRepeatable and nothing performed", c.StatusCode, c.Err, runs.Load())
	}
	if again := b.Again(); again.StatusCode != http.StatusOK || runs.Load() != 1 {
		t.Errorf("the script's repeat: %d %s, runs %d", again.StatusCode, again.Body, runs.Load())
	}
}
