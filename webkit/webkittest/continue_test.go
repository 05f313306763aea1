package webkittest_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/continueform"
	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// gatedSite is a website on the kit, mounted with endpoint.NewMount: one
// gated form action that records what its handler received, and, when
// wrap is set, the website's own middleware (a CSRF library) inside the
// Mount, as webkit/GUIDE.md "CSRF" says.
type gatedSite struct {
	site *webkittest.Site
	kit  *webkit.Kit

	mu       sync.Mutex
	received []url.Values // the PostForm of each run of the handler
	ctypes   []string
	referers []string
}

func newGatedSite(t *testing.T, configure func(*webkit.Kit), wrap func(http.Handler) http.Handler) *gatedSite {
	t.Helper()
	g := &gatedSite{site: webkittest.New("https://shop.example")}
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	if configure != nil {
		configure(kit)
	}
	g.kit = kit
	describe := func(r *http.Request) (webkit.Action, error) {
		if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
			return webkit.Action{}, webkit.ErrNotGated
		}
		return exchangeAction(r.PathValue("order"), r.PostForm.Get("size")), nil
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		g.received = append(g.received, r.PostForm)
		g.ctypes = append(g.ctypes, r.Header.Get("Content-Type"))
		g.referers = append(g.referers, r.Referer())
		g.mu.Unlock()
		fmt.Fprintf(w, "exchanged for size %s", r.PostForm.Get("size"))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(handler))
	mux.Handle("GET /orders/{order}/label", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return exchangeAction(r.PathValue("order"), r.URL.Query().Get("size")), nil
	})(handler))
	mux.HandleFunc("GET /orders/{order}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<form method="post" action="/orders/%s/exchange"><button>Exchange</button></form>`,
			r.PathValue("order"))
	})
	m, err := endpoint.NewMount(endpoint.Config{Origin: g.site.Origin, Kit: kit, Resolver: g.site.Resolver(), AccessTokens: g.site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	var site http.Handler = mux
	if wrap != nil {
		site = wrap(mux)
	}
	g.site.Handler = m.Handler(site)
	return g
}

func (g *gatedSite) runs() []url.Values {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.received)
}

// join joins a browser and sends the gated request; it returns the
// Session and the waiting page.
func (g *gatedSite) join(t *testing.T) (*webkittest.Session, *webkittest.Browser) {
	t.Helper()
	s := g.site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func approve(t *testing.T, s *webkittest.Session, res *webkittest.Response) {
	t.Helper()
	if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("the gated request: %d %v ref %q: %.300s", res.StatusCode, res.Err, res.Ref, res.Body)
	}
	if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approval: %d %s", a.StatusCode, a.Body)
	}
}

