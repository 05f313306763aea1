// Package jose holds the JOSE pieces both sides of webkit/RULES.md choice 1
// use: the JWK subset, the allow-list of signing algorithms, the typ of each
// token, the ath claim and signing. webkit/identity verifies with them; the
// agent's side (internal/agentside) signs with them.
package jose

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
)

// JWK is the subset of an RFC 7517 JSON Web Key this package reads and
// writes: public signature keys of type EC (P-256, P-384), OKP (Ed25519) and
// RSA.
type JWK struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid,omitempty"`
	Alg    string   `json:"alg,omitempty"`
	Use    string   `json:"use,omitempty"`
	KeyOps []string `json:"key_ops,omitempty"`
	Crv    string   `json:"crv,omitempty"`
	X      string   `json:"x,omitempty"`
	Y      string   `json:"y,omitempty"`
	N      string   `json:"n,omitempty"`
	E      string   `json:"e,omitempty"`
	// D and the RSA private members are read only to refuse them: a key set
	// or a cnf.jwk that publishes a private key is never used.
	D string `json:"d,omitempty"`
	P string `json:"p,omitempty"`
}

// PublicKey is a parsed JWK: its key ID, the algorithm it may verify, and
// the key itself.
type PublicKey struct {
	Kid string
	// Alg is the JWK's alg, or "" when it has none. Fits reports which JWS
	// algorithms the key may verify.
	Alg string
	Key crypto.PublicKey
}

// SigningAlgs is the allow-list of webkit/RULES.md choice 1: asymmetric only,
// never none, never HMAC.
var SigningAlgs = []string{"ES256", "ES384", "EdDSA", "PS256", "RS256"}

// The RSA keys accepted: a modulus of 2048 bits (RFC 7518 §3.3) to 4096
// bits, and the public exponent 65537. The upper bound and the fixed
// exponent bound the CPU an RSA signature check costs: the verifier checks
// any signature a request carries, and a 65,536-bit modulus with a large
// exponent made one junk request cost most of a second.
const (
	minRSABits  = 2048
	maxRSABits  = 4096
	rsaExponent = 65537
)

// MaxJWKBytes bounds one JWK before it is parsed: a 4096-bit modulus is 683
// base64url characters, so nothing usable is larger.
const MaxJWKBytes = 4096

// Fits reports whether k may verify a JWS with alg. The choice (webkit/RULES.md
// choice 1, "kid and alg both matching"): when the JWK has an alg it must
// equal the JWS alg; when it has none, the key type must determine the alg
// exactly: EC P-256 → ES256, EC P-384 → ES384, OKP Ed25519 → EdDSA. An RSA key
// without alg fits nothing, because RS256 and PS256 would both fit it.
func (k PublicKey) Fits(alg string) bool {
	if k.Alg != "" {
		return k.Alg == alg && KeyFits(k.Key, alg)
	}
	if _, ok := k.Key.(*rsa.PublicKey); ok {
		return false
	}
	return KeyFits(k.Key, alg)
}

// KeyFits reports whether key's type can verify alg, from the allow-list.
func KeyFits(key crypto.PublicKey, alg string) bool {
	switch key := key.(type) {
	case *ecdsa.PublicKey:
		switch key.Curve {
		case elliptic.P256():
			return alg == "ES256"
		case elliptic.P384():
			return alg == "ES384"
		}
	case ed25519.PublicKey:
		return alg == "EdDSA" && len(key) == ed25519.PublicKeySize
	case *rsa.PublicKey:
		return (alg == "RS256" || alg == "PS256") && rsaSizeOK(key)
	}
	return false
}

// rsaSizeOK reports whether key is one this package verifies with: see
// minRSABits. It is checked again here, for keys that did not come from a
// JWK.
func rsaSizeOK(key *rsa.PublicKey) bool {
	if key.N == nil {
		return false
	}
	bits := key.N.BitLen()
	return bits >= minRSABits && bits <= maxRSABits && key.E == rsaExponent
}

// B64 decodes JWT segments and JWK members strictly: bits base64 leaves
// unused in a last character must be zero (RFC 4648 §3.5), so a token's
// signature is written one way only, as jwt.WithStrictDecoding has it.
var B64 = base64.RawURLEncoding.Strict()

// ParseJWK parses one public JWK. It refuses private keys, unknown key types
// and curves, and keys whose use or key_ops exclude verifying.
func ParseJWK(raw []byte) (PublicKey, error) {
	if len(raw) > MaxJWKBytes {
		return PublicKey{}, fmt.Errorf("JWK: longer than %d bytes", MaxJWKBytes)
	}
	var j JWK
	if err := json.Unmarshal(raw, &j); err != nil {
		return PublicKey{}, fmt.Errorf("JWK: %v", err)
	}
	return j.PublicKey()
}

