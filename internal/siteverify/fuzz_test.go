package siteverify

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/webkit/identity"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fuzzEnv is an env whose Resolver reaches only the agent's server: any
// other host is NXDOMAIN, so no fuzzed client_id reaches the network.
func fuzzEnv(f *testing.F) *env {
	clk := newClock()
	a := newAgentServer(f, "ES256", clk)
	d, err := a.Keys.Delegate(time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	e := &env{clk: clk, a: a, v: verifierOf(a, clk, newReplay()), d: d}
	host := strings.TrimPrefix(a.Srv.URL, "https://")
	inner := a.Srv.Client().Transport
	e.v.Resolver.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != host {
			return nil, &net.DNSError{Err: "no such host", Name: r.URL.Hostname(), IsNotFound: true}
		}
		return inner.RoundTrip(r)
	})}
	return e
}

// checkErr: every refusal wraps exactly one of identity.ErrInvalid and
// identity.ErrUnavailable, and only the replay store or the agent's server (never
// down here) can make it identity.ErrUnavailable.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, identity.ErrInvalid) == errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("err = %v: not exactly one of identity.ErrInvalid, identity.ErrUnavailable", err)
	}
	if errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("err = %v: unavailable with every server up", err)
	}
}

// FuzzVerifySession: Session JWTs and browser assertions of any shape are
// refused with identity.ErrInvalid, never a panic; one that verifies verifies once
// (its jti is used up) and says what it was signed to say.
func FuzzVerifySession(f *testing.F) {
	e := fuzzEnv(f)
	ok := func(tok string, err error) string {
		if err != nil {
			f.Fatal(err)
		}
		return tok
	}
	f.Add(ok(e.d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})), "", false)
	f.Add(ok(e.d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1", AccessToken: "at"})), "at", false)
	f.Add(ok(e.d.BrowserAssertion(agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Audience: origin + "/join", SID: "s", User: "u"}, ReturnTo: origin + "/", Extensions: `"operations";v="3"`})), "", true)
	f.Add(junkDelegation(e, e.a.Keys.Kid(), "ES256", 64), "", false)
	f.Add(b64json(map[string]any{"alg": "RS256", "typ": jose.TypSession, "poppy_dlg": junkDelegation(e, "k", "RS256", 512)})+"."+b64json(e.claims())+".AAAA", "", false)
	f.Add(b64json(map[string]any{"alg": "none"})+"."+b64json(jwt.MapClaims{"iss": "https://x.example/a"})+".", "", false)
	f.Add("a.b.c", "", false)
	f.Add("", "", true)
	f.Fuzz(func(t *testing.T, token, accessToken string, browser bool) {
		var s Caller
		var err error
		verify := func() {
			if browser {
				var b BrowserAssertion
				b, err = e.v.VerifyBrowserAssertion(t.Context(), token, origin+"/join", accessToken)
				s = b.Caller
			} else {
				s, err = e.v.VerifySession(t.Context(), token, accessToken)
			}
		}
		verify()
		if err != nil {
			checkErr(t, err)
			return
		}
		if s.ClientID != e.a.ClientID || s.SID == "" || s.User == "" || s.ReplayKey == "" || s.ReplayUntil.IsZero() {
			t.Fatalf("verified %+v", s)
		}
		verify()
		if !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("verified twice: %v", err)
		}
	})
}
