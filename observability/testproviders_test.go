package observability

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/buildrisk/radar/observability/internal/gathered"
)

// This package's own tests cannot import observabilitytest (it imports this
// package); these are its test providers, built the same way.

// ErrMetricUnknown is observabilitytest.ErrMetricUnknown.
var ErrMetricUnknown = gathered.ErrUnknown

// NewTestProviders is observabilitytest.NewProviders.
func NewTestProviders() (*Providers, *tracetest.SpanRecorder) {
	reg := prometheus.NewRegistry()
	promReader, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(fmt.Sprintf("observability: error creating test prometheus exporter: %v", err))
	}
	res := resource.NewSchemaless(semconv.ServiceName(ServiceName))
	spans := tracetest.NewSpanRecorder()
	return ProvidersFrom(reg,
		sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(promReader)),
		sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(spans)),
		true,
	), spans
}

// MetricValue is observabilitytest.MetricValue.
func (p *Providers) MetricValue(name string, labels map[string]string) (float64, error) {
	return gathered.Value(p.Registry, MetricNames, name, labels)
}
