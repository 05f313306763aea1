package siteverify

import (
	"fmt"

	"github.com/opsgate/opsgate/webkit/identity"
)

// Every error of this package wraps exactly one of identity.ErrInvalid
// (answer 401 invalid_session) and identity.ErrUnavailable (answer 503 with
// Retry-After), with a message that never contains a token or a key.

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{identity.ErrInvalid}, args...)...)
}

// errMalformedAuthorization: an Authorization header that is not exactly
// one "Bearer <token68>" (RFC 6750 §2.1).
var errMalformedAuthorization = fmt.Errorf("%w: malformed Authorization header", identity.ErrInvalid)
