package identity

import (
	"errors"
	"fmt"
)

// The two ways a verification fails. Every error this package and the
// kit's Session verifier return wraps exactly one of them (compare with
// errors.Is), with a message that names the claim, header or document at
// fault. Messages never contain a token or a key.
var (
	// ErrInvalid: the token, the delegation, the agent's metadata document
	// or its key set is wrong. The caller answers 401 invalid_session
	// (webkit/RULES.md choice 5).
	ErrInvalid = errors.New("identity: invalid")

	// ErrUnavailable: the agent's keys (or the replay store) could not be
	// reached: network error, timeout, 5xx, 429. The caller answers 503 with
	// Retry-After, never 401, because the agent did nothing wrong.
	ErrUnavailable = errors.New("identity: unavailable")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnavailable}, args...)...)
}
