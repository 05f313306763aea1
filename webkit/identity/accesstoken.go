package identity

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/jose"
)

// AccessTokens verifies the access tokens a Personal Agent sends in
// Authorization (webkit/RULES.md choice 2). The website may plug in its identity
// provider's verifier (introspection, opaque tokens); JWTAccessTokens is the
// default.
type AccessTokens interface {
	// VerifyAccessToken returns what token grants. Errors wrap ErrInvalid
	// or ErrUnavailable.
	VerifyAccessToken(ctx context.Context, token string) (AccessToken, error)
}

// AccessToken is a verified access token.
type AccessToken struct {
	ClientID string    // the agent it was issued to (client_id, or azp)
	Account  string    // the User's account at the Company (sub)
	Expiry   time.Time // exp
}

// JWTAccessTokens verifies RFC 9068 JWT access tokens from one issuer.
type JWTAccessTokens struct {
	// Issuer is the required iss.
	Issuer string
	// Audience, when set, must be one of the token's aud values.
	Audience string
	// Keys are the issuer's verification keys by kid. A key verifies only
	// an alg that fits its type (ES256 for P-256, ES384 for P-384, EdDSA for
	// Ed25519, RS256 or PS256 for RSA).
	Keys map[string]crypto.PublicKey
	// KeyFunc, when set, is used instead of Keys, such as to fetch the
	// issuer's JWKS.
	KeyFunc func(ctx context.Context, kid, alg string) (crypto.PublicKey, error)
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
}

type accessClaims struct {
	jwt.RegisteredClaims
	ClientID string `json:"client_id"`
	AZP      string `json:"azp"`
}

// VerifyAccessToken verifies token as an RFC 9068 access token: typ at+jwt,
// an allowed asymmetric alg, iss, exp, sub, and client_id or azp.
func (a *JWTAccessTokens) VerifyAccessToken(ctx context.Context, token string) (AccessToken, error) {
	if a.Issuer == "" {
		return AccessToken{}, fmt.Errorf("identity: JWTAccessTokens.Issuer is not set")
	}
	if len(token) > jose.MaxTokenBytes {
		return AccessToken{}, invalid("access token: longer than %d bytes", jose.MaxTokenBytes)
	}
	now := time.Now()
	if a.Clock != nil {
		now = a.Clock()
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(jose.SigningAlgs),
		jwt.WithStrictDecoding(),
		jwt.WithLeeway(jose.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(a.Issuer),
	}
	if a.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.Audience))
	}
	var c accessClaims
	var keyErr error
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		typ, _ := t.Header["typ"].(string)
		if typ = strings.ToLower(typ); typ != "at+jwt" && typ != "application/at+jwt" {
			keyErr = invalid("access token: JOSE header typ %q is not at+jwt", typ)
			return nil, keyErr
		}
		kid, _ := t.Header["kid"].(string)
		alg := t.Method.Alg()
		var key crypto.PublicKey
		if a.KeyFunc != nil {
			k, err := a.KeyFunc(ctx, kid, alg)
			if err != nil {
				keyErr = fmt.Errorf("access token: key %q: %w", kid, err)
				return nil, keyErr
			}
			key = k
		} else {
			key = a.Keys[kid]
		}
		// The key's type must fit the alg: the token alone never decides.
		if key == nil || !jose.KeyFits(key, alg) {
			keyErr = explain.Because(invalid("access token: no key %q for alg %q", kid, alg),
				fmt.Sprintf("access token: the website has no key %q for alg %q: is it this website's token (from its authorization server)?", kid, alg))
			return nil, keyErr
		}
		return key, nil
	})
	if keyErr != nil {
		return AccessToken{}, keyErr
	}
	if err != nil {
		words, ok := jose.ClaimsWords(err, &c, now, a.Audience)
		if !ok && errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			words, ok = "its signature does not verify with the website's key of its kid: is it this website's token?", true
		}
		err := invalid("access token: %v", err)
		if ok {
			return AccessToken{}, explain.Because(err, "access token: "+words)
		}
		return AccessToken{}, err
	}
	if c.Subject == "" {
		return AccessToken{}, invalid("access token: sub is missing")
	}
	clientID := c.ClientID
	switch {
	case clientID == "":
		clientID = c.AZP
	case c.AZP != "" && c.AZP != clientID:
		return AccessToken{}, invalid("access token: client_id and azp differ")
	}
	if clientID == "" {
		return AccessToken{}, invalid("access token: client_id is missing")
	}
	return AccessToken{ClientID: clientID, Account: c.Subject, Expiry: c.ExpiresAt.Time}, nil
}
