package explain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/webkit/identity"
)

// A reason is the error's message with each Because's words in place of
// its error's, whatever wraps it, and without the kit's sentinels; the
// error itself keeps its message and its errors.Is.
func TestReason(t *testing.T) {
	t.Parallel()
	inner := fmt.Errorf("%w: aud is not exactly %q", identity.ErrInvalid, "https://shop.example")
	b := explain.Because(inner, `aud "https://shop.example/" has a trailing slash`)
	if b.Error() != inner.Error() || !errors.Is(b, identity.ErrInvalid) {
		t.Fatalf("Because changed the error: %v", b)
	}
	wrapped := fmt.Errorf("%w: %w", opsendpoint.ErrUnauthenticated, fmt.Errorf("session JWT: %w", b))
	if got, want := explain.Reason(wrapped), `session JWT: aud "https://shop.example/" has a trailing slash`; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	plain := fmt.Errorf("session JWT: %w", fmt.Errorf("%w: jti is missing", identity.ErrInvalid))
	if got := explain.Reason(plain); got != "session JWT: jti is missing" {
		t.Errorf("Reason of an error without words = %q", got)
	}
	if explain.Reason(nil) != "" || explain.Because(nil, "x") != nil {
		t.Error("nil")
	}
	long := explain.Reason(errors.New(strings.Repeat("é", explain.MaxReason)))
	if len(long) > explain.MaxReason || !strings.HasSuffix(long, "…") {
		t.Errorf("a long reason is %d bytes", len(long))
	}
}

// The sentinels a reason leaves out are the kit's sentinel errors'
// messages, as they are now.
func TestSentinelsAreTheErrors(t *testing.T) {
	t.Parallel()
	for _, err := range []error{identity.ErrInvalid, identity.ErrUnavailable, opsendpoint.ErrUnauthenticated, opsendpoint.ErrInvalidToken, opsendpoint.ErrUnavailable} {
		if got := explain.Reason(fmt.Errorf("%w: the words", err)); got != "the words" {
			t.Errorf("Reason keeps the sentinel %q: %q", err, got)
		}
	}
}

// A ref the Gate issued is remembered with digests of its owner, so that
// the endpoint can tell another agent's or User's ref.
func TestIssued(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Minute)
	explain.Issued("op_1.rev.issued-test", "https://a.example/agent", "usr_1", "", exp)
	i, ok := explain.IssuedRef("op_1.rev.issued-test")
	if !ok || !i.Expires.Equal(exp) {
		t.Fatalf("IssuedRef = %+v, %v", i, ok)
	}
	if a, u, c := i.Owner("https://a.example/agent", "usr_1", ""); !a || !u || !c {
		t.Error("the owner is not the same")
	}
	if a, u, _ := i.Owner("https://a.example/agent", "usr_2", ""); !a || u {
		t.Error("another User is not told")
	}
	if a, _, _ := i.Owner("https://b.example/agent", "usr_1", ""); a {
		t.Error("another agent is not told")
	}
	if _, ok := explain.IssuedRef("op_1.rev.never"); ok {
		t.Error("a ref never issued is known")
	}
}
