// Package otel_test runs the OpenTelemetry adapters (webkit/metrics/otel,
// webkit/tracing/otel) against the OpenTelemetry SDK, which the kit's own
// module does not require.
package otel_test
