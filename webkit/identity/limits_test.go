package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/jose"
)

// fakeModulus is an odd number of exactly bits bits, base64url: the parser
// and the cost of a signature check do not depend on it being a product of
// two primes.
func fakeModulus(bits int) string {
	n := make([]byte, (bits+7)/8)
	rand.Read(n)
	n[0] &= byte(0xff >> (len(n)*8 - bits))
	n[0] |= byte(0x80 >> (len(n)*8 - bits))
	n[len(n)-1] |= 1
	return jose.B64.EncodeToString(n)
}

func rsaJWK(kid string, bits int, e string) jose.JWK {
	return jose.JWK{Kty: "RSA", Kid: kid, Alg: "RS256", Use: "sig", N: fakeModulus(bits), E: e}
}

// e2p31m1 is the exponent 2^31 − 1 of the review's 0.85 s key.
var e2p31m1 = jose.B64.EncodeToString(big.NewInt(1<<31 - 1).Bytes())

// TestKeyLimits: issue 10 "Keys": RSA 2048–4096 bits with e = 65537, EC P-256
// and P-384, Ed25519; nothing else is parsed into a key. Before the fix an
// RSA modulus of any size above 2048 bits and any odd exponent were
// accepted, so a 65,536-bit key with e = 2^31 − 1 made one junk signature
// cost ~0.85 s.
func TestKeyLimits(t *testing.T) {
	t.Parallel()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec, _ := jose.NewJWK(p256.Public(), "k", "ES256")
	for _, tt := range []struct {
		name string
		jwk  jose.JWK
		ok   bool
	}{
		{"RSA 2048", rsaJWK("k", 2048, "AQAB"), true},
		{"RSA 3072", rsaJWK("k", 3072, "AQAB"), true},
		{"RSA 4096", rsaJWK("k", 4096, "AQAB"), true},
		{"RSA 2047", rsaJWK("k", 2047, "AQAB"), false},
		{"RSA 4097", rsaJWK("k", 4097, "AQAB"), false},
		{"RSA 8192", rsaJWK("k", 8192, "AQAB"), false},
		{"RSA 32000 (the review's cnf.jwk)", rsaJWK("k", 32000, "AQAB"), false},
		{"RSA 65536 with e 2^31-1 (the review's JWKS key)", rsaJWK("k", 65536, e2p31m1), false},
		{"RSA 4096 with e 2^31-1", rsaJWK("k", 4096, e2p31m1), false},
		{"RSA 2048 with e 3", rsaJWK("k", 2048, "Aw"), false},
		{"RSA 2048 with e 65537 zero-padded", rsaJWK("k", 2048, "AAEAAQ"), false},
		{"RSA even modulus", func() jose.JWK {
			j := rsaJWK("k", 2048, "AQAB")
			n, _ := jose.B64.DecodeString(j.N)
			n[len(n)-1] &^= 1
			j.N = jose.B64.EncodeToString(n)
			return j
		}(), false},
		{"EC P-256", ec, true},
		{"EC P-521", jose.JWK{Kty: "EC", Crv: "P-521", X: ec.X, Y: ec.Y}, false},
		{"EC secp256k1", jose.JWK{Kty: "EC", Crv: "secp256k1", X: ec.X, Y: ec.Y}, false},
		{"OKP Ed448", jose.JWK{Kty: "OKP", Crv: "Ed448", X: strings.Repeat("A", 76)}, false},
		{"OKP X25519", jose.JWK{Kty: "OKP", Crv: "X25519", X: strings.Repeat("A", 43)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw, _ := json.Marshal(tt.jwk)
			_, err := jose.ParseJWK(raw)
			if (err == nil) != tt.ok {
				t.Errorf("ParseJWK: %v, want ok %v", err, tt.ok)
			}
		})
	}
	t.Run("a jose.JWK over 4 KiB is not decoded", func(t *testing.T) {
		raw, _ := json.Marshal(jose.JWK{Kty: "OKP", Crv: "Ed25519", X: ec.X, Kid: strings.Repeat("k", jose.MaxJWKBytes)})
		if _, err := jose.ParseJWK(raw); err == nil {
			t.Error("accepted")
		}
	})
}

// junkDelegation is a delegation for e's agent under kid and alg whose
// signature is garbage of sigLen bytes.
func junkDelegation(e *env, kid, alg string, sigLen int) string {
	jwk, _ := jose.NewJWK(e.d.Signer().Public(), "", "ES256")
	now := e.clk.Now()
	sig := make([]byte, sigLen)
	rand.Read(sig)
	return b64json(map[string]any{"alg": alg, "typ": jose.TypDelegation, "kid": kid}) + "." +
		b64json(jwt.MapClaims{"iss": e.a.clientID, "cnf": map[string]any{"jwk": jwk}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}) + "." +
		jose.B64.EncodeToString(sig)
}

