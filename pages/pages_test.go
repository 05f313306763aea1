package pages_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/templates"
)

func TestWaitingW64W68(t *testing.T) {
	t.Parallel()
	v := view.Waiting{
		Continue:  view.Continue{Method: "POST", Action: "/x", Fields: []view.Field{{Name: "a", Value: `"><script>alert(1)</script>`}}},
		StatusURL: "/_opsgate/status?w=h",
	}
	for _, accept := range []string{"text/html", "application/json"} {
		r := httptest.NewRequest("POST", "/x", nil)
		r.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		pages.Waiting(rec, r, v, templates.Chrome{})
		if rec.Code != 403 || rec.Header().Get("Cache-Control") != "no-store" || !strings.Contains(strings.Join(rec.Header().Values("Vary"), ","), "Accept") {
			t.Errorf("%s: %d %v", accept, rec.Code, rec.Header())
		}
		body := rec.Body.String()
		if strings.Contains(body, "<script>alert") {
			t.Errorf("unescaped value: %s", body)
		}
		if accept == "application/json" && body != `{"error":"approval_required"}` {
			t.Errorf("W66 JSON body %s", body)
		}
		if accept == "text/html" && (!strings.Contains(body, `src="/_opsgate/waiting.js"`) || !strings.Contains(body, `data-opsgate-status="/_opsgate/status?w=h"`)) {
			t.Errorf("W93 the page lacks its script or status route: %s", body)
		}
	}
}

// W142 W143 A refusal says what was done, as a page or as JSON, never
// that the action failed.
func TestRefuse(t *testing.T) {
	t.Parallel()
	n := view.Notice{Title: "Try again shortly", Heading: "Try again shortly", Text: []string{"Nothing was done.", "Try again."}}
	r := httptest.NewRequest("POST", "/x", nil)
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "5")
	pages.Refuse(rec, r, http.StatusServiceUnavailable, "temporarily_unavailable", n, templates.Chrome{})
	body := rec.Body.String()
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "5" || rec.Header().Get("Cache-Control") != "no-store" ||
		!strings.Contains(body, "<h1>Try again shortly</h1>") || !strings.Contains(body, "<p>Try again.</p>") {
		t.Errorf("page: %d %v %s", rec.Code, rec.Header(), body)
	}
	r.Header.Set("Accept", "application/json")
	rec = httptest.NewRecorder()
	pages.Refuse(rec, r, http.StatusServiceUnavailable, "temporarily_unavailable", n, templates.Chrome{})
	if rec.Code != 503 || rec.Body.String() != `{"error":"temporarily_unavailable","message":"Nothing was done. Try again."}` {
		t.Errorf("JSON: %d %s", rec.Code, rec.Body)
	}
}

// The kit's pages never turn into a 500 because the client went away.
func TestPagesWhenTheClientHasGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/exchange", nil)
	r.Header.Set("Accept", "text/html")
	for name, write := range map[string]func(http.ResponseWriter){
		"notice": func(w http.ResponseWriter) {
			pages.Refuse(w, r, 503, "x", view.Notice{Heading: "Try again"}, templates.Chrome{})
		},
		"waiting": func(w http.ResponseWriter) { pages.Waiting(w, r, view.Waiting{}, templates.Chrome{}) },
	} {
		w := httptest.NewRecorder()
		write(w)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Errorf("%s: %d", name, w.Code)
		}
		if !strings.Contains(w.Header().Get("Content-Type"), "text/html") {
			t.Errorf("%s: Content-Type %q", name, w.Header().Get("Content-Type"))
		}
	}
}

// A website's own Kit.Refused gets the waiting page's view only inside a
// refusal that carries one.
func TestWaitingOfOutsideARefusal(t *testing.T) {
	if _, ok := pages.WaitingOf(httptest.NewRequest("GET", "/", nil)); ok {
		t.Error("WaitingOf found a view on an ordinary request")
	}
}
