package otel_test

import (
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/opsgate/opsgate/webkit"
	opsgateotel "github.com/opsgate/opsgate/webkit/metrics/otel"
)

// Example records the kit's events on a Meter from the website's own
// MeterProvider (the OpenTelemetry SDK's, with its exporter); a no-op
// provider stands in for it here.
func Example() {
	var provider = noop.NewMeterProvider() // the website's own provider
	obs, err := opsgateotel.New(provider.Meter("github.com/opsgate/opsgate"))
	if err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Observer = obs // before endpoint.NewMount
}
