package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
)

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
		{"RSA 2048", agenttest.RSAJWK("k", 2048, "AQAB"), true},
		{"RSA 3072", agenttest.RSAJWK("k", 3072, "AQAB"), true},
		{"RSA 4096", agenttest.RSAJWK("k", 4096, "AQAB"), true},
		{"RSA 2047", agenttest.RSAJWK("k", 2047, "AQAB"), false},
		{"RSA 4097", agenttest.RSAJWK("k", 4097, "AQAB"), false},
		{"RSA 8192", agenttest.RSAJWK("k", 8192, "AQAB"), false},
		{"RSA 32000 (the review's cnf.jwk)", agenttest.RSAJWK("k", 32000, "AQAB"), false},
		{"RSA 65536 with e 2^31-1 (the review's JWKS key)", agenttest.RSAJWK("k", 65536, agenttest.E2p31m1), false},
		{"RSA 4096 with e 2^31-1", agenttest.RSAJWK("k", 4096, agenttest.E2p31m1), false},
		{"RSA 2048 with e 3", agenttest.RSAJWK("k", 2048, "Aw"), false},
		{"RSA 2048 with e 65537 zero-padded", agenttest.RSAJWK("k", 2048, "AAEAAQ"), false},
		{"RSA even modulus", func() jose.JWK {
			j := agenttest.RSAJWK("k", 2048, "AQAB")
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
