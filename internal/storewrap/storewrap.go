// Package storewrap wraps the kit's store: a deadline on every call, and
// each call's latency reported to the Observer. The Gate, the status
// route, the endpoint and the join's replay check call the store through
// it; no website calls it.
package storewrap

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// WithTimeout returns s with a deadline of d on every call (0 is one
// second), so that a stalled store fails closed in bounded
// time: a gated request then performs nothing and gets 503 with
// Retry-After (RULES.md: the store being down fails closed, in bounded time).
//
// The deadline holds whatever the store's client does with a context: a
// store that returns by its context's deadline by itself
// (storekit.InProcess, storekit.ContextBound) is called directly with it; any
// other's call runs in a goroutine that is abandoned at the deadline (it
// ends when the client gives up, by its own timeouts) and answered with
// context.DeadlineExceeded. A Take cut off either way may still claim
// later; the Gate releases it (storedriver.Store.Release, W144).
//
// Finish is not bounded by d: it runs after the handler, with its own
// longer deadline, because a lost Finish leaves the operation performing
// until it is resolved.
func WithTimeout(s storedriver.Store, d time.Duration) storedriver.Store {
	if s == nil {
		return nil
	}
	if d <= 0 {
		d = time.Second
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
	// the machine demo/load/PERFORMANCE.md measures).
	if p, ok := s.(storekit.InProcess); ok && p.InProcess() {
		t.how = inProcess
	} else if b, ok := s.(storekit.ContextBound); ok && b.BoundByContext() {
		t.how = withDeadline
	}
	return t
}

// timedStore bounds each call of s by d. It embeds the store, so that a
// method added to storedriver.Store later still reaches it (unbounded until
// listed here).
type timedStore struct {
	storedriver.Store
	s   storedriver.Store
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

func (t timedStore) Take(ctx context.Context, owner store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if t.how == inProcess {
		return t.s.Take(ctx, owner, a, now)
	}
	return call(t, ctx, "take", func(ctx context.Context) (storedriver.TakeResult, error) { return t.s.Take(ctx, owner, a, now) })
}

func (t timedStore) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	if t.how == inProcess {
		return t.s.Lookup(ctx, owner, ref, now)
	}
	type found struct {
		rec storedriver.Found
		ok  bool
	}
	f, err := call(t, ctx, "lookup", func(ctx context.Context) (found, error) {
		rec, ok, err := t.s.Lookup(ctx, owner, ref, now)
		return found{rec, ok}, err
	})
	return f.rec, f.ok, err
}

func (t timedStore) Record(ctx context.Context, owner store.Owner, ref string, a store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	if t.how == inProcess {
		return t.s.Record(ctx, owner, ref, a, now, opts)
	}
	return call(t, ctx, "record", func(ctx context.Context) (storedriver.RecordReply, error) {
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

// Marked reports whether key is marked by UseOnce and not expired at now,
// without marking it: with s's own read (storekit.OnceMarked) when it has
// one, else with a UseOnce whose mark expired a nanosecond before now. That
// UseOnce finds a mark that is not expired (and leaves it), or leaves one
// that is: each is one atomic step, so a UseOnce that marks key for later
// (Unbind's) is seen by every check after it, whichever runs first.
func Marked(ctx context.Context, s storedriver.Store, key string, now time.Time) (bool, error) {
	if m, ok := s.(storekit.OnceMarked); ok {
		return m.Marked(ctx, key, now)
	}
	first, err := s.UseOnce(ctx, key, now.Add(-time.Nanosecond), now)
	return err == nil && !first, err
}

// MarksInTake reports whether s's Take checks the marker its context
// names (storekit.MarkedInTake).
func MarksInTake(s storedriver.Store) bool {
	m, ok := s.(storekit.MarkedInTake)
	return ok && m.MarkedInTake()
}

// MarkedInTake is the bounded store's (storekit.MarkedInTake).
func (t timedStore) MarkedInTake() bool { return MarksInTake(t.s) }

func (t timedStore) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	if t.how == inProcess {
		return Marked(ctx, t.s, key, now)
	}
	return call(t, ctx, "marked", func(ctx context.Context) (bool, error) { return Marked(ctx, t.s, key, now) })
}

// StepObserver sees each store call: webkit.Observer's StoreStep.
type StepObserver interface {
	StoreStep(ctx context.Context, step string, took time.Duration, err error)
}

// Observe returns s with the duration and error of each call reported to o
// as a StoreStep; s itself when o is nil.
func Observe(s storedriver.Store, o StepObserver) storedriver.Store {
	if o == nil || s == nil {
		return s
	}
	if _, ok := s.(observedStore); ok {
		return s
	}
	return observedStore{s: s, Store: s, o: o}
}

// observedStore times the store's calls. It embeds the store, so that a
// method added to storedriver.Store later still reaches it (untimed until listed
// here).
type observedStore struct {
	storedriver.Store
	s storedriver.Store
	o StepObserver
}

// InProcess and BoundByContext are the observed store's: timing a call
// adds no waiting, so WithTimeout still calls it directly.
func (t observedStore) InProcess() bool {
	p, ok := t.s.(storekit.InProcess)
	return ok && p.InProcess()
}

func (t observedStore) BoundByContext() bool {
	b, ok := t.s.(storekit.ContextBound)
	return ok && b.BoundByContext()
}

// MarkedInTake is the observed store's (storekit.MarkedInTake).
func (t observedStore) MarkedInTake() bool { return MarksInTake(t.s) }

func (t observedStore) step(ctx context.Context, name string, start time.Time, sp spans.Span, err error) {
	sp.End(spans.Labels{}, err)
	t.o.StoreStep(ctx, name, time.Since(start), err)
}

// span starts the span of a store step, when the request is traced
// (spans.Begin put a Tracer in its context): the Redis store's shared
// round trips and durability confirmations are its children or links.
func span(ctx context.Context, step string) (context.Context, spans.Span) {
	return spans.Start(ctx, "opsgate.store."+step, spans.Labels{Step: step})
}

func (t observedStore) Take(ctx context.Context, owner store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	ctx, sp := span(ctx, "take")
	start := time.Now()
	r, err := t.s.Take(ctx, owner, a, now)
	t.step(ctx, "take", start, sp, err)
	return r, err
}

func (t observedStore) Finish(ctx context.Context, c store.Claim, o store.Outcome, now time.Time) error {
	ctx, sp := span(ctx, "finish")
	start := time.Now()
	err := t.s.Finish(ctx, c, o, now)
	t.step(ctx, "finish", start, sp, err)
	return err
}

func (t observedStore) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	ctx, sp := span(ctx, "lookup")
	start := time.Now()
	r, found, err := t.s.Lookup(ctx, owner, ref, now)
	t.step(ctx, "lookup", start, sp, err)
	return r, found, err
}

func (t observedStore) Record(ctx context.Context, owner store.Owner, ref string, a store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	ctx, sp := span(ctx, "record")
	start := time.Now()
	r, err := t.s.Record(ctx, owner, ref, a, now, opts)
	t.step(ctx, "record", start, sp, err)
	return r, err
}

func (t observedStore) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	ctx, sp := span(ctx, "use_once")
	start := time.Now()
	first, err := t.s.UseOnce(ctx, key, until, now)
	t.step(ctx, "use_once", start, sp, err)
	return first, err
}

// Marked is timed as the step "marked": the check, on a joined browser's
// request, that Sessions.Unbind did not end its binding.
func (t observedStore) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	ctx, sp := span(ctx, "marked")
	start := time.Now()
	marked, err := Marked(ctx, t.s, key, now)
	t.step(ctx, "marked", start, sp, err)
	return marked, err
}

