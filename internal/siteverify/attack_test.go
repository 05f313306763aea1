package siteverify

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/webkit/identity"
)

// env is one agent, its server, and a Verifier for it.
type env struct {
	clk *clock
	a   *agentServer
	v   *Verifier
	d   *agentside.Delegation
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := newClock()
	a := newAgentServer(t, "ES256", clk)
	d, err := a.Keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &env{clk: clk, a: a, v: verifierOf(a, clk, newReplay()), d: d}
}

// claims are a valid Session JWT's claims for e, to be spoiled by a case.
func (e *env) claims() jwt.MapClaims {
	now := e.clk.Now()
	return jwt.MapClaims{
		"iss": e.a.ClientID, "aud": origin, "sid": "ses_1", "sub": "usr_1",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": rand.Text(),
	}
}

func (e *env) session(t *testing.T, c agentside.SessionClaims) string {
	t.Helper()
	if c.Audience == "" {
		c.Audience = origin
	}
	if c.SID == "" {
		c.SID, c.User = "ses_1", "usr_1"
	}
	tok, err := e.d.SessionJWT(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// forgeDelegation signs a delegation of e's delegated key with key.
func (e *env) forgeDelegation(t *testing.T, alg string, key crypto.Signer, kid string, iat time.Time, life time.Duration) string {
	t.Helper()
	jwk, err := jose.NewJWK(e.d.Signer().Public(), "", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	return agenttest.Forge(t, alg, key, map[string]any{"typ": jose.TypDelegation, "kid": kid}, jwt.MapClaims{
		"iss": e.a.ClientID, "cnf": map[string]any{"jwk": jwk},
		"iat": iat.Unix(), "exp": iat.Add(life).Unix(),
	})
}

func b64json(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestSessionAttacks: every attack is refused with identity.ErrInvalid (webkit/RULES.md
// choice 1 and its hardening).
func TestSessionAttacks(t *testing.T) {
	t.Parallel()
	hdr := func(e *env) map[string]any { return map[string]any{"typ": jose.TypSession, "poppy_dlg": e.d.Compact()} }
	tests := []struct {
		name string
		// attack returns the error of the attack's verification.
		attack func(t *testing.T, e *env) error
	}{
		{"alg none", func(t *testing.T, e *env) error {
			tok := b64json(map[string]any{"alg": "none", "typ": jose.TypSession, "poppy_dlg": e.d.Compact()}) + "." + b64json(e.claims()) + "."
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"HS256 signed with the delegated public key", func(t *testing.T, e *env) error {
			jwk, _ := jose.NewJWK(e.d.Signer().Public(), "", "ES256")
			secret, _ := json.Marshal(jwk)
			tok := agenttest.Forge(t, "HS256", secret, hdr(e), e.claims())
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"HS256 signed with the agent's JWKS bytes", func(t *testing.T, e *env) error {
			tok := agenttest.Forge(t, "HS256", e.a.Keys.JWKS(), hdr(e), e.claims())
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"signature's last character changed in bits base64 leaves unused", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{})
			_, err := e.v.VerifySession(t.Context(), agenttest.UnusedBitChanged(t, tok), "")
			// The unaltered token verifies after it: the altered one was
			// refused for its encoding and did not use up its jti.
			if _, err := e.v.VerifySession(t.Context(), tok, ""); err != nil {
				t.Fatalf("the unaltered token: %v", err)
			}
			return err
		}},
		{"delegation's last character changed in bits base64 leaves unused", func(t *testing.T, e *env) error {
			h := hdr(e)
			h["poppy_dlg"] = agenttest.UnusedBitChanged(t, e.d.Compact())
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), h, e.claims()), "")
			return err
		}},
		{"expired", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{IssuedAt: e.clk.Now().Add(-3 * time.Minute), Lifetime: time.Minute})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"iat in the future beyond leeway", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{IssuedAt: e.clk.Now().Add(2 * time.Minute)})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"lifetime over 300 s", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{Lifetime: 301 * time.Second})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"no iat", func(t *testing.T, e *env) error {
			c := e.claims()
			delete(c, "iat")
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"no exp", func(t *testing.T, e *env) error {
			c := e.claims()
			delete(c, "exp")
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"wrong aud", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{Audience: "https://evil.example"})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"aud with a path", func(t *testing.T, e *env) error {
			tok := e.session(t, agentside.SessionClaims{Audience: origin + "/"})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"aud naming two sites", func(t *testing.T, e *env) error {
			c := e.claims()
			c["aud"] = []string{origin, "https://other.example"}
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"wrong typ", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": "JWT", "poppy_dlg": e.d.Compact()}, e.claims()), "")
			return err
		}},
		{"browser assertion used as Session JWT", func(t *testing.T, e *env) error {
			tok, _ := e.d.BrowserAssertion(agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Audience: origin, SID: "s", User: "u"}, ReturnTo: origin + "/"})
			_, err := e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"crit header", func(t *testing.T, e *env) error {
			h := hdr(e)
			h["crit"] = []string{"b64"}
			h["b64"] = false
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), h, e.claims()), "")
			return err
		}},
		{"no poppy_dlg", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession}, e.claims()), "")
			return err
		}},
		{"delegation by an unknown kid", func(t *testing.T, e *env) error {
			dlg := e.forgeDelegation(t, "ES256", e.a.Keys.Signer(), "unknown-kid", e.clk.Now(), time.Hour)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), "")
			return err
		}},
		{"delegation kid right but alg wrong", func(t *testing.T, e *env) error {
			p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			dlg := e.forgeDelegation(t, "ES384", p384, e.a.Keys.Kid(), e.clk.Now(), time.Hour)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), "")
			return err
		}},
		{"delegation signed by another key under the agent's kid", func(t *testing.T, e *env) error {
			other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			dlg := e.forgeDelegation(t, "ES256", other, e.a.Keys.Kid(), e.clk.Now(), time.Hour)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), "")
			return err
		}},
		{"delegation with wrong typ", func(t *testing.T, e *env) error {
			jwk, _ := jose.NewJWK(e.d.Signer().Public(), "", "ES256")
			dlg := agenttest.Forge(t, "ES256", e.a.Keys.Signer(), map[string]any{"typ": "JWT", "kid": e.a.Keys.Kid()}, jwt.MapClaims{
				"iss": e.a.ClientID, "cnf": map[string]any{"jwk": jwk}, "iat": e.clk.Now().Unix(), "exp": e.clk.Now().Add(time.Hour).Unix(),
			})
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), "")
			return err
		}},
		{"expired delegation", func(t *testing.T, e *env) error {
			dlg := e.forgeDelegation(t, "ES256", e.a.Keys.Signer(), e.a.Keys.Kid(), e.clk.Now().Add(-2*time.Hour), time.Hour)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), "")
			return err
		}},
		{"delegation lifetime over 24 h", func(t *testing.T, e *env) error {
			d, err := e.a.Keys.Delegate(25 * time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "s", User: "u"})
			_, err = e.v.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"JWT not signed by the delegated key", func(t *testing.T, e *env) error {
			other, _ := e.a.Keys.Delegate(time.Hour)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", other.Signer(), hdr(e), e.claims()), "")
			return err
		}},
		{"iss differs from the delegation's", func(t *testing.T, e *env) error {
			c := e.claims()
			c["iss"] = "https://other.example/agent"
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"empty sid", func(t *testing.T, e *env) error {
			c := e.claims()
			c["sid"] = ""
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"sub with a control character", func(t *testing.T, e *env) error {
			c := e.claims()
			c["sub"] = "usr\n1"
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"sid over 255 bytes", func(t *testing.T, e *env) error {
			c := e.claims()
			c["sid"] = strings.Repeat("s", 256)
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"no jti", func(t *testing.T, e *env) error {
			c := e.claims()
			delete(c, "jti")
			_, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr(e), c), "")
			return err
		}},
		{"replayed jti across two Verifiers sharing one store", func(t *testing.T, e *env) error {
			shared := memstore.New(memstore.Config{})
			v1, v2 := verifierOf(e.a, e.clk, shared), verifierOf(e.a, e.clk, shared)
			tok := e.session(t, agentside.SessionClaims{})
			if _, err := v1.VerifySession(t.Context(), tok, ""); err != nil {
				t.Fatalf("first use: %v", err)
			}
			_, err := v2.VerifySession(t.Context(), tok, "")
			return err
		}},
		{"ath mismatch", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{AccessToken: "token-a"}), "token-b")
			return err
		}},
		{"ath missing with a token", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "token-b")
			return err
		}},
		{"ath present without a token", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{AccessToken: "token-a"}), "")
			return err
		}},
		{"access token issued to another agent", func(t *testing.T, e *env) error {
			s, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{AccessToken: "tok"}), "tok")
			if err != nil {
				t.Fatal(err)
			}
			return CheckAccessToken(s, identity.AccessToken{ClientID: "https://other.example/agent", Account: "acct_1"})
		}},
		{"W146 agent refused by AcceptAgent (a revoked client_id)", func(t *testing.T, e *env) error {
			e.v.AcceptAgent = func(string) bool { return false }
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "")
			return err
		}},
		{"metadata that doesn't name itself", func(t *testing.T, e *env) error {
			m := []byte(`{"client_id":"https://other.example/agent","jwks_uri":"` + e.a.Srv.URL + `/jwks"}`)
			e.a.Metadata.Store(&m)
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "")
			return err
		}},
		{"jwks_uri on another host", func(t *testing.T, e *env) error {
			other := strings.Replace(e.a.Srv.URL, "127.0.0.1", "localhost", 1) + "/jwks"
			m := e.a.Keys.Metadata(other, "x")
			e.a.Metadata.Store(&m)
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "")
			return err
		}},
		{"jwks_uri on another port", func(t *testing.T, e *env) error {
			m := e.a.Keys.Metadata("https://127.0.0.1:1/jwks", "x")
			e.a.Metadata.Store(&m)
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "")
			return err
		}},
		{"redirect", func(t *testing.T, e *env) error {
			_, _, err := e.v.agentKey(t.Context(), e.a.Srv.URL+"/redirect", "k", "ES256")
			return err
		}},
		{"oversized document", func(t *testing.T, e *env) error {
			m := []byte(`{"client_id":"` + e.a.ClientID + `","jwks_uri":"` + e.a.Srv.URL + `/jwks","pad":"` + strings.Repeat("x", 65<<10) + `"}`)
			e.a.Metadata.Store(&m)
			_, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), "")
			return err
		}},
		{"client_id not https", func(t *testing.T, e *env) error {
			_, _, err := e.v.agentKey(t.Context(), "http://agent.example/agent", "k", "ES256")
			return err
		}},
		{"token of 17 KiB", func(t *testing.T, e *env) error {
			_, err := e.v.VerifySession(t.Context(), strings.Repeat("a", 17<<10), "")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			err := tt.attack(t, e)
			if !errors.Is(err, identity.ErrInvalid) {
				t.Fatalf("err = %v, want identity.ErrInvalid", err)
			}
			if errors.Is(err, identity.ErrUnavailable) {
				t.Fatalf("err = %v is also identity.ErrUnavailable", err)
			}
			t.Log(err)
		})
	}
}

