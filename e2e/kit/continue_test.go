package kit_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"

	"github.com/justinas/nosurf"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// W62 Continue through a CSRF library that reads the body before the
// Gate: justinas/nosurf inside the Mount, as webkit/GUIDE.md "CSRF" says. The browser
// loads the form's page (nosurf's cookie and token), posts it, the agent
// approves, and the waiting page's Continue, which must carry the token
// and the fields, performs it once. Before the Gate kept the form nosurf
// parsed (issue 22), Continue failed here naming csrf_token and size.
func TestContinueBehindNosurf(t *testing.T) {
	for _, multipartForm := range []bool{false, true} {
		t.Run(fmt.Sprintf("multipart=%v", multipartForm), func(t *testing.T) { continueBehindNosurf(t, multipartForm) })
	}
}

func continueBehindNosurf(t *testing.T, multipartForm bool) {
	site := webkittest.New("https://shop.example")
	kit := webkit.New(testKeys...)
	kit.Logger = slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	var runs []url.Values
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		order, size := r.PathValue("order"), r.PostFormValue("size")
		return webkit.Action{Key: "exchange:" + order, Terms: map[string]string{"order_id": order, "size": size}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseMultipartForm(1 << 20)
		mu.Lock()
		runs = append(runs, r.PostForm)
		mu.Unlock()
		fmt.Fprintf(w, "exchanged for size %s", r.PostForm.Get("size"))
	})))
	mux.HandleFunc("GET /orders/{order}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<form method="post" action="/orders/%s/exchange"><input type="hidden" name="csrf_token" value="%s"><button>Exchange</button></form>`,
			r.PathValue("order"), nosurf.Token(r))
	})
	n := nosurf.New(mux)
	n.SetFailureHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "csrf: "+nosurf.Reason(r).Error(), http.StatusBadRequest)
	}))
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = m.Handler(n)

	s := site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	page := b.Get("/orders/ord_7")
	token := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindSubmatch(page.Body)
	if token == nil {
		t.Fatalf("no token on the page: %d %s", page.StatusCode, page.Body)
	}
	fields := url.Values{"csrf_token": {string(token[1])}, "size": {"L"}}
	var res *webkittest.Response
	if multipartForm {
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		w.WriteField("csrf_token", fields.Get("csrf_token"))
		w.WriteField("size", "L")
		w.Close()
		res = b.Post("/orders/ord_7/exchange", w.FormDataContentType(), body.Bytes())
	} else {
		res = b.PostForm("/orders/ord_7/exchange", fields)
	}
	if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("the gated request: %d %v ref %q: %.300s", res.StatusCode, res.Err, res.Ref, res.Body)
	}
	if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approval: %d %s", a.StatusCode, a.Body)
	}
	again := res.Continue()
	if again.Err != nil || again.StatusCode != http.StatusOK {
		t.Fatalf("W62 Continue behind nosurf: %d %v %s", again.StatusCode, again.Err, again.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 || runs[0].Get("size") != "L" || runs[0].Get("csrf_token") == "" {
		t.Fatalf("the handler ran with %v", runs)
	}
}
