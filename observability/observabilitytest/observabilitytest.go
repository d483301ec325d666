// Package observabilitytest gives tests private telemetry providers and a
// way to read back what their code counted. Only tests import it.
package observabilitytest

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/internal/gathered"
)

// ErrMetricUnknown is returned by [MetricValue] for a name that is neither
// gathered from the registry nor listed in observability.MetricNames, which
// almost always means the caller misspelled it.
var ErrMetricUnknown = gathered.ErrUnknown

// NewProviders returns providers for tests: metrics go to a fresh private
// registry, through the service's views (observability.Views), (without the Go and process collectors, to keep scrapes small)
// and finished spans to the returned in-memory recorder. Nothing is pushed
// anywhere and no global is touched, so parallel tests can each have their
// own. Read values back with [MetricValue] or by scraping the providers'
// MetricsHandler.
//
// Panics if the exporter can't register on the fresh registry, which would
// be a bug in this package.
func NewProviders() (*observability.Providers, *tracetest.SpanRecorder) {
	reg := prometheus.NewRegistry()
	promReader, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(fmt.Sprintf("observabilitytest: error creating test prometheus exporter: %v", err))
	}
	res := resource.NewSchemaless(semconv.ServiceName(observability.ServiceName))
	spans := tracetest.NewSpanRecorder()
	return observability.ProvidersFrom(reg,
		sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(promReader), sdkmetric.WithView(observability.Views()...)),
		sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(spans)),
		true,
	), spans
}

// MetricValue gathers p's registry and returns the sum of the samples of
// the metric named name (as scraped) whose labels include every pair of
// labels; a nil map matches every sample. For a histogram, name may be its
// base name or base_count (the number of observations) or base_sum (their
// sum).
//
// A metric listed in observability.MetricNames that hasn't been recorded
// yet has the value 0. Any other name not gathered returns an error
// wrapping [ErrMetricUnknown].
func MetricValue(p *observability.Providers, name string, labels map[string]string) (float64, error) {
	return gathered.Value(p.Registry, observability.MetricNames, name, labels)
}

// Telemetry is a test's private instruments and the providers to read them
// back from.
type Telemetry struct {
	Providers   *observability.Providers
	Instruments *observability.Instruments
}

// NewTelemetry returns instruments on providers of the test's own; a
// failure to make them fails the test.
func NewTelemetry(t testing.TB) *Telemetry {
	t.Helper()
	providers, _ := NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	if err != nil {
		t.Fatalf("observabilitytest: %v", err)
	}
	return &Telemetry{Providers: providers, Instruments: instruments}
}

// Metric returns the value of the series name{labels}, failing the test
// when it cannot be read.
func (tel *Telemetry) Metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := MetricValue(tel.Providers, name, labels)
	if err != nil {
		t.Fatalf("observabilitytest: %v", err)
	}
	return v
}
