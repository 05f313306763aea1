package siteverify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/webkit/identity"
)

// junkDelegation is a delegation for e's agent under kid and alg whose
// signature is garbage of sigLen bytes.
func junkDelegation(e *env, kid, alg string, sigLen int) string {
	jwk, _ := jose.NewJWK(e.d.Signer().Public(), "", "ES256")
	now := e.clk.Now()
	sig := make([]byte, sigLen)
	rand.Read(sig)
	return b64json(map[string]any{"alg": alg, "typ": jose.TypDelegation, "kid": kid}) + "." +
		b64json(jwt.MapClaims{"iss": e.a.ClientID, "cnf": map[string]any{"jwk": jwk}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}) + "." +
		jose.B64.EncodeToString(sig)
}

// sessionWith is a Session JWT of e's delegated key under delegation dlg.
func sessionWith(t testing.TB, e *env, dlg string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": e.a.ClientID, "aud": origin, "sid": "ses_1", "sub": "usr_1",
		"iat": e.clk.Now().Unix(), "exp": e.clk.Now().Add(time.Minute).Unix(), "jti": rand.Text(),
	})
	tok.Header["typ"], tok.Header["poppy_dlg"] = jose.TypSession, dlg
	s, err := tok.SignedString(e.d.Signer())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHostileAgentKeysRefused: an agent's key set with keys outside the
// limits loads without them (RFC 7517 §5: unusable keys are skipped), so a
// delegation naming one is refused before any signature check. Before the
// fix the 65,536-bit key was loaded and used.
func TestHostileAgentKeysRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(e.a.Keys.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	for _, j := range []jose.JWK{agenttest.RSAJWK("huge", 65536, agenttest.E2p31m1), agenttest.RSAJWK("big", 8192, "AQAB"), agenttest.RSAJWK("exp", 4096, agenttest.E2p31m1)} {
		raw, _ := json.Marshal(j)
		set.Keys = append(set.Keys, raw)
	}
	body, _ := json.Marshal(set)
	e.a.JWKS.Store(&body)
	if _, _, err := e.v.agentKey(t.Context(), e.a.ClientID, e.a.Keys.Kid(), "ES256"); err != nil {
		t.Fatal(err)
	}
	for _, kid := range []string{"huge", "big", "exp"} {
		start := time.Now()
		_, err := e.v.VerifySession(t.Context(), sessionWith(t, e, junkDelegation(e, kid, "RS256", 8192)), "")
		if !errors.Is(err, identity.ErrInvalid) || !strings.Contains(err.Error(), "unknown kid") {
			t.Errorf("kid %s: err = %v, want identity.ErrInvalid for an unknown kid", kid, err)
		}
		t.Logf("kid %s refused in %v", kid, time.Since(start))
	}
}

// TestHostileCnfKeyRefused: a delegation vouching for a 32,000-bit RSA key
// (cnf.jwk) is refused as a delegation, before the Session JWT's signature
// is checked with it. Before the fix the key was accepted and each junk
// Session JWT cost ~38 ms.
func TestHostileCnfKeyRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, j := range []jose.JWK{agenttest.RSAJWK("", 32000, "AQAB"), agenttest.RSAJWK("", 4096, agenttest.E2p31m1)} {
		now := e.clk.Now()
		dlg := agenttest.Forge(t, "ES256", e.a.Keys.Signer(), map[string]any{"typ": jose.TypDelegation, "kid": e.a.Keys.Kid()}, jwt.MapClaims{
			"iss": e.a.ClientID, "cnf": map[string]any{"jwk": j}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		})
		sig := make([]byte, 4000)
		rand.Read(sig)
		tok := b64json(map[string]any{"alg": "RS256", "typ": jose.TypSession, "poppy_dlg": dlg}) + "." + b64json(e.claims()) + "." + jose.B64.EncodeToString(sig)
		_, err := e.v.VerifySession(t.Context(), tok, "")
		if !errors.Is(err, identity.ErrInvalid) || !strings.Contains(err.Error(), "cnf.jwk") {
			t.Errorf("err = %v, want identity.ErrInvalid for cnf.jwk", err)
		}
	}
}

// TestFailedDelegationRemembered: issue 10 "Delegation cache": a delegation
// that failed is refused again for 30 s without being verified again (the
// agent is not even looked up: AcceptAgent is not asked), then verified
// again. Before the fix every replay verified the signature again.
func TestFailedDelegationRemembered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var asked atomic.Int64
	e.v.AcceptAgent = func(string) bool { asked.Add(1); return true }
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dlg := e.forgeDelegation(t, "ES256", other, e.a.Keys.Kid(), e.clk.Now(), time.Hour)
	for i := range 5 {
		_, err := e.v.VerifySession(t.Context(), sessionWith(t, e, dlg), "")
		if !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("try %d: err = %v, want identity.ErrInvalid", i, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the failed delegation was verified %d times in 30 s, want 1", n)
	}
	e.clk.Add(failedDelegationTTL + time.Second)
	if _, err := e.v.VerifySession(t.Context(), sessionWith(t, e, dlg), ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("after 30 s: err = %v, want identity.ErrInvalid", err)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("after 30 s the delegation was verified %d times in all, want 2", n)
	}
}

