package siteverify

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/webkit/identity"
)

var benchAlgs = []string{"ES256", "EdDSA"}

// BenchmarkVerifySession verifies Session JWTs with a warm cache: the
// delegation's and the JWT's signatures, the claims and the replay store.
func BenchmarkVerifySession(b *testing.B) {
	for _, alg := range benchAlgs {
		b.Run(alg, func(b *testing.B) {
			clk := newClock()
			a := newAgentServer(b, alg, clk)
			v := verifierOf(a, clk, newReplay())
			d, err := a.Keys.Delegate(time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			tokens := make([]string, b.N+1)
			for i := range tokens {
				if tokens[i], err = d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := v.VerifySession(b.Context(), tokens[b.N], ""); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := v.VerifySession(b.Context(), tokens[i], ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRawSignatureChecks does only the cryptography of one Session JWT:
// the two signature checks (delegation, then JWT), with hashing, and nothing
// else; BenchmarkVerifySession's overhead over it is the kit's.
func BenchmarkRawSignatureChecks(b *testing.B) {
	for _, alg := range benchAlgs {
		b.Run(alg, func(b *testing.B) {
			clk := newClock()
			a := newAgentServer(b, alg, clk)
			d, err := a.Keys.Delegate(time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			tok, err := d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
			if err != nil {
				b.Fatal(err)
			}
			type check struct {
				key any
				msg []byte
				sig []byte
			}
			split := func(jws string, key any) check {
				i := strings.LastIndexByte(jws, '.')
				sig, err := jose.B64.DecodeString(jws[i+1:])
				if err != nil {
					b.Fatal(err)
				}
				return check{key: key, msg: []byte(jws[:i]), sig: sig}
			}
			checks := []check{split(d.Compact(), a.Keys.Signer().Public()), split(tok, d.Signer().Public())}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for _, c := range checks {
					switch k := c.key.(type) {
					case *ecdsa.PublicKey:
						h := sha256.Sum256(c.msg)
						r := new(big.Int).SetBytes(c.sig[:32])
						s := new(big.Int).SetBytes(c.sig[32:])
						if !ecdsa.Verify(k, h[:], r, s) {
							b.Fatal("ecdsa")
						}
					case ed25519.PublicKey:
						if !ed25519.Verify(k, c.msg, c.sig) {
							b.Fatal("ed25519")
						}
					}
				}
			}
		})
	}
}

// BenchmarkJunkSignature: issue 10 "Keys": what a request with a garbage
// signature costs against the largest key accepted, a 4096-bit RSA key with
// e = 65537 (target ≤ 2 ms of CPU). "fresh" sends a new junk delegation
// every time, so each one is verified; "replayed" sends the same one, which
// the delegation cache refuses with a lookup; "cnf.jwk" is a valid
// delegation vouching for a 4096-bit key and a Session JWT with a garbage
// signature, new each time ("fresh") or the same again ("replayed", which
// the failed-token cache refuses with a lookup).
func BenchmarkJunkSignature(b *testing.B) {
	clk := newClock()
	a := newAgentServer(b, "ES256", clk)
	d, err := a.Keys.Delegate(time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	e := &env{clk: clk, a: a, v: verifierOf(a, clk, newReplay()), d: d}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(a.Keys.JWKS(), &set); err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(agenttest.RSAJWK("rsa4096", 4096, "AQAB"))
	set.Keys = append(set.Keys, raw)
	body, _ := json.Marshal(set)
	a.JWKS.Store(&body)
	run := func(b *testing.B, token func(i int) string) {
		tokens := make([]string, b.N)
		for i := range tokens {
			tokens[i] = token(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := e.v.VerifySession(b.Context(), tokens[i], ""); !errors.Is(err, identity.ErrInvalid) {
				b.Fatalf("err = %v, want identity.ErrInvalid", err)
			}
		}
	}
	b.Run("RSA4096/fresh-delegation", func(b *testing.B) {
		run(b, func(int) string { return sessionWith(b, e, junkDelegation(e, "rsa4096", "RS256", 512)) })
	})
	b.Run("RSA4096/replayed-delegation", func(b *testing.B) {
		dlg := junkDelegation(e, "rsa4096", "RS256", 512)
		run(b, func(int) string { return sessionWith(b, e, dlg) })
	})
	b.Run("RSA4096/cnf.jwk", func(b *testing.B) {
		now := clk.Now()
		dlg, err := jose.Sign("ES256", a.Keys.Signer(), map[string]any{"typ": jose.TypDelegation, "kid": a.Keys.Kid()}, jwt.MapClaims{
			"iss": a.ClientID, "cnf": map[string]any{"jwk": agenttest.RSAJWK("", 4096, "AQAB")}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		})
		if err != nil {
			b.Fatal(err)
		}
		hdr := b64json(map[string]any{"alg": "RS256", "typ": jose.TypSession, "poppy_dlg": dlg})
		junk := func(int) string {
			sig := make([]byte, 512)
			rand.Read(sig)
			return hdr + "." + b64json(e.claims()) + "." + jose.B64.EncodeToString(sig)
		}
		b.Run("fresh", func(b *testing.B) { run(b, junk) })
		b.Run("replayed", func(b *testing.B) {
			tok := junk(0)
			run(b, func(int) string { return tok })
		})
	})
}

// BenchmarkDelegationCache: issue 10 "Delegation cache": a valid Session
// JWT's verification with the cache (the delegation's signature is checked
// once) and without it (MaxDelegations < 0: checked every time).
func BenchmarkDelegationCache(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, cached := range []bool{true, false} {
			name := alg + "/cached"
			if !cached {
				name = alg + "/uncached"
			}
			b.Run(name, func(b *testing.B) {
				clk := newClock()
				a := newAgentServer(b, alg, clk)
				v := verifierOf(a, clk, newReplay())
				if !cached {
					v.delegationCap = -1
				}
				d, err := a.Keys.Delegate(time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				tokens := make([]string, b.N+1)
				for i := range tokens {
					if tokens[i], err = d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := v.VerifySession(b.Context(), tokens[b.N], ""); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if _, err := v.VerifySession(b.Context(), tokens[i], ""); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
