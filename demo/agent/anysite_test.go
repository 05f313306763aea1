package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/webkit"
)

// Issue 35: the agent acts on any website, not only the demo: a start
// page and the control to press. Here a GOTH-style shop on htmx 4 (the
// npm file the e2e tests vendor), its CSRF token only in hx-headers, the
// kit's card.js in its layout: `go run ./demo/agent -shop URL -start
// /shop -press '#exchange button' -approve exchange` performs once.
func TestAnyWebsiteWithHtmx(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	const chromiumPath = "/usr/bin/chromium"
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	htmx, err := os.ReadFile("../../e2e/testdata/htmx4/htmx.min.js")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	token := rand.Text()
	var runs, refused atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /htmx.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write(htmx)
	})
	mux.HandleFunc("GET /shop", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><html><head><script src="/htmx.js"></script><script src="/_opsgate/card.js" defer></script></head>
<body hx-headers:inherited='{"X-CSRF-Token": "%s"}'><h1>Shop</h1>
<form id="exchange" hx-post="/orders/ord_1/exchange" hx-target="#r"><input type="hidden" name="size" value="L"><button>Exchange</button></form>
<div id="r"></div></body></html>`, token)
	})
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:" + r.PathValue("order"), Terms: map[string]string{"order_id": r.PathValue("order"), "size": r.PostFormValue("size")},
			Summary: "Exchange order " + r.PathValue("order") + " for size " + r.PostFormValue("size") + "."}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		fmt.Fprint(w, `<p id="done">Exchanged</p>`)
	})))
	csrf := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.Header.Get("X-CSRF-Token") != token {
				refused.Add(1)
				http.Error(w, "CSRF token not found", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	m, err := endpoint.NewMount(endpoint.Config{Origin: base, Name: "Any shop", Kit: kit, AllowLocal: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: m.Handler(csrf(mux))}}
	srv.Start()
	t.Cleanup(srv.Close)

	var out, errs bytes.Buffer
	code := agent([]string{"-shop", base, "-start", "/shop", "-press", "#exchange button", "-approve", "exchange",
		"-chromium", chromiumPath, "-timeout", "20s"}, &out, &errs)
	if code != exitPerformed || runs.Load() != 1 || refused.Load() != 0 {
		t.Fatalf("exit %d, the handler ran %d times, the CSRF check refused %d\n%s\n%s", code, runs.Load(), refused.Load(), out.String(), errs.String())
	}
	for _, want := range []string{"the browser presses #exchange button on " + base + "/shop", "PERFORMED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the agent's steps lack %q:\n%s", want, out.String())
		}
	}
}