// TestVerifiedDelegationCached: a verified delegation is kept until its
// exp, and exp, AcceptAgent (W146) and the agent's current key are checked
// on every use.
func TestVerifiedDelegationCached(t *testing.T) {
	t.Parallel()
	t.Run("kept, and not verified again", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for i := range 3 {
			if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
				t.Fatalf("try %d: %v", i, err)
			}
		}
		e.v.dlg.mu.Lock()
		n := len(e.v.dlg.verified)
		e.v.dlg.mu.Unlock()
		if n != 1 {
			t.Errorf("%d verified delegations cached, want 1", n)
		}
	})
	t.Run("exp checked on every use", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		d, err := e.a.Keys.Delegate(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.d = d
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(time.Minute + jose.Leeway + time.Second)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("after the delegation's exp: err = %v, want identity.ErrInvalid", err)
		}
	})
	t.Run("W146 AcceptAgent asked on every use", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var revoked atomic.Bool
		e.v.AcceptAgent = func(string) bool { return !revoked.Load() }
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		revoked.Store(true)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("revoked: err = %v, want identity.ErrInvalid", err)
		}
		revoked.Store(false)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatalf("accepted again: %v", err)
		}
	})
	t.Run("a key rotated out stops its cached delegations", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		if err := e.a.Keys.Rotate(); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(resolverRefresh + time.Second) // the Resolver loads the agent again
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("after rotation: err = %v, want identity.ErrInvalid", err)
		}
	})
	t.Run("another key under the same kid stops its cached delegations", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		j, _ := jose.NewJWK(other.Public(), e.a.Keys.Kid(), "ES256")
		body, _ := json.Marshal(map[string]any{"keys": []jose.JWK{j}})
		e.a.JWKS.Store(&body)
		e.clk.Add(resolverRefresh + time.Second)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("after the key changed: err = %v, want identity.ErrInvalid", err)
		}
	})
}

// TestDelegationCacheBounded: junk fills only the failed half, within its
// bound, and never evicts a verified delegation.
func TestDelegationCacheBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.v.delegationCap = 4
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := e.v.VerifySession(t.Context(), sessionWith(t, e, junkDelegation(e, e.a.Keys.Kid(), "ES256", 64)), ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("junk: err = %v", err)
		}
	}
	e.v.dlg.mu.Lock()
	failed, verified := len(e.v.dlg.failed), len(e.v.dlg.verified)
	e.v.dlg.mu.Unlock()
	if failed > 4 || verified != 1 {
		t.Errorf("cache holds %d failed and %d verified, want ≤ 4 and 1", failed, verified)
	}
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatalf("the verified delegation after the junk: %v", err)
	}
}

// TestFailedTokenRemembered: issue 10: a Session JWT that failed is refused
// again for 30 s without being verified again (its jti was not used up, so
// the same bytes could be replayed forever at the price of a signature
// check each); the same token with other credentials (another access
// token) is verified on its own. Before the fix every replay was verified.
func TestFailedTokenRemembered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var asked atomic.Int64
	e.v.AcceptAgent = func(string) bool { asked.Add(1); return true }
	// A valid delegation and a Session JWT signed by another key.
	other, err := e.a.Keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok := agenttest.Forge(t, "ES256", other.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": e.d.Compact()}, e.claims())
	for i := range 5 {
		if _, err := e.v.VerifySession(t.Context(), tok, ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("try %d: err = %v, want identity.ErrInvalid", i, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the failed token was verified %d times in 30 s, want 1", n)
	}
	if _, err := e.v.VerifySession(t.Context(), tok, "another-token"); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("with an access token: err = %v, want identity.ErrInvalid", err)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the token with an access token was verified %d times in all, want 2", n)
	}
	e.clk.Add(failedDelegationTTL + time.Second)
	if _, err := e.v.VerifySession(t.Context(), tok, ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatal(err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("after 30 s the token was verified %d times in all, want 3", n)
	}
	// A replayed valid token: refused, then refused from the cache.
	good := e.session(t, agentside.SessionClaims{})
	if _, err := e.v.VerifySession(t.Context(), good, ""); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.v.VerifySession(t.Context(), good, ""); !errors.Is(err, identity.ErrInvalid) {
			t.Fatalf("replay: err = %v", err)
		}
	}
	if n := asked.Load(); n != 5 {
		t.Errorf("the valid token and its replays were verified %d times, want 2", n-3)
	}
}
