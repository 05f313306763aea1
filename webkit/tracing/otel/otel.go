// Package otel traces what the kit does with the OpenTelemetry trace API
// (go.opentelemetry.io/otel/trace). It takes a Tracer from the caller and
// never owns the exporter, as otelhttp does; the kit itself never imports
// OpenTelemetry, and a website that doesn't import this package doesn't
// compile it.
//
// New returns a webkit.Observer: make it the Kit's Observer, with the
// metrics Observer (if any) as next, which gets every event as before.
// Set it before endpoint.NewMount, which hands it to the endpoint:
//
//	metrics, err := metricsotel.New(meterProvider.Meter("github.com/opsgate/opsgate"))
//	if err != nil { … }
//	kit.Observer = tracingotel.New(tracerProvider.Tracer("github.com/opsgate/opsgate"), metrics)
//	m, err := endpoint.NewMount(endpoint.Config{Origin: origin, Kit: kit})
//
// (metricsotel is github.com/opsgate/opsgate/webkit/metrics/otel,
// tracingotel this package.) The kit's spans are children of the span in
// the request's context, such as otelhttp's server span:
//
//	opsgate.gate                   the Gate's decision for a request
//	  opsgate.store.take           a store step (take, finish, lookup, record, release, use_once)
//	    opsgate.redis.confirm      the Redis store's durability confirmation of a claim
//	  opsgate.handler              the website's handler, performing an approved action
//	  opsgate.store.finish
//	opsgate.endpoint               the operations endpoint
//	  opsgate.endpoint.authenticate  the Session JWT and access token
//	    opsgate.identity.fetch     the agent's metadata document or key set
//	  opsgate.store.use_once, opsgate.store.lookup, opsgate.store.record
//	  opsgate.endpoint.decline     the website's Decline
//	opsgate.join                   the browser join
//	opsgate.status                 the waiting page's status route
//
// The Redis store sends the steps of requests that arrive together in one
// round trip (redisstore.Options.Pipelines), and confirms claims made
// together with one mark and WAIT. Such a shared round trip is a span of
// its own, opsgate.redis.round_trip (or opsgate.redis.confirm_round), in
// a trace of its own: it links to the step span of every request it
// carried, and each of those links back to it. A go-redis tracing hook
// (redisotel) then puts the batch's span under the shared round trip,
// instead of into whichever request happened to send it.
//
// Attributes come from the same small fixed sets as the metrics
// (webkit.Event): opsgate.route, opsgate.outcome, opsgate.reason,
// opsgate.kind (the action's kind, or "metadata" or "jwks" for an identity
// fetch), opsgate.step, and opsgate.batch.size on a shared round trip.
// Never a key, an operation_id, a ref, a sid, a client_id, a User, a URL
// or a token. A route's span gets its outcome and reason from the Event
// the kit observes; a failed store step, an outcome "unavailable" or
// "unknown" and a handler that panicked set the span's status to Error.
package otel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/webkit"
)

// New returns a webkit.Observer that makes spans on tracer, and passes
// every Event and store step on to next (nil: to nobody).
func New(tracer trace.Tracer, next webkit.Observer) webkit.Observer {
	return &observer{tracer: tracer, next: next}
}

// observer is the kit's Observer and its spans.Tracer: the Gate, the
// endpoint, the join and the status route find the Tracer in the Kit's
// Observer.
type observer struct {
	tracer trace.Tracer
	next   webkit.Observer
}

var _ spans.Tracer = (*observer)(nil)

// routeKey holds a route's span in its context, for Observe.
type routeKey struct{}

// Observe labels the route's span with e, and passes e on.
func (o *observer) Observe(ctx context.Context, e webkit.Event) {
	if sp, ok := ctx.Value(routeKey{}).(trace.Span); ok {
		sp.SetAttributes(attrs(spans.Labels{Route: e.Route, Outcome: e.Outcome, Reason: e.Reason, Kind: e.Kind})...)
		if e.Outcome == "unavailable" || e.Outcome == "unknown" {
			sp.SetStatus(codes.Error, e.Outcome)
		}
	}
	if o.next != nil {
		o.next.Observe(ctx, e)
	}
}

// StoreStep passes the step on: its span is the store wrapper's.
func (o *observer) StoreStep(ctx context.Context, step string, took time.Duration, err error) {
	if o.next != nil {
		o.next.StoreStep(ctx, step, took, err)
	}
}

// StartSpan implements spans.Tracer.
func (o *observer) StartSpan(ctx context.Context, name string, l spans.Labels) (context.Context, spans.Span) {
	ctx, sp := o.tracer.Start(ctx, name, trace.WithAttributes(attrs(l)...))
	if l.Route != "" && ctx.Value(routeKey{}) == nil {
		// A route's span (spans.Begin): the Events observed under it
		// label it.
		ctx = context.WithValue(ctx, routeKey{}, sp)
	}
	return ctx, span{sp}
}

// StartShared implements spans.Tracer: a new root, linked both ways with
// each member's span.
func (o *observer) StartShared(ctx context.Context, name string, members []context.Context, l spans.Labels) (context.Context, spans.Span) {
	links := make([]trace.Link, 0, len(members))
	for _, m := range members {
		if sc := trace.SpanContextFromContext(m); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("opsgate.link", "carried")}})
		}
	}
	ctx, sp := o.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(attrs(l)...))
	if sc := sp.SpanContext(); sc.IsValid() {
		for _, m := range members {
			trace.SpanFromContext(m).AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("opsgate.link", "rode")}})
		}
	}
	return ctx, span{sp}
}

// span is a spans.Span of OpenTelemetry's.
type span struct{ sp trace.Span }

func (s span) End(l spans.Labels, err error) {
	if a := attrs(l); len(a) > 0 {
		s.sp.SetAttributes(a...)
	}
	if err != nil {
		s.sp.RecordError(err)
		s.sp.SetStatus(codes.Error, "")
	}
	s.sp.End()
}

// attrs is l as attributes, leaving out the empty ones.
func attrs(l spans.Labels) []attribute.KeyValue {
	var a []attribute.KeyValue
	add := func(k, v string) {
		if v != "" {
			a = append(a, attribute.String(k, v))
		}
	}
	add("opsgate.route", l.Route)
	add("opsgate.step", l.Step)
	add("opsgate.outcome", l.Outcome)
	add("opsgate.reason", l.Reason)
	add("opsgate.kind", l.Kind)
	if l.Batch > 0 {
		a = append(a, attribute.Int("opsgate.batch.size", l.Batch))
	}
	return a
}
