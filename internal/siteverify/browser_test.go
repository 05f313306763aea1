package siteverify

import (
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/webkit/identity"
)

func TestVerifyBrowserAssertion(t *testing.T) {
	t.Parallel()
	const join = origin + "/poppy/join"
	tests := []struct {
		name   string
		claims agentside.BrowserClaims
		token  string // the access token sent with the form
		aud    string // the audience verified; "" means join
		ok     bool
	}{
		{"signed out", agentside.BrowserClaims{ReturnTo: origin + "/orders?id=1", Extensions: `"operations";v="3"`}, "", "", true},
		{"signed in", agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{AccessToken: "tok"}, ReturnTo: origin + "/"}, "tok", "", true},
		{"return_to with the default port", agentside.BrowserClaims{ReturnTo: "https://shop.example:443/x"}, "", "", true},
		{"return_to on another origin", agentside.BrowserClaims{ReturnTo: "https://evil.example/"}, "", "", false},
		{"return_to on another port", agentside.BrowserClaims{ReturnTo: "https://shop.example:8443/"}, "", "", false},
		{"return_to over http", agentside.BrowserClaims{ReturnTo: "http://shop.example/"}, "", "", false},
		{"return_to with userinfo", agentside.BrowserClaims{ReturnTo: "https://shop.example@evil.example/"}, "", "", false},
		{"return_to relative", agentside.BrowserClaims{ReturnTo: "/orders"}, "", "", false},
		{"return_to scheme-relative", agentside.BrowserClaims{ReturnTo: "//evil.example/"}, "", "", false},
		{"return_to with a backslash", agentside.BrowserClaims{ReturnTo: `https://shop.example\@evil.example/`}, "", "", false},
		{"lifetime over 60 s", agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Lifetime: 61 * time.Second}, ReturnTo: origin + "/"}, "", "", false},
		{"aud of another endpoint", agentside.BrowserClaims{ReturnTo: origin + "/"}, "", origin + "/other", false},
		{"ath missing with a token", agentside.BrowserClaims{ReturnTo: origin + "/"}, "tok", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := tt.claims
			c.Audience, c.SID, c.User = join, "ses_1", "usr_1"
			tok, err := e.d.BrowserAssertion(c)
			if err != nil {
				t.Fatal(err)
			}
			aud := tt.aud
			if aud == "" {
				aud = join
			}
			b, err := e.v.VerifyBrowserAssertion(t.Context(), tok, aud, tt.token)
			if !tt.ok {
				if !errors.Is(err, identity.ErrInvalid) {
					t.Fatalf("err = %v, want identity.ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.ReturnTo != c.ReturnTo || b.Extensions != c.Extensions || b.SID != "ses_1" || b.ClientID != e.a.ClientID {
				t.Errorf("got %+v", b)
			}
			// Single use: the same assertion never joins twice.
			if _, err := e.v.VerifyBrowserAssertion(t.Context(), tok, aud, tt.token); !errors.Is(err, identity.ErrInvalid) {
				t.Errorf("replay: err = %v, want identity.ErrInvalid", err)
			}
		})
	}
}

// TestSessionJWTIsNotABrowserAssertion: the typ keeps the two apart.
func TestSessionJWTIsNotABrowserAssertion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.session(t, agentside.SessionClaims{Audience: origin + "/poppy/join"})
	if _, err := e.v.VerifyBrowserAssertion(t.Context(), tok, origin+"/poppy/join", ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("err = %v, want identity.ErrInvalid", err)
	}
}
