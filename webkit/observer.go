package webkit

import (
	"context"
	"github.com/opsgate/opsgate/internal/storekit"
	"time"

	"github.com/opsgate/opsgate/store"
)

// Observer sees what the kit does, so that Prometheus or OpenTelemetry can
// be plugged in without the kit depending on either: the adapters are
// webkit/metrics/prometheus and webkit/metrics/otel. Each method is called
// on the request's goroutine, with the request's context; implementations
// must be quick and safe for concurrent use. Embed [NopObserver] to
// implement only some of them.
//
// Every label an Observer gets comes from a small fixed set, or is an
// action's Kind, which the website names (Action.Kind): never a key, an
// operation_id, a ref, a sid, a client_id or a path, each of which would
// make a metric series per user (cardinality is a cost on every Prometheus
// server that scrapes the website).
type Observer interface {
	// Observe: one answer of the Gate, the endpoint, the join or the status
	// route (see Event).
	Observe(ctx context.Context, e Event)
	// StoreStep: one call of the store (step is its method in lower case:
	// "take", "finish", "lookup", "record", "use_once"), how long
	// it took, and its error (nil when it worked). A "take" that failed
	// performed nothing (fail closed).
	StoreStep(ctx context.Context, step string, took time.Duration, err error)
}

// Routes an Event comes from.
const (
	RouteGate     = "gate"     // the Gate, around a website's handler (§4)
	RouteEndpoint = "endpoint" // the operations endpoint, for agents (§4, §6)
	RouteJoin     = "join"     // the browser join (browser_session_endpoint)
	RouteStatus   = "status"   // the waiting page's status route (W93)
)

// Event is one answer of the kit. Outcome and Reason come from the fixed
// sets below; Kind is the action's kind at the Gate.
//
// Gate outcomes: "passed" (Reason "not_joined", "own_login", "not_gated"
// or "own_flow": the handler ran without the kit), "waiting" (403 with a
// ref: the operation was issued or reused), "performed", "not_performed",
// "unknown" (an approval was used up and the handler's outcome was that),
// "busy" and "unavailable" (503, nothing performed), "rate_limited" (429:
// the owner's or agent's cap of open operations), "extension_required",
// "invalid_request" (describe refused the request or its body).
//
// Endpoint outcomes: a lookup answers "operation" (approval_required with
// the operation), "status" or "not_found"; an approval answers "recorded",
// "declined", "challenge" (sign_in_required) or "refused" with Reason
// "check1", "check2" or "check3" (§6 "What the Company checks"), or
// "csrf" when the website's CSRF protection refused it first, or
// "rate_limited" (429: the operation's cap of approvals); any
// request may get "invalid_request", "extension_required",
// "unauthenticated" (Reason "session" or "token") or "unavailable" (Reason
// "store" or "verification").
//
// Join outcomes: "joined" (Reason "signed_in" or "signed_out"), "refused"
// (Reason "request", "assertion", "access_token", "conflict": the browser
// is bound to another agent's or User's Session, "csrf": the website's
// CSRF protection refused it before the kit saw it), "unavailable" (the
// agent's keys can't be fetched now, or the join can't be stored).
//
// Status outcomes: the status answered ("waiting", "approved",
// "performing", "performed"), "not_found" or "unavailable".
type Event struct {
	Route   string
	Outcome string
	Reason  string
	// Kind is Action.Kind at the Gate once describe has run; "" elsewhere.
	Kind string
}

// NopObserver observes nothing. It is the Kit's default.
type NopObserver struct{}

func (NopObserver) Observe(context.Context, Event)                          {}
func (NopObserver) StoreStep(context.Context, string, time.Duration, error) {}

// Observe reports e to the Kit's Observer, if it has one. The endpoint and
// the Mount report through it, so that one Observer sees the whole website.
func (k *Kit) Observe(ctx context.Context, e Event) {
	if k.Observer != nil {
		k.Observer.Observe(ctx, e)
	}
}

// ObserveStore returns s with the duration and error of each call reported
// to o as a StoreStep; s itself when o is nil.
func ObserveStore(s store.Store, o Observer) store.Store {
	if o == nil || s == nil {
		return s
	}
	if _, ok := s.(observedStore); ok {
		return s
	}
	return observedStore{s: s, Store: s, o: o}
}

// observedStore times the store's calls. It embeds the store, so that a
// method added to store.Store later still reaches it (untimed until listed
// here).
type observedStore struct {
	store.Store
	s store.Store
	o Observer
}

// InProcess and BoundByContext are the observed store's: timing a call
// adds no waiting, so WithStoreTimeout still calls it directly.
func (t observedStore) InProcess() bool {
	p, ok := t.s.(storekit.InProcess)
	return ok && p.InProcess()
}

func (t observedStore) BoundByContext() bool {
	b, ok := t.s.(storekit.ContextBound)
	return ok && b.BoundByContext()
}

func (t observedStore) step(ctx context.Context, name string, start time.Time, err error) {
	t.o.StoreStep(ctx, name, time.Since(start), err)
}

func (t observedStore) Take(ctx context.Context, owner store.Owner, a store.Action, now time.Time) (store.TakeResult, error) {
	start := time.Now()
	r, err := t.s.Take(ctx, owner, a, now)
	t.step(ctx, "take", start, err)
	return r, err
}

func (t observedStore) Finish(ctx context.Context, c store.Claim, o store.Outcome, now time.Time) error {
	start := time.Now()
	err := t.s.Finish(ctx, c, o, now)
	t.step(ctx, "finish", start, err)
	return err
}

func (t observedStore) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (store.Record, bool, error) {
	start := time.Now()
	r, found, err := t.s.Lookup(ctx, owner, ref, now)
	t.step(ctx, "lookup", start, err)
	return r, found, err
}

func (t observedStore) Record(ctx context.Context, owner store.Owner, ref string, a store.Approval, now time.Time, opts store.RecordOptions) (store.RecordReply, error) {
	start := time.Now()
	r, err := t.s.Record(ctx, owner, ref, a, now, opts)
	t.step(ctx, "record", start, err)
	return r, err
}

func (t observedStore) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	start := time.Now()
	first, err := t.s.UseOnce(ctx, key, until, now)
	t.step(ctx, "use_once", start, err)
	return first, err
}
