package otel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opsgate/opsgate/webkit"
	opsgateotel "github.com/opsgate/opsgate/webkit/metrics/otel"
)

// Example records the kit's events on a Meter from the caller's
// MeterProvider; here an SDK provider with a manual reader stands in for
// the website's exporter.
func Example_metrics() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := opsgateotel.New(provider.Meter("github.com/opsgate/opsgate"))
	if err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Observer = obs

	// What the kit reports while a website runs (the Gate, the endpoint
	// and the store call these).
	ctx := context.Background()
	obs.Observe(ctx, webkit.Event{Route: "gate", Outcome: "waiting", Kind: "exchange"})
	obs.Observe(ctx, webkit.Event{Route: "endpoint", Outcome: "recorded"})
	obs.Observe(ctx, webkit.Event{Route: "endpoint", Outcome: "refused", Reason: "check3"})
	obs.StoreStep(ctx, "take", 2*time.Millisecond, nil)
	obs.StoreStep(ctx, "take", time.Second, errors.New("connection refused"))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					outcome, _ := p.Attributes.Value("outcome")
					fmt.Println(m.Name, outcome.AsString(), p.Value)
				}
			case metricdata.Histogram[float64]:
				var n uint64
				for _, p := range d.DataPoints {
					n += p.Count
				}
				fmt.Println(m.Name, m.Unit, n)
			}
		}
	}
	// Unordered output:
	// opsgate.gate.requests waiting 1
	// opsgate.endpoint.requests recorded 1
	// opsgate.endpoint.requests refused 1
	// opsgate.store.step.duration s 2
}
