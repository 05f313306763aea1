package respond

import (
	"net/http/httptest"
	"testing"
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

// NoStore twice adds Vary once (W68).
func TestNoStoreTwice(t *testing.T) {
	rec := httptest.NewRecorder()
	NoStore(rec.Header())
	NoStore(rec.Header())
	if rec.Header().Get("Cache-Control") != "no-store" || len(rec.Header().Values("Vary")) != 2 {
		t.Errorf("%v", rec.Header())
	}
}

func TestExtensionRequired(t *testing.T) {
	rec := httptest.NewRecorder()
	ExtensionRequired(rec, "")
	if rec.Code != 403 || rec.Body.String() != `{"error":"extension_required","extension":"operations"}` {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}
