package jose

import (
	"crypto"
	"crypto/sha256"

	"github.com/golang-jwt/jwt/v5"
)

// The JOSE typ of each token (webkit/RULES.md choices 1 and 3).
const (
	TypSession    = "poppy-session+jwt"
	TypDelegation = "poppy-dlg+jwt"
	TypBrowser    = "poppy-browser+jwt"
)

// ATH is the ath claim for an access token: base64url, no padding, of the
// SHA-256 of its ASCII bytes (as in DPoP, RFC 9449 §4.2).
func ATH(accessToken string) string {
	sum := sha256.Sum256([]byte(accessToken))
	return B64.EncodeToString(sum[:])
}

// Sign signs claims with key under alg, with the header members given.
func Sign(alg string, key crypto.Signer, header map[string]any, claims jwt.Claims) (string, error) {
	t := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims)
	for k, v := range header {
		t.Header[k] = v
	}
	return t.SignedString(key)
}