// sessionWith is a Session JWT of e's delegated key under delegation dlg.
func sessionWith(t testing.TB, e *env, dlg string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": e.a.clientID, "aud": origin, "sid": "ses_1", "sub": "usr_1",
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
	if err := json.Unmarshal(e.a.keys.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	for _, j := range []jose.JWK{rsaJWK("huge", 65536, e2p31m1), rsaJWK("big", 8192, "AQAB"), rsaJWK("exp", 4096, e2p31m1)} {
		raw, _ := json.Marshal(j)
		set.Keys = append(set.Keys, raw)
	}
	body, _ := json.Marshal(set)
	e.a.jwks.Store(&body)
	a, err := e.v.Resolver.agent(t.Context(), e.a.clientID)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Keys) != 1 || a.Keys[0].Kid != e.a.keys.Kid() {
		t.Fatalf("loaded %d keys, want only the agent's ES256 key", len(a.Keys))
	}
	for _, kid := range []string{"huge", "big", "exp"} {
		start := time.Now()
		_, err := e.v.VerifySession(t.Context(), sessionWith(t, e, junkDelegation(e, kid, "RS256", 8192)), "")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "unknown kid") {
			t.Errorf("kid %s: err = %v, want ErrInvalid for an unknown kid", kid, err)
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
	for _, j := range []jose.JWK{rsaJWK("", 32000, "AQAB"), rsaJWK("", 4096, e2p31m1)} {
		now := e.clk.Now()
		dlg := forge(t, "ES256", e.a.keys.Signer(), map[string]any{"typ": jose.TypDelegation, "kid": e.a.keys.Kid()}, jwt.MapClaims{
			"iss": e.a.clientID, "cnf": map[string]any{"jwk": j}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		})
		sig := make([]byte, 4000)
		rand.Read(sig)
		tok := b64json(map[string]any{"alg": "RS256", "typ": jose.TypSession, "poppy_dlg": dlg}) + "." + b64json(e.claims()) + "." + jose.B64.EncodeToString(sig)
		_, err := e.v.VerifySession(t.Context(), tok, "")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cnf.jwk") {
			t.Errorf("err = %v, want ErrInvalid for cnf.jwk", err)
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
	dlg := e.forgeDelegation(t, "ES256", other, e.a.keys.Kid(), e.clk.Now(), time.Hour)
	for i := range 5 {
		_, err := e.v.VerifySession(t.Context(), sessionWith(t, e, dlg), "")
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("try %d: err = %v, want ErrInvalid", i, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the failed delegation was verified %d times in 30 s, want 1", n)
	}
	e.clk.Add(failedDelegationTTL + time.Second)
	if _, err := e.v.VerifySession(t.Context(), sessionWith(t, e, dlg), ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("after 30 s: err = %v, want ErrInvalid", err)
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
		d, err := e.a.keys.Delegate(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.d = d
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(time.Minute + leeway + time.Second)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("after the delegation's exp: err = %v, want ErrInvalid", err)
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
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("revoked: err = %v, want ErrInvalid", err)
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
		if err := e.a.keys.Rotate(); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(defaultRefresh + time.Second) // the Resolver loads the agent again
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("after rotation: err = %v, want ErrInvalid", err)
		}
	})
	t.Run("another key under the same kid stops its cached delegations", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatal(err)
		}
		other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		j, _ := jose.NewJWK(other.Public(), e.a.keys.Kid(), "ES256")
		body, _ := json.Marshal(map[string]any{"keys": []jose.JWK{j}})
		e.a.jwks.Store(&body)
		e.clk.Add(defaultRefresh + time.Second)
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("after the key changed: err = %v, want ErrInvalid", err)
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
		if _, err := e.v.VerifySession(t.Context(), sessionWith(t, e, junkDelegation(e, e.a.keys.Kid(), "ES256", 64)), ""); !errors.Is(err, ErrInvalid) {
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
	other, err := e.a.keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok := forge(t, "ES256", other.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": e.d.Compact()}, e.claims())
	for i := range 5 {
		if _, err := e.v.VerifySession(t.Context(), tok, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("try %d: err = %v, want ErrInvalid", i, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the failed token was verified %d times in 30 s, want 1", n)
	}
	if _, err := e.v.VerifySession(t.Context(), tok, "another-token"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("with an access token: err = %v, want ErrInvalid", err)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the token with an access token was verified %d times in all, want 2", n)
	}
	e.clk.Add(failedDelegationTTL + time.Second)
	if _, err := e.v.VerifySession(t.Context(), tok, ""); !errors.Is(err, ErrInvalid) {
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
		if _, err := e.v.VerifySession(t.Context(), good, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("replay: err = %v", err)
		}
	}
	if n := asked.Load(); n != 5 {
		t.Errorf("the valid token and its replays were verified %d times, want 2", n-3)
	}
}
