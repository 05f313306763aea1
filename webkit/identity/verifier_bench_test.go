package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"math/big"
	"strings"
	"testing"
	"time"
)

var benchAlgs = []string{"ES256", "EdDSA"}

// BenchmarkVerifySession verifies Session JWTs with a warm cache: the
// delegation's and the JWT's signatures, the claims and the replay store.
func BenchmarkVerifySession(b *testing.B) {
	for _, alg := range benchAlgs {
		b.Run(alg, func(b *testing.B) {
			clk := newClock()
			a := newAgentServer(b, alg, clk)
			v := a.verifier(clk, newReplay())
			d, err := a.keys.Delegate(time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			tokens := make([]string, b.N+1)
			for i := range tokens {
				if tokens[i], err = d.SessionJWT(SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"}); err != nil {
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
			d, err := a.keys.Delegate(time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			tok, err := d.SessionJWT(SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
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
				sig, err := b64.DecodeString(jws[i+1:])
				if err != nil {
					b.Fatal(err)
				}
				return check{key: key, msg: []byte(jws[:i]), sig: sig}
			}
			checks := []check{split(d.Compact(), a.keys.key.Public()), split(tok, d.key.Public())}
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
