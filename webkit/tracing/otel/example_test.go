package otel_test

import (
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/opsgate/opsgate/webkit"
	metricsotel "github.com/opsgate/opsgate/webkit/metrics/otel"
	tracingotel "github.com/opsgate/opsgate/webkit/tracing/otel"
)

// Example makes the tracing adapter the Kit's Observer, with the metrics
// adapter behind it. The website's own TracerProvider and MeterProvider
// (the OpenTelemetry SDK's, with their exporters) take the no-op
// providers' place.
func Example() {
	tracerProvider, meterProvider := tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	metrics, err := metricsotel.New(meterProvider.Meter("github.com/opsgate/opsgate"))
	if err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Observer = tracingotel.New(tracerProvider.Tracer("github.com/opsgate/opsgate"), metrics) // before endpoint.NewMount
}
