package webkittest

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/opsgate/opsgate/internal/headers"
)

// TestRefOnlyForOwnSession: a Poppy-Operation naming another Session's sid
// gives the browser no ref (A10), as a real agent would ignore it.
func TestRefOnlyForOwnSession(t *testing.T) {
	site := New("https://shop.example")
	site.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := headers.FormatOperation("ses_someone_else", "op_1.1-a")
		w.Header().Set("Poppy-Operation", v)
		w.WriteHeader(http.StatusForbidden)
	})
	s := site.NewAgent().Session("usr_1")
	b := site.Browser()
	b.session = s // as if joined: this site has no join
	if res := b.PostForm("/x", url.Values{}); res.StatusCode != 403 || res.Ref != "" {
		t.Fatalf("A10: status %d, ref %q", res.StatusCode, res.Ref)
	}
}