// Release is traced but not timed: the Observer's steps are the six
// above, and a release is rare (a claim whose action never started).
func (t observedStore) Release(ctx context.Context, owner store.Owner, token string, now time.Time) (bool, error) {
	ctx, sp := span(ctx, "release")
	released, err := t.s.Release(ctx, owner, token, now)
	sp.End(spans.Labels{}, err)
	return released, err
}

// Cached keeps one store wrapped with a deadline and an Observer (Wrap)
// while the settings it was made of stay the same: the Kit's Store,
// StoreTimeout and Observer, which the Gate, the status route and the
// endpoint read on every request (one Kit: a field changed after wiring
// is the one every part uses). Wrapping on every call cost allocations
// on every request. The zero Cached is ready; it is safe for concurrent
// use.
type Cached struct {
	p atomic.Pointer[cached]
}

type cached struct {
	base storedriver.Store
	d    time.Duration
	o    StepObserver
	s    storedriver.Store
}

// Wrap returns base with a deadline of d on every call and, when o is not
// nil, each step's latency reported to o: the store it returned last
// while base, d and o are the same.
func (c *Cached) Wrap(base storedriver.Store, d time.Duration, o StepObserver) storedriver.Store {
	if w := c.p.Load(); w != nil && w.d == d && same(w.base, base) && same(w.o, o) {
		return w.s
	}
	w := &cached{base: base, d: d, o: o, s: WithTimeout(base, d)}
	if o != nil {
		w.s = Observe(w.s, o)
	}
	c.p.Store(w)
	return w.s
}

// same reports whether a and b are the same value, without panicking on
// values of types that can't be compared.
func same(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
