package jose

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// What a token's checks found, in words for the agent's developer (the
// reasons of internal/explain): which claim, what it holds, and what the
// website expected. Never a token or a key.

// stamp is a NumericDate as the words show it.
func stamp(d *jwt.NumericDate) string {
	if d == nil {
		return "(none)"
	}
	return fmt.Sprintf("%d (%s)", d.Unix(), d.UTC().Format(time.RFC3339))
}

// ClaimsWords says what a jwt.Validator's error err found in claims c,
// checked at now; aud is the audience the website expected ("" for
// none). ok is false for an error it has no better words for.
func ClaimsWords(err error, c jwt.Claims, now time.Time, aud string) (words string, ok bool) {
	clock := fmt.Sprintf("the website's clock says %d (%s), with %v leeway", now.Unix(), now.UTC().Format(time.RFC3339), Leeway)
	switch {
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && strings.Contains(err.Error(), "exp"):
		return "exp is missing: every token here expires", true
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := c.GetExpirationTime()
		return fmt.Sprintf("exp %s has passed: %s; sign a new one, or bring the clocks in sync", stamp(exp), clock), true
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		iat, _ := c.GetIssuedAt()
		return fmt.Sprintf("iat %s is in the future: %s; are the agent's and the website's clocks in sync?", stamp(iat), clock), true
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		nbf, _ := c.GetNotBefore()
		return fmt.Sprintf("nbf %s is in the future: %s", stamp(nbf), clock), true
	case errors.Is(err, jwt.ErrTokenInvalidAudience) && aud != "":
		got, _ := c.GetAudience()
		return AudienceWords(got, aud), true
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		iss, _ := c.GetIssuer()
		return fmt.Sprintf("iss %q is not this website's issuer", iss), true
	}
	return "", false
}

// AudienceWords says how a token's aud differs from want: the website's
// origin (a Session JWT), or its join's URL (a browser join assertion).
func AudienceWords(got []string, want string) string {
	switch len(got) {
	case 0:
		return fmt.Sprintf("aud is missing: it must be %q", want)
	case 1:
	default:
		return fmt.Sprintf("aud lists %d values: it must be the one string %q", len(got), want)
	}
	g := got[0]
	if g == want {
		return fmt.Sprintf("aud is %q as it must be", want)
	}
	gu, gerr := url.Parse(g)
	wu, werr := url.Parse(want)
	if gerr != nil || werr != nil || gu.Host == "" {
		return fmt.Sprintf("aud %q is not %q", g, want)
	}
	wantOrigin := wu.Path == "" || wu.Path == "/"
	switch {
	case !strings.EqualFold(gu.Scheme, wu.Scheme):
		return fmt.Sprintf("aud %q has the scheme %s; it must be %q (%s)", g, gu.Scheme, want, wu.Scheme)
	case !strings.EqualFold(gu.Hostname(), wu.Hostname()):
		return fmt.Sprintf("aud %q names the host %s, and this website is %s: it must be %q (localhost, 127.0.0.1 and [::1] are different origins)", g, gu.Hostname(), wu.Hostname(), want)
	case gu.Port() != wu.Port():
		return fmt.Sprintf("aud %q names the port %q; it must be %q", g, gu.Port(), want)
	case wantOrigin && strings.Trim(gu.Path, "/") != "":
		return fmt.Sprintf("aud %q has a path: a Session JWT's aud is the website's origin alone, %q (the join's URL is the aud of a join assertion only)", g, want)
	case wantOrigin:
		return fmt.Sprintf("aud %q has a trailing slash: it must be the origin exactly, %q", g, want)
	case gu.Path == "" || gu.Path == "/":
		return fmt.Sprintf("aud %q is the website's origin: a join assertion's aud is the join's URL, %q (its web.browser_session_endpoint)", g, want)
	}
	return fmt.Sprintf("aud %q is not %q", g, want)
}
