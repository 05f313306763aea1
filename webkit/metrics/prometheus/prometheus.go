// Package prometheus counts what the kit does in Prometheus metrics
// (github.com/prometheus/client_golang). A website that doesn't import it
// doesn't compile it.
//
//	obs, err := prometheus.New(registry) // prometheus.DefaultRegisterer, or your own
//	kit.Observer = obs
//	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
//
// Metrics (labels are small fixed sets and the action kinds the website
// names in webkit.Action.Kind, never keys or IDs; see webkit.Event):
//
//	opsgate_gate_requests_total{outcome, reason, kind}
//	opsgate_endpoint_requests_total{outcome, reason}
//	opsgate_join_requests_total{outcome, reason}
//	opsgate_status_requests_total{outcome}
//	opsgate_store_step_duration_seconds{step}   (histogram)
//	opsgate_store_errors_total{step}
package prometheus

import (
	"context"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/metrics/internal/labels"
)

// Observer is a webkit.Observer that counts into Prometheus metrics.
type Observer struct {
	gate, endpoint, join, status *prom.CounterVec
	storeSteps                   *prom.HistogramVec
	storeErrors                  *prom.CounterVec
	kinds                        labels.Kinds
}

var _ webkit.Observer = (*Observer)(nil)

// New makes the metrics and registers them with reg; nil reg registers
// nothing (for a caller that collects them itself: Observer is also a
// prom.Collector).
func New(reg prom.Registerer) (*Observer, error) {
	o := &Observer{
		gate: prom.NewCounterVec(prom.CounterOpts{
			Name: "opsgate_gate_requests_total",
			Help: "Requests the Gate answered, by outcome (waiting, performed, not_performed, unknown, busy, unavailable, passed, …), reason and action kind.",
		}, []string{"outcome", "reason", "kind"}),
		endpoint: prom.NewCounterVec(prom.CounterOpts{
			Name: "opsgate_endpoint_requests_total",
			Help: "Requests the operations endpoint answered, by outcome (operation, status, recorded, declined, refused, challenge, …) and reason (the failed check, check1 to check3).",
		}, []string{"outcome", "reason"}),
		join: prom.NewCounterVec(prom.CounterOpts{
			Name: "opsgate_join_requests_total",
			Help: "Browser joins, by outcome (joined, refused, unavailable) and reason.",
		}, []string{"outcome", "reason"}),
		status: prom.NewCounterVec(prom.CounterOpts{
			Name: "opsgate_status_requests_total",
			Help: "Waiting pages' status requests, by the status answered.",
		}, []string{"outcome"}),
		storeSteps: prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "opsgate_store_step_duration_seconds",
			Help:    "Duration of each store call (take, finish, lookup, record, issue, use_once, marked).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"step"}),
		storeErrors: prom.NewCounterVec(prom.CounterOpts{
			Name: "opsgate_store_errors_total",
			Help: "Store calls that failed, by step; a failed take performed nothing.",
		}, []string{"step"}),
	}
	if reg != nil {
		if err := reg.Register(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Describe implements prom.Collector.
func (o *Observer) Describe(ch chan<- *prom.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prom.Collector.
func (o *Observer) Collect(ch chan<- prom.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}

func (o *Observer) collectors() []prom.Collector {
	return []prom.Collector{o.gate, o.endpoint, o.join, o.status, o.storeSteps, o.storeErrors}
}

// Observe implements webkit.Observer.
func (o *Observer) Observe(_ context.Context, e webkit.Event) {
	switch e.Route {
	case "gate":
		o.gate.WithLabelValues(e.Outcome, e.Reason, o.kinds.Of(e.Kind)).Inc()
	case "endpoint":
		o.endpoint.WithLabelValues(e.Outcome, e.Reason).Inc()
	case "join":
		o.join.WithLabelValues(e.Outcome, e.Reason).Inc()
	case "status":
		o.status.WithLabelValues(e.Outcome).Inc()
	}
}

// StoreStep implements webkit.Observer.
func (o *Observer) StoreStep(_ context.Context, step string, took time.Duration, err error) {
	o.storeSteps.WithLabelValues(step).Observe(took.Seconds())
	if err != nil {
		o.storeErrors.WithLabelValues(step).Inc()
	}
}
