package siteverify

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/opsgate/opsgate/webkit/identity"
)

// CheckAccessToken requires the access token to have been issued to the
// Caller's agent (webkit/RULES.md "Agent identity": client_id or azp equals
// the agent's client_id), so one agent cannot use another's token.
func CheckAccessToken(c Caller, at identity.AccessToken) error {
	if at.ClientID == "" || at.ClientID != c.ClientID {
		return invalid("access token was issued to %q, not to the Session's agent %q", at.ClientID, c.ClientID)
	}
	return nil
}

// ParseAuthorization returns the Bearer token of h's Authorization header,
// or "" with no error when there is none (a signed-out request). It refuses
// more than one Authorization header, another scheme, and a value that
// holds anything besides one token68 (RFC 6750 §2.1), such as a token
// combined with other credentials (webkit/RULES.md "Hardening"). Errors wrap
// ErrInvalid.
func ParseAuthorization(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%w: %d Authorization headers", errMalformedAuthorization, len(values))
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: scheme is not Bearer", errMalformedAuthorization)
	}
	if !isToken68(token) {
		return "", fmt.Errorf("%w: not one token68", errMalformedAuthorization)
	}
	return token, nil
}

// isToken68: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/') {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
