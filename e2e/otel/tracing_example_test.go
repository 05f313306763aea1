package otel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/webkit"
	metricsotel "github.com/opsgate/opsgate/webkit/metrics/otel"
	tracingotel "github.com/opsgate/opsgate/webkit/tracing/otel"
)

// Example makes the tracing adapter the Kit's Observer, with the metrics
// adapter behind it; an SDK provider with an in-memory exporter stands in
// for the website's own (OTLP, say).
func Example_tracing() {
	exporter := tracetest.NewInMemoryExporter()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tracerProvider.Shutdown(context.Background())
	meterProvider := sdkmetric.NewMeterProvider()

	metrics, err := metricsotel.New(meterProvider.Meter("github.com/opsgate/opsgate"))
	if err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Observer = tracingotel.New(tracerProvider.Tracer("github.com/opsgate/opsgate"), metrics)
	// Before NewMount, which hands the Observer to the endpoint.
	m, err := endpoint.NewMount(endpoint.Config{Origin: "https://shop.example", Kit: kit})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	describe := func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:" + r.PathValue("order"), Kind: "exchange", Terms: map[string]string{"size": "L"}}, nil
	}
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	site := m.Handler(mux)

	// An ordinary browser, joined to no Session: the Gate passes it on.
	site.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "https://shop.example/orders/ord_7/exchange", nil))
	for _, s := range exporter.GetSpans() {
		fmt.Print(s.Name)
		for _, a := range s.Attributes {
			fmt.Printf(" %s=%s", a.Key, a.Value.AsString())
		}
		fmt.Println()
	}
	// Output:
	// opsgate.gate opsgate.route=gate opsgate.outcome=passed opsgate.reason=not_joined
}
