package pages

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestWantsJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept, dest string
		want         bool
	}{
		{"", "", false},
		{"", "empty", true},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "document", false}, // a page load (W65)
		{"application/json", "", true}, // W66
		{"application/json, text/plain, */*", "", true},
		{"*/*", "", false},
		{"*/*", "empty", true}, // fetch's default Accept
		{"*/*", "document", false},
		{"application/json;q=0.5, text/html;q=0.9", "empty", false},
		{"application/json;q=0.9, text/html;q=0.5", "", true},
		{"application/*", "", true},
		{"text/*, application/json;q=0", "", false},
		{"text/plain", "", false},
		{"application/json;q=bogus", "", false},
		{"APPLICATION/JSON", "", true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if tt.accept != "" {
			r.Header.Set("Accept", tt.accept)
		}
		if tt.dest != "" {
			r.Header.Set("Sec-Fetch-Dest", tt.dest)
		}
		if got := WantsJSON(r); got != tt.want {
			t.Errorf("Accept %q, Sec-Fetch-Dest %q: WantsJSON = %v, want %v", tt.accept, tt.dest, got, tt.want)
		}
	}
}

func TestWriteWaitingW64W68(t *testing.T) {
	t.Parallel()
	v := Waiting{
		Continue:  Continue{Method: "POST", Action: "/x", Fields: []Field{{Name: "a", Value: `"><script>alert(1)</script>`}}},
		StatusURL: "/_opsgate/status?w=h",
		ScriptURL: "/_opsgate/waiting.js",
		StyleURL:  "/_opsgate/opsgate.css",
	}
	for _, accept := range []string{"text/html", "application/json"} {
		r := httptest.NewRequest("POST", "/x", nil)
		r.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		WriteWaiting(rec, r, v)
		if rec.Code != 403 || rec.Header().Get("Cache-Control") != "no-store" || !strings.Contains(strings.Join(rec.Header().Values("Vary"), ","), "Accept") {
			t.Errorf("%s: %d %v", accept, rec.Code, rec.Header())
		}
		body := rec.Body.String()
		if strings.Contains(body, "<script>alert") {
			t.Errorf("unescaped value: %s", body)
		}
		if accept == "application/json" && body != `{"error":"approval_required"}` {
			t.Errorf("JSON body %s", body)
		}
	}
	// NoStore twice adds Vary once.
	rec := httptest.NewRecorder()
	NoStore(rec.Header())
	NoStore(rec.Header())
	if n := len(rec.Header().Values("Vary")); n != 2 {
		t.Errorf("Vary %v", rec.Header().Values("Vary"))
	}
}

func TestWriteUnavailableAndExtensionRequired(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/x", nil)
	rec := httptest.NewRecorder()
	WriteUnavailable(rec, r, 1500*time.Millisecond, Unavailable{StyleURL: "/s.css"})
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "Try again") {
		t.Errorf("%d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	// A script gets the code as JSON (W12); a page load a page, never
	// JSON shown as a page.
	rec = httptest.NewRecorder()
	rj := httptest.NewRequest("POST", "/x", nil)
	rj.Header.Set("Accept", "application/json")
	WriteExtensionRequired(rec, rj, Unavailable{})
	if rec.Code != 403 || rec.Body.String() != `{"error":"extension_required","extension":"operations"}` {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	rh := httptest.NewRequest("POST", "/x", nil)
	rh.Header.Set("Accept", "text/html,application/xhtml+xml")
	WriteExtensionRequired(rec, rh, Unavailable{StyleURL: "/s.css"})
	if rec.Code != 403 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(rec.Body.String(), "join this browser to the site again") {
		t.Errorf("a page load: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	// With a reason (Kit.ExplainRefusals): in the JSON and on the page.
	rec = httptest.NewRecorder()
	WriteExtensionRequired(rec, rj, Unavailable{Why: "no operations declared"})
	if !strings.Contains(rec.Body.String(), `"error_description":"no operations declared"`) {
		t.Errorf("the reason is not in the JSON: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	WriteExtensionRequired(rec, rh, Unavailable{Why: "no operations declared"})
	if !strings.Contains(rec.Body.String(), "Why: no operations declared") {
		t.Errorf("the reason is not on the page: %s", rec.Body)
	}
}

// The kit's pages never turn into a 500 because the client went away.
func TestPagesWhenTheClientHasGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/exchange", nil)
	r.Header.Set("Accept", "text/html")
	for name, write := range map[string]func(http.ResponseWriter){
		"unavailable": func(w http.ResponseWriter) { WriteUnavailable(w, r, time.Second, Unavailable{}) },
		"unknown":     func(w http.ResponseWriter) { WriteOutcomeUnknown(w, r, time.Second, Unavailable{}) },
		"waiting":     func(w http.ResponseWriter) { WriteWaiting(w, r, Waiting{}) },
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