// TestAttackTableBaseline checks that the table's valid material verifies,
// so that each attack fails for its own reason.
func TestAttackTableBaseline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hdr := map[string]any{"typ": jose.TypSession, "poppy_dlg": e.d.Compact()}
	if _, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), hdr, e.claims()), ""); err != nil {
		t.Fatalf("forged valid token: %v", err)
	}
	dlg := e.forgeDelegation(t, "ES256", e.a.Keys.Signer(), e.a.Keys.Kid(), e.clk.Now(), time.Hour)
	if _, err := e.v.VerifySession(t.Context(), agenttest.Forge(t, "ES256", e.d.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": dlg}, e.claims()), ""); err != nil {
		t.Fatalf("forged valid delegation: %v", err)
	}
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{AccessToken: "tok"}), "tok"); err != nil {
		t.Fatalf("with access token: %v", err)
	}
	// The leeway: iat 20 s ahead and exp 20 s behind still verify.
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{IssuedAt: e.clk.Now().Add(20 * time.Second)}), ""); err != nil {
		t.Fatalf("iat within leeway: %v", err)
	}
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{IssuedAt: e.clk.Now().Add(-80 * time.Second)}), ""); err != nil {
		t.Fatalf("exp within leeway: %v", err)
	}
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{Lifetime: 300 * time.Second}), ""); err != nil {
		t.Fatalf("lifetime 300 s: %v", err)
	}
}
