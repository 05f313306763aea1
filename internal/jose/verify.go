package jose

import (
	"net/url"
	"strings"
	"time"
)

// What the website's two verifying packages share: webkit/identity (the
// agent's keys, access tokens) and internal/siteverify (Session JWTs and
// browser join assertions, webkit/RULES.md choices 1–3).
const (
	// Leeway is the clock leeway for every time claim: of a Session JWT, a
	// delegation, a browser assertion and an access token.
	Leeway = 30 * time.Second
	// MaxTokenBytes bounds a token before it is decoded.
	MaxTokenBytes = 16 << 10
	// MaxURLLength bounds a URL an agent names: client_id, jwks_uri,
	// return_to.
	MaxURLLength = 2048
)

// SameHost reports whether a and b have the same host (compared
// case-insensitively) and the same port, 443 or 80 when none is given.
func SameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && effectivePort(a) == effectivePort(b)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}
