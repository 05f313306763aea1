package webkittest_test

import (
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/webkit/webkittest"
)

// headerToken is a CSRF protection whose token is only in a header, as
// gorilla/csrf's is on a page that sends it from a <meta> (htmx's
// hx-headers, Turbo, fetch): GET /token sets the cookie and answers the
// token; every other request must send it in header. It is what a form's
// own submission can't carry.
func headerToken(header string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/token" {
				tok := rand.Text()
				http.SetCookie(w, &http.Cookie{Name: "csrf", Value: tok, Path: "/", Secure: true, HttpOnly: true})
				w.Write([]byte(tok))
				return
			}
			if r.Method != http.MethodGet {
				c, err := r.Cookie("csrf")
				if err != nil || r.Header.Get(header) == "" || r.Header.Get(header) != c.Value {
					http.Error(w, "CSRF token not found in the "+header+" header", http.StatusForbidden)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Issue 35: Response.Continue sends what the browser's own form
// submission sends, never Browser.Header, so a site whose CSRF token is
// only in a header fails in its own test as it does in Chromium, instead
// of passing.
func TestContinueFailsWithAHeaderOnlyToken(t *testing.T) {
	t.Run("W62 a token header the kit knows: the page says it can't be repeated", func(t *testing.T) {
		g := newGatedSite(t, nil, headerToken("X-CSRF-Token"))
		s, b := g.join(t)
		b.Header = http.Header{"X-CSRF-Token": {string(b.Get("/token").Body)}}
		res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
		approve(t, s, res)
		c := res.Continue()
		if !errors.Is(c.Err, webkittest.ErrNotRepeatable) || !strings.Contains(c.Err.Error(), "CSRF token in the X-Csrf-Token header") {
			t.Fatalf("Continue on a page whose request's token was in a header: %v, want ErrNotRepeatable naming the header", c.Err)
		}
		if n := len(g.runs()); n != 0 {
			t.Fatalf("the handler ran %d times", n)
		}
		// The page's script repeats it, with its header: once.
		if again := b.Again(); again.StatusCode != http.StatusOK || len(g.runs()) != 1 {
			t.Errorf("W93 the script's repeat: %d %.200s; runs %d", again.StatusCode, again.Body, len(g.runs()))
		}
	})
	t.Run("W62 any other header: Continue sends no Browser.Header, and the site refuses it", func(t *testing.T) {
		g := newGatedSite(t, nil, headerToken("X-Shop-Auth"))
		s, b := g.join(t)
		b.Header = http.Header{"X-Shop-Auth": {string(b.Get("/token").Body)}}
		res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
		approve(t, s, res)
		c := res.Continue()
		if c.Err != nil || c.StatusCode != http.StatusForbidden || c.Ref != "" || !strings.Contains(string(c.Body), "CSRF token not found") {
			t.Fatalf("Continue: %d %v ref %q %.200s; want the site's own refusal: a form's submission carries no X-Shop-Auth", c.StatusCode, c.Err, c.Ref, c.Body)
		}
		if n := len(g.runs()); n != 0 {
			t.Fatalf("W33: the handler ran %d times", n)
		}
	})
}

// An htmx request is Browser.Header with HX-Request: true: the Gate
// answers with the waiting card, which Continue says the page's script
// repeats; Again is that repeat (htmx.ajax with the page's headers), and
// the handler runs once.
func TestHtmxRequestAndItsRepeat(t *testing.T) {
	g := newGatedSite(t, nil, headerToken("X-CSRF-Token"))
	s, b := g.join(t)
	b.Header = http.Header{"HX-Request": {"true"}, "X-CSRF-Token": {string(b.Get("/token").Body)}}
	res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden || res.Ref == "" || !strings.HasPrefix(string(res.Body), `<section class="opsgate-card`) || res.Header.Get("HX-Reselect") != ".opsgate-card" {
		t.Fatalf("W65 the htmx answer: %d ref %q %q\n%s", res.StatusCode, res.Ref, res.Header, res.Body)
	}
	if c := res.Continue(); c.Err == nil || !strings.Contains(c.Err.Error(), "Browser.Again") {
		t.Errorf("Continue on an htmx card: %v, want an error pointing at Browser.Again", c.Err)
	}
	approve(t, s, res)
	if again := b.Again(); again.StatusCode != http.StatusOK || string(again.Body) != "exchanged for size L" {
		t.Errorf("W97 htmx's repeat: %d %s", again.StatusCode, again.Body)
	}
	if n := len(g.runs()); n != 1 {
		t.Errorf("W32 the handler ran %d times", n)
	}
	if again := b.Again(); again.StatusCode != http.StatusForbidden || len(g.runs()) != 1 {
		t.Errorf("W96 a second repeat: %d, runs %d: the approval is used up", again.StatusCode, len(g.runs()))
	}
}