// W62: Continue submits the page's form: the handler gets the fields the
// browser first sent (repeats and characters a form must escape kept), as
// the form's enctype, with the page as Referer; pressed before the
// approval it gets the waiting page again, so the browser's cookies went
// with it.
func TestContinueSubmitsTheForm(t *testing.T) {
	g := newGatedSite(t, nil, nil)
	s, b := g.join(t)
	form := url.Values{"size": {"L"}, "note": {"a & b = c+d ü", "second"}, "empty": {""}}
	res := b.PostForm("/orders/ord_7/exchange", form)
	if res.Err != nil || res.Ref == "" {
		t.Fatalf("the gated request: %d %v", res.StatusCode, res.Err)
	}
	early := res.Continue()
	if early.Err != nil || early.StatusCode != http.StatusForbidden || early.Ref == "" {
		t.Fatalf("W62 Continue before the approval: %d %v ref %q, want the waiting page again", early.StatusCode, early.Err, early.Ref)
	}
	approve(t, s, res)
	c, err := continueform.Parse("https://shop.example/orders/ord_7/exchange", res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if c.Method != http.MethodPost || c.URL != "https://shop.example/orders/ord_7/exchange" || c.Enctype != "application/x-www-form-urlencoded" || len(c.Fields) != 4 {
		t.Fatalf("W62 the Continue control: %+v", c)
	}
	again := early.Continue() // the later page's Continue makes the same request
	if again.Err != nil || again.StatusCode != http.StatusOK {
		t.Fatalf("W62 Continue: %d %v %s", again.StatusCode, again.Err, again.Body)
	}
	runs := g.runs()
	if len(runs) != 1 || runs[0].Encode() != form.Encode() {
		t.Fatalf("W62 the handler ran %d times with %v, want once with %v", len(runs), runs, form)
	}
	if g.ctypes[0] != "application/x-www-form-urlencoded" || g.referers[0] != "https://shop.example/orders/ord_7/exchange" {
		t.Errorf("Content-Type %q, Referer %q", g.ctypes[0], g.referers[0])
	}
	for _, r := range res.ContinueConcurrently(4) {
		if r.StatusCode == http.StatusOK {
			t.Error("W135 a Continue pressed again performed again")
		}
	}
	if n := len(g.runs()); n != 1 {
		t.Errorf("W135 the handler ran %d times", n)
	}
}

// W62: a GET's Continue is a link; Continue follows it.
func TestContinueFollowsTheLink(t *testing.T) {
	g := newGatedSite(t, nil, nil)
	s, b := g.join(t)
	res := b.Get("/orders/ord_7/label?size=XL&copy=1")
	approve(t, s, res)
	c, err := continueform.Parse("https://shop.example/orders/ord_7/label?size=XL&copy=1", res.Body)
	if err != nil || !c.Link || c.Method != http.MethodGet || c.URL != "https://shop.example/orders/ord_7/label?size=XL&copy=1" {
		t.Fatalf("the Continue control: %+v %v", c, err)
	}
	if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK || string(again.Body) != "exchanged for size " {
		t.Fatalf("W62 Continue: %d %v %q", again.StatusCode, again.Err, again.Body)
	}
}

// W62: a multipart form without files gets a multipart Continue form (the
// kit's since the Gate repeats multipart bodies), posted as
// multipart/form-data.
func TestContinueMultipart(t *testing.T) {
	g := newGatedSite(t, nil, nil)
	s, b := g.join(t)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("size", "M")
	mw.WriteField("note", "line one\r\nline two")
	mw.Close()
	res := b.Post("/orders/ord_7/exchange", mw.FormDataContentType(), body.Bytes())
	approve(t, s, res)
	c, err := continueform.Parse("https://shop.example/orders/ord_7/exchange", res.Body)
	if err != nil || c.Enctype != "multipart/form-data" {
		t.Fatalf("the Continue control: %+v %v", c, err)
	}
	if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK {
		t.Fatalf("W62 Continue: %d %v %s", again.StatusCode, again.Err, again.Body)
	}
	runs := g.runs()
	if len(runs) != 1 || runs[0].Get("size") != "M" || runs[0].Get("note") != "line one\r\nline two" || !strings.HasPrefix(g.ctypes[0], "multipart/form-data; boundary=") {
		t.Fatalf("the handler got %v as %q", runs, g.ctypes)
	}
}

// The issue-22 bug, as the harness must see it: a Gate whose waiting page
// offers a Continue form without the request's fields. Continue refuses to
// press it, names the fields it lost, and sends nothing; the handler
// would have got other fields. (Again, which sends the original bytes, is
// fooled: that is how the bug went unseen.)
func TestContinueFailsOnAnEmptyContinueForm(t *testing.T) {
	g := newGatedSite(t, func(k *webkit.Kit) {
		k.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, ok := pages.WaitingOf(r)
			if !ok {
				k.Refuse(w, r)
				return
			}
			v.Continue.Fields = nil // the kit's page, its Continue emptied
			pages.Waiting(w, r, v, templates.Chrome{})
		})
	}, nil)
	s, b := g.join(t)
	res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}, "csrf_token": {"s3cr3t-t0ken"}})
	approve(t, s, res)
	again := res.Continue()
	var diff *continueform.DiffError
	if !errors.As(again.Err, &diff) || again.StatusCode != 0 {
		t.Fatalf("W62 Continue on an empty Continue form: %d %v, want a DiffError and nothing sent", again.StatusCode, again.Err)
	}
	msg := again.Err.Error()
	for _, want := range []string{`size="L"`, "csrf_token (a token: value not shown)", "fields the request sent that Continue does not"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "s3cr3t") {
		t.Errorf("the error prints the token's value: %s", msg)
	}
	if !slices.Equal(diff.Missing, []string{"size", "csrf_token"}) && !slices.Equal(diff.Missing, []string{"csrf_token", "size"}) {
		t.Errorf("Missing %v", diff.Missing)
	}
	if n := len(g.runs()); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
	t.Logf("Continue: %v", again.Err)
	if old := b.Again(); old.StatusCode != http.StatusOK {
		t.Errorf("Again re-sends the original request, which performs: %d", old.StatusCode)
	}
}

