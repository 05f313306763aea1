package webkit

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/view"
)

// W11 W12 A Session that did not declare operations v3 gets no operation:
// a script gets extension_required with the extension's name, a page load
// a page that says so (never JSON shown as a page); with ExplainRefusals
// both carry the reason.
func TestRefuseExtensionRequired(t *testing.T) {
	for _, explain := range []bool{false, true} {
		k := New(testKeys...)
		k.ExplainRefusals = explain
		rj := httptest.NewRequest("POST", "/x", nil)
		rj.Header.Set("Accept", "application/json")
		rec := httptest.NewRecorder()
		k.refuseFor(rec, rj, ErrExtensionRequired, view.Waiting{})
		body := rec.Body.String()
		if rec.Code != 403 || !strings.HasPrefix(body, `{"error":"extension_required"`) || !strings.Contains(body, `"extension":"operations"`) {
			t.Errorf("script: %d %s", rec.Code, body)
		}
		if got := strings.Contains(body, `"error_description":`); got != explain {
			t.Errorf("explain %v: error_description in %s", explain, body)
		}
		rh := httptest.NewRequest("POST", "/x", nil)
		rh.Header.Set("Accept", "text/html,application/xhtml+xml")
		rec = httptest.NewRecorder()
		k.refuseFor(rec, rh, ErrExtensionRequired, view.Waiting{})
		body = rec.Body.String()
		if rec.Code != 403 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(body, "join this browser to the site again") {
			t.Errorf("page load: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), body)
		}
		if got := strings.Contains(body, "Why: "); got != explain {
			t.Errorf("explain %v: the page's Why line: %s", explain, body)
		}
	}
}
