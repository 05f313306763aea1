// Package storekit holds what the stores and the kit share and no website
// calls: IDs, refs, slots, single-use keys, canonical terms, and the
// markers a store implements so that the kit can call it directly.
package storekit

import (
	"context"
	"errors"
	"time"
)

// InProcess is implemented by a store whose calls never wait on I/O and
// return at once when their context is done, such as store.NewMemory's. A caller
// that bounds every call with a deadline (the kit's StoreTimeout) calls
// such a store directly, without a goroutine to abandon a stalled call.
type InProcess interface {
	InProcess() bool
}

// ContextBound is implemented by a store whose calls wait on I/O but
// return by their context's deadline (give or take the scheduler), such as
// a Redis store whose client has ContextTimeoutEnabled. The kit then
// calls it directly too: the deadline it sets bounds a stalled call
// without a goroutine to abandon it, which would add two goroutine
// hand-offs to every store call. BoundByContext may answer false (a
// client that doesn't apply deadlines to its I/O): the kit then runs each
// call in a goroutine it can abandon at the deadline. A store that wraps
// another (to trace or count its calls) should pass on its InProcess and
// BoundByContext, as storewrap.Observe does.
type ContextBound interface {
	BoundByContext() bool
}

// OnceKey returns the single-use key for id (such as a JWT's jti) of a
// request sent for an agent and User, for UseOnce and
// RecordOptions.Once alike: a key marked by one is used up for the other.
// It lives with the owner's records (on Redis, in their Cluster slot), so
// that Record can use it up in the same step.
func OnceKey(agent, user, id string) string {
	return "{" + Slot(agent, user) + "}" + id
}

func SplitOnceKey(key string) (slot, id string, ok bool) {
	if len(key) < 2 || key[0] != '{' {
		return "", "", false
	}
	for i := 1; i < len(key); i++ {
		if key[i] == '}' {
			return key[1:i], key[i+1:], true
		}
	}
	return "", "", false
}

// ClaimTokenTTL is how long a store remembers a claim token (to answer a
// repeated Take, or to refuse one after Release). A Release later than this
// after its Take is too late, and the operation is left for Resolve.
const ClaimTokenTTL = 10 * time.Minute

// The caps that bound what one agent can make a store hold (webkit/RULES.md
// "Bounded work"), and the defaults of the stores' caps of open operations
// and of their retention (§7 W137).
const (
	MaxRevisionsPerOperation = 32
	MaxApprovalsPerOperation = 16
	DefaultMaxOpenPerOwner   = 100
	DefaultMaxOpenPerAgent   = 10000
	// DefaultMaxOpen and DefaultMaxReplayMarkers are the overall caps, of
	// open operations and of single-use markers (a JWT's jti), across every
	// agent: about 100 MB (with their audit logs) and 136 MB of Redis when
	// full (webkit/DEPLOYING.md).
	DefaultMaxOpen          = 100_000
	DefaultMaxReplayMarkers = 1_000_000
	DefaultRetention        = 24 * time.Hour
)

// MemoryConfig is what a test may set on a store of store.NewMemory: its
// retention (zero: DefaultRetention), its caps of open operations (zero:
// the defaults; negative: none). Like redisstore, it computes waiting
// operations rather than store them (internal/computed).
type MemoryConfig struct {
	Retention                        time.Duration
	MaxOpenPerOwner, MaxOpenPerAgent int
	// AuditRetention is how long an operation's audit entries are kept
	// after its latest (zero: DefaultAuditRetention).
	AuditRetention            time.Duration
	MaxOpen, MaxReplayMarkers int
}

// ErrOverall is wrapped, beside storedriver.ErrRateLimited, by the error of a
// step an overall cap refused (Options.MaxOpen, MaxReplayMarkers): the
// kit then reports the cap to its Observer (Reason "overall").
var ErrOverall = errors.New("an overall cap of the store is reached")

// OnceMarked is implemented by a store that can tell, without marking
// it, whether a single-use key is marked (UseOnce) and not expired at
// now: one read. The kit checks with it the marker Sessions.Unbind leaves
// for an ended join cookie, on a joined browser's requests. Both stores of
// this module implement it; for any other store, storewrap.Marked asks
// with a UseOnce whose mark has expired already, which is as correct and
// writes a key.
type OnceMarked interface {
	Marked(ctx context.Context, key string, now time.Time) (bool, error)
}

// MarkedInTake is implemented by a store whose Take checks, in its own
// atomic step, the single-use marker its context names (WithMarker): when
// that key is marked (UseOnce) and not expired at the Take's now, Take
// does nothing and returns an error that wraps ErrMarked. The kit names
// with it the marker Sessions.Unbind leaves for an ended join cookie, so
// that a joined browser's gated request costs one store step, not two.
// The key must be a OnceKey of the Take's owner (on Redis, in its Cluster
// slot). A store that wraps another passes on its MarkedInTake, as
// storewrap's do; for any other store, the kit checks with OnceMarked
// first.
type MarkedInTake interface {
	MarkedInTake() bool
}

// ErrMarked is wrapped by the error of a Take that found the marker its
// context names (MarkedInTake).
var ErrMarked = errors.New("the marker the Take was to check is set")

// MarkerKey is the context key of the marker a Take checks
// (WithMarker); its value is a *string.
type MarkerKey struct{}

// markerContext is ctx naming a marker, in one allocation.
type markerContext struct {
	context.Context
	key string
}

func (c *markerContext) Value(key any) any {
	if key == (MarkerKey{}) {
		return &c.key
	}
	return c.Context.Value(key)
}

// WithMarker returns ctx naming key as the marker a Take checks first
// (MarkedInTake).
func WithMarker(ctx context.Context, key string) context.Context {
	return &markerContext{ctx, key}
}

// MarkerOf returns the marker ctx names (WithMarker), or "".
func MarkerOf(ctx context.Context) string {
	if k, ok := ctx.Value(MarkerKey{}).(*string); ok {
		return *k
	}
	return ""
}
