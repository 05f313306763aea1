// Package otel records what the kit does with the OpenTelemetry metric API
// (go.opentelemetry.io/otel/metric). It takes a Meter from the caller and
// never owns the exporter, as otelhttp does. A website that doesn't import
// it doesn't compile it.
//
//	obs, err := otel.New(meterProvider.Meter("github.com/opsgate/opsgate"))
//	kit.Observer = obs
//
// Instruments (attributes are small fixed sets and the action kinds the
// website names in webkit.Action.Kind, never keys or IDs; see
// webkit.Event):
//
//	opsgate.gate.requests       {outcome, reason, kind}  counter
//	opsgate.endpoint.requests   {outcome, reason}        counter
//	opsgate.join.requests       {outcome, reason}        counter
//	opsgate.status.requests     {outcome}                counter
//	opsgate.store.step.duration {step, error}            histogram, seconds
//
// Through a Prometheus exporter these become opsgate_gate_requests_total
// and so on, and opsgate_store_step_duration_seconds.
package otel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/metrics/internal/labels"
)

// Observer is a webkit.Observer that records into OpenTelemetry
// instruments.
type Observer struct {
	gate, endpoint, join, status metric.Int64Counter
	storeSteps                   metric.Float64Histogram
	kinds                        labels.Kinds
}

var _ webkit.Observer = (*Observer)(nil)

// New makes the instruments on meter.
func New(meter metric.Meter) (*Observer, error) {
	o := &Observer{}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{request}"))
		return c
	}
	o.gate = counter("opsgate.gate.requests", "Requests the Gate answered, by outcome, reason and action kind.")
	o.endpoint = counter("opsgate.endpoint.requests", "Requests the operations endpoint answered, by outcome and reason (the failed check).")
	o.join = counter("opsgate.join.requests", "Browser joins, by outcome and reason.")
	o.status = counter("opsgate.status.requests", "Waiting pages' status requests, by the status answered.")
	if err != nil {
		return nil, err
	}
	o.storeSteps, err = meter.Float64Histogram("opsgate.store.step.duration",
		metric.WithDescription("Duration of each store call (take, finish, lookup, record, issue, use_once, marked)."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
	if err != nil {
		return nil, err
	}
	return o, nil
}

// Observe implements webkit.Observer.
func (o *Observer) Observe(ctx context.Context, e webkit.Event) {
	if !labels.Known(e.Route) {
		return
	}
	outcome, reason := attribute.String("outcome", e.Outcome), attribute.String("reason", e.Reason)
	switch e.Route {
	case "gate":
		o.gate.Add(ctx, 1, metric.WithAttributes(outcome, reason, attribute.String("kind", o.kinds.Of(e.Kind))))
	case "endpoint":
		o.endpoint.Add(ctx, 1, metric.WithAttributes(outcome, reason))
	case "join":
		o.join.Add(ctx, 1, metric.WithAttributes(outcome, reason))
	case "status":
		o.status.Add(ctx, 1, metric.WithAttributes(outcome))
	}
}

// StoreStep implements webkit.Observer.
func (o *Observer) StoreStep(ctx context.Context, step string, took time.Duration, err error) {
	o.storeSteps.Record(ctx, took.Seconds(), metric.WithAttributes(attribute.String("step", step), attribute.Bool("error", err != nil)))
}
