package webkit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSIDOfAnyVerifiedSession: every sid webkit/identity accepts (visible
// ASCII) can be named in Poppy-Operation, so a gated request from such a
// Session gets its 403 with the header (W53, W58), never a 500.
func TestSIDOfAnyVerifiedSession(t *testing.T) {
	t.Parallel()
	k := New()
	k.Sessions.(*CookieSessions).Insecure = true
	h := k.Gate(func(r *http.Request) (Action, error) {
		return Action{Key: "k", Terms: map[string]int{"n": 1}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
	for _, sid := range []string{"ses_1", "ses:1.x/y", `s"q\`, strings.Repeat("s", 255)} {
		rec := httptest.NewRecorder()
		if err := k.Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), Session{ID: sid, Agent: "https://a.example/c", User: "u", Extensions: Extensions{"operations": "3"}}); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/x", nil)
		r.AddCookie(rec.Result().Cookies()[0])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got, _, err := ParseOperationHeader(w.Result().Header.Values(HeaderOperation))
		if w.Code != http.StatusForbidden || err != nil || got != sid {
			t.Errorf("sid %q: status %d, Poppy-Operation sid %q, err %v", sid, w.Code, got, err)
		}
	}
}