// PublicKey parses j (see ParseJWK).
func (j *JWK) PublicKey() (PublicKey, error) {
	if j.D != "" || j.P != "" {
		return PublicKey{}, fmt.Errorf("JWK kid %q: has private key members", j.Kid)
	}
	if j.Use != "" && j.Use != "sig" {
		return PublicKey{}, fmt.Errorf("JWK kid %q: use %q is not sig", j.Kid, j.Use)
	}
	if j.KeyOps != nil && !slices.Contains(j.KeyOps, "verify") {
		return PublicKey{}, fmt.Errorf("JWK kid %q: key_ops lacks verify", j.Kid)
	}
	if j.Alg != "" && !slices.Contains(SigningAlgs, j.Alg) {
		return PublicKey{}, fmt.Errorf("JWK kid %q: alg %q is not allowed", j.Kid, j.Alg)
	}
	pk := PublicKey{Kid: j.Kid, Alg: j.Alg}
	switch j.Kty {
	case "EC":
		var curve elliptic.Curve
		var size int
		switch j.Crv {
		case "P-256":
			curve, size = elliptic.P256(), 32
		case "P-384":
			curve, size = elliptic.P384(), 48
		default:
			return PublicKey{}, fmt.Errorf("JWK kid %q: EC curve %q is not supported", j.Kid, j.Crv)
		}
		x, errX := B64.DecodeString(j.X)
		y, errY := B64.DecodeString(j.Y)
		if errX != nil || errY != nil || len(x) != size || len(y) != size {
			return PublicKey{}, fmt.Errorf("JWK kid %q: EC x or y is malformed", j.Kid)
		}
		point := make([]byte, 0, 1+2*size)
		point = append(append(append(point, 4), x...), y...)
		// ParseUncompressedPublicKey checks that the point is on the curve.
		key, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return PublicKey{}, fmt.Errorf("JWK kid %q: EC point: %v", j.Kid, err)
		}
		pk.Key = key
	case "OKP":
		if j.Crv != "Ed25519" {
			return PublicKey{}, fmt.Errorf("JWK kid %q: OKP curve %q is not supported", j.Kid, j.Crv)
		}
		x, err := B64.DecodeString(j.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return PublicKey{}, fmt.Errorf("JWK kid %q: OKP x is malformed", j.Kid)
		}
		pk.Key = ed25519.PublicKey(x)
	case "RSA":
		// The sizes are checked on the encoded text first, so that an
		// oversized modulus is refused before it is decoded or used.
		if len(j.N) > B64.EncodedLen(maxRSABits/8) || len(j.N) < B64.EncodedLen(minRSABits/8) {
			return PublicKey{}, fmt.Errorf("JWK kid %q: RSA modulus is not %d–%d bits", j.Kid, minRSABits, maxRSABits)
		}
		if j.E != "AQAB" { // 65537, the only exponent accepted (see maxRSABits)
			return PublicKey{}, fmt.Errorf("JWK kid %q: RSA exponent is not 65537", j.Kid)
		}
		n, err := B64.DecodeString(j.N)
		if err != nil || len(n) == 0 || n[0] == 0 {
			return PublicKey{}, fmt.Errorf("JWK kid %q: RSA n is malformed", j.Kid)
		}
		key := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: rsaExponent}
		if !rsaSizeOK(key) || key.N.Bit(0) == 0 {
			return PublicKey{}, fmt.Errorf("JWK kid %q: RSA modulus is not an odd number of %d–%d bits", j.Kid, minRSABits, maxRSABits)
		}
		pk.Key = key
	default:
		return PublicKey{}, fmt.Errorf("JWK kid %q: kty %q is not supported", j.Kid, j.Kty)
	}
	return pk, nil
}

// NewJWK returns the public JWK of key with kid and alg (either may be "").
func NewJWK(key crypto.PublicKey, kid, alg string) (JWK, error) {
	j := JWK{Kid: kid, Alg: alg}
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		j.Kty = "EC"
		var size int
		switch k.Curve {
		case elliptic.P256():
			j.Crv, size = "P-256", 32
		case elliptic.P384():
			j.Crv, size = "P-384", 48
		default:
			return JWK{}, fmt.Errorf("jose: EC curve %s is not supported", k.Curve.Params().Name)
		}
		point, err := k.Bytes()
		if err != nil {
			return JWK{}, fmt.Errorf("jose: EC key: %w", err)
		}
		j.X = B64.EncodeToString(point[1 : 1+size])
		j.Y = B64.EncodeToString(point[1+size:])
	case ed25519.PublicKey:
		j.Kty, j.Crv, j.X = "OKP", "Ed25519", B64.EncodeToString(k)
	case *rsa.PublicKey:
		j.Kty = "RSA"
		j.N = B64.EncodeToString(k.N.Bytes())
		j.E = B64.EncodeToString(big.NewInt(int64(k.E)).Bytes())
	default:
		return JWK{}, fmt.Errorf("jose: key type %T is not supported", key)
	}
	return j, nil
}
