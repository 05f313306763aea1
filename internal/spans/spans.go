// Package spans is how the kit's core reports spans without importing a
// tracing library: the core calls Start (and Shared, where one round trip
// carries many requests' steps), and a Tracer behind them makes the spans.
// The only Tracer is webkit/tracing/otel's, which is also the Kit's
// Observer: the Gate, the endpoint, the join and the status route find it
// there with a type assertion (Begin) and put it in the request's context,
// where the store wrapper, the Redis store and the identity Resolver find
// it again (Start). With no Tracer, Start is one context lookup and
// allocates nothing.
//
// Every label is from the Observer's small fixed sets (webkit.Event): a
// route, a step, an outcome, a reason, an action's kind; never a key, an
// operation_id, a ref, a sid, a client_id, a User or a token.
package spans

import (
	"context"
	"net/http"
)

// Tracer makes spans. Implementations must be safe for concurrent use.
type Tracer interface {
	// StartSpan starts a span named name, a child of ctx's span, and
	// returns a context carrying it.
	StartSpan(ctx context.Context, name string, l Labels) (context.Context, Span)
	// StartShared starts a span of its own (a new root, not any one
	// request's child) for one piece of work that the requests whose
	// contexts are members share, such as one Redis round trip carrying
	// the steps of many requests: it links the new span to the span of
	// each member, and each member's span to it. The context returned is
	// ctx carrying the new span, so that what runs under it (a go-redis
	// tracing hook) is its child.
	StartShared(ctx context.Context, name string, members []context.Context, l Labels) (context.Context, Span)
}

// Span is a span that Tracer started.
type Span interface {
	// End ends the span with the labels learnt meanwhile (empty fields
	// add nothing) and err, nil when the work succeeded.
	End(l Labels, err error)
}

// Labels are a span's attributes: each from the Observer's small fixed
// sets (webkit.Event), empty when not known.
type Labels struct {
	Route   string // "gate", "endpoint", "join", "status"
	Step    string // a store step: "take", "finish", "lookup", "record", "release", "use_once"
	Outcome string
	Reason  string
	Kind    string // Action.Kind at the Gate, or what an identity fetch loads
	Batch   int    // how many requests' steps a shared round trip carried; 0: not shared
}

type tracerKey struct{}

// With returns ctx carrying t, for Start to find.
func With(ctx context.Context, t Tracer) context.Context {
	return context.WithValue(ctx, tracerKey{}, t)
}

// From returns the Tracer ctx carries, or nil.
func From(ctx context.Context) Tracer {
	t, _ := ctx.Value(tracerKey{}).(Tracer)
	return t
}

// Start starts a span named name under ctx's span when ctx carries a
// Tracer, and returns ctx itself and a Span that does nothing when it
// doesn't.
func Start(ctx context.Context, name string, l Labels) (context.Context, Span) {
	t := From(ctx)
	if t == nil {
		return ctx, None
	}
	return t.StartSpan(ctx, name, l)
}

// Shared starts a shared span (Tracer.StartShared) for the work that
// members share, when one of them carries a Tracer; otherwise it returns
// ctx and None.
func Shared(ctx context.Context, name string, members []context.Context, l Labels) (context.Context, Span) {
	for _, m := range members {
		if t := From(m); t != nil {
			return t.StartShared(ctx, name, members, l)
		}
	}
	return ctx, None
}

// Begin starts the span of one of the kit's routes when observer (the
// Kit's Observer) is a Tracer: r's context then carries the Tracer and the
// span. Otherwise it returns r itself and None.
func Begin(r *http.Request, observer any, name string, l Labels) (*http.Request, Span) {
	t, ok := observer.(Tracer)
	if !ok {
		return r, None
	}
	ctx, sp := t.StartSpan(With(r.Context(), t), name, l)
	return r.WithContext(ctx), sp
}

// None is the Span that does nothing.
var None Span = none{}

type none struct{}

func (none) End(Labels, error) {}
