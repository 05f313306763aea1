package webkit

import (
	"context"
	"fmt"
	"github.com/opsgate/opsgate/internal/storekit"
	"log/slog"
	"net/http"
	"time"

	"github.com/opsgate/opsgate/store"
)

// defaultStoreTimeout is the deadline of each store call New sets.
const defaultStoreTimeout = time.Second

// WithStoreTimeout returns s with a deadline of d on every call (0 is
// one second), so that a stalled store fails closed in bounded
// time: a gated request then performs nothing and gets 503 with
// Retry-After (RULES.md: the store being down fails closed, in bounded time).
//
// The deadline holds whatever the store's client does with a context: a
// store that returns by its context's deadline by itself
// (storekit.InProcess, storekit.ContextBound) is called directly with it; any
// other's call runs in a goroutine that is abandoned at the deadline (it
// ends when the client gives up, by its own timeouts) and answered with
// context.DeadlineExceeded. A Take cut off either way may still claim
// later; the Gate releases it (store.Store.Release, W144).
//
// Finish is not bounded by d: it runs after the handler, with its own
// longer deadline, because a lost Finish leaves the operation performing
// until it is resolved.
func WithStoreTimeout(s store.Store, d time.Duration) store.Store {
	if s == nil {
		return nil
	}
	if d <= 0 {
		d = defaultStoreTimeout
	}
	if t, ok := s.(timedStore); ok {
		s = t.s
	}
	t := timedStore{Store: s, s: s, d: d}
	// Neither a store that never waits on I/O (the memory store refuses a
	// call whose context is done) nor one that applies its context's
	// deadline to its I/O (a redisstore whose client has
	// ContextTimeoutEnabled) needs a goroutine to be abandoned at the
	// deadline: calling them directly spares every store call two
	// goroutine hand-offs (about 45 µs of an approval request's latency on
	// the machine the README measures).
	if p, ok := s.(storekit.InProcess); ok && p.InProcess() {
		t.how = inProcess
	} else if b, ok := s.(storekit.ContextBound); ok && b.BoundByContext() {
		t.how = withDeadline
	}
	return t
}

// timedStore bounds each call of s by d. It embeds the store, so that a
// method added to store.Store later still reaches it (unbounded until
// listed here).
type timedStore struct {
	store.Store
	s   store.Store
	d   time.Duration
	how callHow
}

// callHow is how timedStore bounds a call of its store.
type callHow int

const (
	inGoroutine  callHow = iota // run it in a goroutine abandoned at the deadline
	inProcess                   // call it directly: it never waits
	withDeadline                // call it directly with the deadline: it returns by it
)

// call runs f with a deadline of d, directly or in a goroutine as t.how
// says. (Each method calls an inProcess store itself: making f, a closure
// that escapes into bounded's goroutine, costs an allocation.)
func call[T any](t timedStore, ctx context.Context, name string, f func(context.Context) (T, error)) (T, error) {
	if t.how == withDeadline {
		ctx, cancel := context.WithTimeout(ctx, t.d)
		defer cancel()
		return f(ctx)
	}
	return bounded(ctx, t.d, name, f)
}

// bounded runs f with a deadline of d, and returns at the deadline even if
// f has not.
func bounded[T any](ctx context.Context, d time.Duration, name string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // f's goroutine never blocks on it
	go func() {
		defer cancel()
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		// f's goroutine cancels ctx after sending its result: when both
		// are ready, select may pick either, so the result wins here.
		select {
		case r := <-done:
			return r.v, r.err
		default:
		}
		var zero T
		return zero, fmt.Errorf("webkit: store %s: %w", name, ctx.Err())
	}
}

func (t timedStore) Take(ctx context.Context, owner store.Owner, a store.Action, now time.Time) (store.TakeResult, error) {
	if t.how == inProcess {
		return t.s.Take(ctx, owner, a, now)
	}
	return call(t, ctx, "take", func(ctx context.Context) (store.TakeResult, error) { return t.s.Take(ctx, owner, a, now) })
}

func (t timedStore) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (store.Record, bool, error) {
	if t.how == inProcess {
		return t.s.Lookup(ctx, owner, ref, now)
	}
	type found struct {
		rec store.Record
		ok  bool
	}
	f, err := call(t, ctx, "lookup", func(ctx context.Context) (found, error) {
		rec, ok, err := t.s.Lookup(ctx, owner, ref, now)
		return found{rec, ok}, err
	})
	return f.rec, f.ok, err
}

func (t timedStore) Record(ctx context.Context, owner store.Owner, ref string, a store.Approval, now time.Time, opts store.RecordOptions) (store.RecordReply, error) {
	if t.how == inProcess {
		return t.s.Record(ctx, owner, ref, a, now, opts)
	}
	return call(t, ctx, "record", func(ctx context.Context) (store.RecordReply, error) {
		return t.s.Record(ctx, owner, ref, a, now, opts)
	})
}

func (t timedStore) Release(ctx context.Context, owner store.Owner, token string, now time.Time) (bool, error) {
	if t.how == inProcess {
		return t.s.Release(ctx, owner, token, now)
	}
	return call(t, ctx, "release", func(ctx context.Context) (bool, error) { return t.s.Release(ctx, owner, token, now) })
}

func (t timedStore) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	if t.how == inProcess {
		return t.s.UseOnce(ctx, key, until, now)
	}
	return call(t, ctx, "use once", func(ctx context.Context) (bool, error) { return t.s.UseOnce(ctx, key, until, now) })
}

func (k *Kit) storeTimeout() time.Duration {
	if k.StoreTimeout > 0 {
		return k.StoreTimeout
	}
	return defaultStoreTimeout
}

// releaseDelays are when the Gate tries to release a claim it could not
// confirm: at once, then twice more, so that a store that was stalled (and
// may run the abandoned Take when it wakes) still gets the release.
var releaseDelays = []time.Duration{0, time.Second, 4 * time.Second}

// release undoes, after the request, whatever Take may have claimed with
// token when the Gate could not confirm the claim (an error, a timeout, a
// lost reply) or never called the handler: the approval then applies to the
// next repeat (§7 W144; RULES.md "Claims are never stranded"). It runs in
// the background on fresh contexts, so the 503 is not delayed, and ends
// after a few tries.
func (k *Kit) release(r *http.Request, owner store.Owner, token string) {
	st, timeout, now, logger := k.store(), k.storeTimeout(), k.now, k.logger()
	base := context.WithoutCancel(r.Context())
	path := r.URL.Path
	go func() {
		for i, d := range releaseDelays {
			if d > 0 {
				time.Sleep(d)
			}
			ctx, cancel := context.WithTimeout(base, timeout)
			released, err := st.Release(ctx, owner, token, now())
			cancel()
			if err == nil {
				if released {
					logger.LogAttrs(base, slog.LevelInfo, "opsgate: released a claim the Gate could not confirm; its approval applies to the next request (W144)",
						slog.String("path", path))
				}
				return
			}
			if i == len(releaseDelays)-1 {
				logger.LogAttrs(base, slog.LevelError, "opsgate: store failed",
					slog.String("op", "release"), slog.String("path", path), slog.String("error", err.Error()))
			}
		}
	}()
}
