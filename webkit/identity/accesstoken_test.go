package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
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
		{"typ application/at+jwt with azp", forge(t, "ES256", ec, map[string]any{"typ": "application/at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "client_id"); c["azp"] = agent })), true},
		{"typ JWT", forge(t, "ES256", ec, map[string]any{"typ": "JWT", "kid": "ec"}, claims(nil)), false},
		{"another issuer", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), false},
		{"expired", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() })), false},
		{"no sub", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "sub") })), false},
		{"no client_id nor azp", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { delete(c, "client_id") })), false},
		{"client_id and azp differ", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(func(c jwt.MapClaims) { c["azp"] = "https://x.example/a" })), false},
		{"unknown kid", forge(t, "ES256", ec, map[string]any{"typ": "at+jwt", "kid": "nope"}, claims(nil)), false},
		{"signed by another key", forge(t, "ES256", other, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(nil)), false},
		{"HS256 with the kid of an RSA key", forge(t, "HS256", []byte("secret"), map[string]any{"typ": "at+jwt", "kid": "rsa"}, claims(nil)), false},
		{"signature's last character changed in bits base64 leaves unused", unusedBitChanged(t, issued(ec, "ec")), false},
		{"EdDSA alg with the EC key's kid", forge(t, "EdDSA", ed, map[string]any{"typ": "at+jwt", "kid": "ec"}, claims(nil)), false},
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

func TestCheckAccessToken(t *testing.T) {
	t.Parallel()
	s := Caller{ClientID: "https://agent.example/agent"}
	if err := CheckAccessToken(s, AccessToken{ClientID: s.ClientID, Account: "a"}); err != nil {
		t.Errorf("same agent: %v", err)
	}
	for _, id := range []string{"", "https://other.example/agent"} {
		if err := CheckAccessToken(s, AccessToken{ClientID: id}); !errors.Is(err, ErrInvalid) {
			t.Errorf("client_id %q: err = %v, want ErrInvalid", id, err)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string
		ok     bool
	}{
		{"none", nil, "", true},
		{"bearer", []string{"Bearer abc.DEF-_~+/=="}, "abc.DEF-_~+/==", true},
		{"scheme case-insensitive", []string{"bearer abc"}, "abc", true},
		{"two headers", []string{"Bearer abc", "Bearer def"}, "", false},
		{"token with other credentials", []string{"Bearer abc, Basic dXNlcjpwdw=="}, "", false},
		{"two tokens", []string{"Bearer abc def"}, "", false},
		{"Basic", []string{"Basic dXNlcjpwdw=="}, "", false},
		{"DPoP", []string{"DPoP abc"}, "", false},
		{"empty token", []string{"Bearer "}, "", false},
		{"no token", []string{"Bearer"}, "", false},
		{"two spaces", []string{"Bearer  abc"}, "", false},
		{"padding inside", []string{"Bearer ab=c"}, "", false},
		{"non-ASCII", []string{"Bearer abç"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Authorization", v)
			}
			got, err := ParseAuthorization(h)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("ParseAuthorization(%q) = %q, %v", tt.values, got, err)
			}
			if err != nil && !errors.Is(err, errMalformedAuthorization) {
				t.Errorf("err = %v, want errMalformedAuthorization", err)
			}
		})
	}
}
