package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
)

func TestJWTAccessTokens(t *testing.T) {
	t.Parallel()
	const issuer = "https://shop.example"
	const agent = "https://agent.example/agent"
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	at := &JWTAccessTokens{Issuer: issuer, Keys: map[string]crypto.PublicKey{"ec": ec.Public(), "ed": ed.Public(), "rsa": rk.Public()}}
	now := time.Now()
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": issuer, "sub": "acct_1", "client_id": agent, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	issued := func(key any, kid string) string {
		s, err := agentside.IssueAccessToken(key.(crypto.Signer), kid, issuer, agent, "acct_1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"ES256 from IssueAccessToken", issued(ec, "ec"), true},
		{"EdDSA from IssueAccessToken", issued(ed, "ed"), true},
		{"RS256 from IssueAccessToken", issued(rk, "rsa"), true},
		{"typ application/at+jwt with azp", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "application/at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "client_id"); c["azp"] = agent })), true},
		{"typ JWT", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "JWT", "kid": "ec"}, claims(nil)), false},
		{"another issuer", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), false},
		{"expired", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() })), false},
		{"no sub", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "sub") })), false},
		{"no client_id nor azp", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "client_id") })), false},
		{"client_id and azp differ", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["azp"] = "https://x.example/a" })), false},
		{"unknown kid", agenttest.Forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "nope"}, claims(nil)), false},
		{"signed by another key", agenttest.Forge(t, "ES256", other, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(nil)), false},
		{"HS256 with the kid of an RSA key", agenttest.Forge(t, "HS256", []byte("secret"), map[string]any{"typ": "at+jwt", "kid": "rsa"}, claims(nil)), false},
		{"signature's last character changed in bits base64 leaves unused", agenttest.UnusedBitChanged(t, issued(ec, "ec")), false},
		{"EdDSA alg with the EC key's kid", agenttest.Forge(t, "EdDSA", ed, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(nil)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := at.VerifyAccessToken(t.Context(), tt.token)
			if tt.ok {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if got.ClientID != agent || got.Account != "acct_1" || got.Expiry.IsZero() {
					t.Errorf("got %+v", got)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}