// A Continue form whose field has another value, or an extra field, or
// another action, is not the request again.
func TestContinueDiffers(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*view.Waiting)
		want string
	}{
		"changed": {func(v *view.Waiting) { v.Continue.Fields[0].Value = "XS" }, `size sent as "L", Continue sends "XS"`},
		"added": {func(v *view.Waiting) {
			v.Continue.Fields = append(v.Continue.Fields, view.Field{Name: "gift", Value: "yes"})
		}, `Continue sends that the request did not: gift="yes"`},
		"action": {func(v *view.Waiting) { v.Continue.Action = "/orders/ord_8/exchange" }, "Continue goes to https://shop.example/orders/ord_8/exchange"},
		"fresh token": {func(v *view.Waiting) {
			v.Continue.Fields = append(v.Continue.Fields, view.Field{Name: "_csrf", Value: "fresh"})
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			g := newGatedSite(t, func(k *webkit.Kit) {
				k.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					v, ok := pages.WaitingOf(r)
					if !ok {
						k.Refuse(w, r)
						return
					}
					tc.edit(&v)
					pages.Waiting(w, r, v, templates.Chrome{})
				})
			}, nil)
			s, b := g.join(t)
			res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
			approve(t, s, res)
			again := res.Continue()
			if tc.want == "" {
				if again.Err != nil || again.StatusCode != http.StatusOK {
					t.Fatalf("a token field the page adds is not a difference: %d %v", again.StatusCode, again.Err)
				}
				return
			}
			if again.Err == nil || !strings.Contains(again.Err.Error(), tc.want) {
				t.Fatalf("Continue: %d %v, want an error saying %q", again.StatusCode, again.Err, tc.want)
			}
			if len(g.runs()) != 0 {
				t.Fatal("the handler ran")
			}
		})
	}
}

// A page that says its request can't be repeated, a page that is not a
// waiting page and a script's JSON 403 are errors that say so.
func TestContinueRefuses(t *testing.T) {
	g := newGatedSite(t, nil, nil)
	s, b := g.join(t)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("size", "L")
	fw, _ := mw.CreateFormFile("photo", "jacket.jpg")
	fw.Write([]byte("not really a JPEG"))
	mw.Close()
	upload := b.Post("/orders/ord_7/exchange", mw.FormDataContentType(), body.Bytes())
	approve(t, s, upload)
	if again := upload.Continue(); !errors.Is(again.Err, webkittest.ErrNotRepeatable) || !strings.Contains(again.Err.Error(), "can't be repeated") {
		t.Errorf("W63 a form with a file: %v, want ErrNotRepeatable with the page's words", again.Err)
	}

	page := b.Get("/orders/ord_7")
	if again := page.Continue(); !strings.Contains(fmt.Sprint(again.Err), "not a waiting page") || again.StatusCode != 0 {
		t.Errorf("an ordinary page: %d %v, want \"not a waiting page\"", again.StatusCode, again.Err)
	}
	j := b.PostJSON("/orders/ord_7/exchange", `{"size":"L"}`)
	if again := j.Continue(); !strings.Contains(fmt.Sprint(again.Err), "not a waiting page") || !strings.Contains(again.Err.Error(), "Again") {
		t.Errorf("a script's 403: %v, want \"not a waiting page\" pointing at Again", again.Err)
	}
	var none *webkittest.Response
	if again := none.Continue(); !strings.Contains(fmt.Sprint(again.Err), "not a waiting page") {
		t.Errorf("a nil Response: %v", again.Err)
	}
	g2 := newGatedSite(t, func(k *webkit.Kit) {
		k.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := pages.WaitingOf(r); !ok {
				k.Refuse(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `<p>Waiting. <form method="post"><button>Go</button></form>`)
		})
	}, nil)
	_, b2 := g2.join(t)
	if again := b2.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}}).Continue(); !errors.Is(again.Err, continueform.ErrNoContinue) {
		t.Errorf("a page without #opsgate-continue: %v, want ErrNoContinue", again.Err)
	}
}
