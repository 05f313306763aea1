package jose

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"
)

// TestKeyFits: a key is used only when kid and alg both match; without a
// JWK alg, the key type must name the alg exactly (RSA never does).
func TestKeyFits(t *testing.T) {
	t.Parallel()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	tests := []struct {
		name    string
		key     any
		jwkAlg  string
		jwsAlg  string
		fits    bool
		parseOK bool
	}{
		{"P-256 no alg ES256", p256.Public(), "", "ES256", true, true},
		{"P-256 no alg ES384", p256.Public(), "", "ES384", false, true},
		{"P-256 alg ES256", p256.Public(), "ES256", "ES256", true, true},
		{"P-256 alg ES384 (lying)", p256.Public(), "ES384", "ES384", false, true},
		{"P-384 no alg ES384", p384.Public(), "", "ES384", true, true},
		{"Ed25519 no alg EdDSA", ed, "", "EdDSA", true, true},
		{"Ed25519 EdDSA as ES256", ed, "", "ES256", false, true},
		{"RSA no alg RS256", rk.Public(), "", "RS256", false, true},
		{"RSA alg RS256", rk.Public(), "RS256", "RS256", true, true},
		{"RSA alg RS256 as PS256", rk.Public(), "RS256", "PS256", false, true},
		{"RSA alg PS256", rk.Public(), "PS256", "PS256", true, true},
		{"P-256 alg HS256", p256.Public(), "HS256", "HS256", false, false},
		{"P-256 alg none", p256.Public(), "none", "none", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := NewJWK(tt.key, "k1", tt.jwkAlg)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(j)
			pk, err := ParseJWK(raw)
			if (err == nil) != tt.parseOK {
				t.Fatalf("ParseJWK: %v, want ok %v", err, tt.parseOK)
			}
			if err == nil && pk.Fits(tt.jwsAlg) != tt.fits {
				t.Errorf("Fits(%s) = %v, want %v", tt.jwsAlg, !tt.fits, tt.fits)
			}
		})
	}
}

func TestParseJWKRefuses(t *testing.T) {
	t.Parallel()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good, _ := NewJWK(p256.Public(), "k", "ES256")
	for _, tt := range []struct {
		name string
		mod  func(j *JWK)
	}{
		{"private key", func(j *JWK) { j.D = "AAAA" }},
		{"use enc", func(j *JWK) { j.Use = "enc" }},
		{"key_ops without verify", func(j *JWK) { j.KeyOps = []string{"encrypt"} }},
		{"point not on the curve", func(j *JWK) { j.Y = j.X }},
		{"short x", func(j *JWK) { j.X = j.X[:10] }},
		{"curve P-521", func(j *JWK) { j.Crv = "P-521" }},
		{"kty oct", func(j *JWK) { j.Kty = "oct" }},
		{"small RSA", func(j *JWK) {
			*j = JWK{Kty: "RSA", Alg: "RS256", N: B64.EncodeToString(make([]byte, 128)), E: "AQAB"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := good
			tt.mod(&j)
			if _, err := j.PublicKey(); err == nil {
				t.Error("accepted")
			}
		})
	}
}
