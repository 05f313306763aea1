package jose

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Each way an aud can miss the website's says how: the three a developer
// meets most (a trailing slash, a path, localhost for 127.0.0.1), a list,
// another scheme or port, and the origin where the join's URL belongs.
func TestAudienceWords(t *testing.T) {
	t.Parallel()
	const origin, join = "http://localhost:8080", "http://localhost:8080/poppy/join"
	for _, tc := range []struct {
		got  []string
		want string
		says string
	}{
		{nil, origin, "aud is missing"},
		{[]string{origin, "https://other.example"}, origin, "lists 2 values"},
		{[]string{origin + "/"}, origin, "has a trailing slash"},
		{[]string{join}, origin, "has a path: a Session JWT's aud is the website's origin alone"},
		{[]string{"http://127.0.0.1:8080"}, origin, "names the host 127.0.0.1, and this website is localhost"},
		{[]string{"https://localhost:8080"}, origin, "has the scheme https"},
		{[]string{"http://localhost:9090"}, origin, `names the port "9090"`},
		{[]string{origin}, join, "is the website's origin: a join assertion's aud is the join's URL"},
	} {
		if w := AudienceWords(tc.got, tc.want); !strings.Contains(w, tc.says) {
			t.Errorf("AudienceWords(%q, %q) = %q, want it to say %q", tc.got, tc.want, w, tc.says)
		}
	}
}

// A time claim's failure names the claim, its value and the website's
// clock.
func TestClaimsWords(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	past := jwt.NewNumericDate(now.Add(-time.Hour))
	for _, tc := range []struct {
		err  error
		c    jwt.RegisteredClaims
		says string
	}{
		{jwt.ErrTokenExpired, jwt.RegisteredClaims{ExpiresAt: past}, fmt.Sprintf("exp %d", past.Unix())},
		{jwt.ErrTokenUsedBeforeIssued, jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(now.Add(time.Hour))}, "iat 1800003600"},
		{jwt.ErrTokenNotValidYet, jwt.RegisteredClaims{NotBefore: jwt.NewNumericDate(now.Add(time.Hour))}, "nbf 1800003600"},
	} {
		w, ok := ClaimsWords(fmt.Errorf("token has invalid claims: %w", tc.err), tc.c, now, "")
		if !ok || !strings.Contains(w, tc.says) || !strings.Contains(w, "the website's clock says 1800000000") {
			t.Errorf("ClaimsWords(%v) = %q, %v", tc.err, w, ok)
		}
	}
	if _, ok := ClaimsWords(jwt.ErrTokenMalformed, jwt.RegisteredClaims{}, now, ""); ok {
		t.Error("words for an error it has none for")
	}
}
