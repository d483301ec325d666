package observability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name resource attribute of every signal the
// service emits. It is fixed so that dashboards and trace searches find every
// role of the one binary under one name; the role is a separate attribute.
const ServiceName = "buildrisk-radar"

// RoleAttributeKey is the resource attribute naming the role a process runs
// (api, worker, dev, cli). It is a resource attribute, not a metric
// attribute, so it never multiplies metric series.
const RoleAttributeKey = attribute.Key("buildrisk.role")

// Config describes the process whose telemetry [NewProviders] sets up. Its
// values become resource attributes: they identify the process on every
// span and on the target_info metric, but are never metric attributes, so
// they add no series to the instruments of [Instruments].
type Config struct {
	// Role is the role the process runs (api, worker, dev or cli). It becomes
	// the buildrisk.role resource attribute. Optional.
	Role string

	// ServiceVersion is the build's version. It becomes the service.version
	// resource attribute. Optional.
	ServiceVersion string

	// WorkerID is the worker's registry id (pid@hostname#boot). It becomes
	// the service.instance.id resource attribute, so spans can be tied to
	// the worker row that held a request. Optional; empty for the api.
	WorkerID string
}

// Providers holds the process's OpenTelemetry meter and tracer providers and
// the private Prometheus registry that [Providers.MetricsHandler] serves.
// Create it once at startup with [NewProviders], hand Meter and Tracer to
// the components that record telemetry (inject it; don't rely on the
// globals), and call [Providers.Shutdown] last, after the worker has drained,
// so the final counts are flushed.
type Providers struct {
	// Meter is the meter provider every instrument is created from. Pass it
	// to [NewInstruments] and to libraries that take a MeterProvider
	// (otelriver, otelhttp, otelpgx).
	Meter metric.MeterProvider

	// Registry is the private Prometheus registry holding the Go and process
	// collectors and the OTel exporter. It is private so that libraries
	// registering on prometheus.DefaultRegisterer can't collide with it.
	Registry *prometheus.Registry

	// Tracer is the tracer provider every span is created from.
	Tracer trace.TracerProvider

	// SpansRecorded reports whether a finished span goes anywhere (an
	// exporter, or a test's recorder). When it is false, instrumentation
	// whose only product is spans can be left out of hot paths.
	SpansRecorded bool

	meterProvider  *sdkmetric.MeterProvider
	shutdownErr    error
	shutdownOnce   sync.Once
	tracerProvider *sdktrace.TracerProvider
}

// NewProviders builds the meter and tracer providers for a process described
// by cfg.
//
// Metrics always go to a private Prometheus registry (with the Go and process
// collectors) served by [Providers.MetricsHandler]. Metrics and traces are
// additionally pushed over OTLP only when that is asked for explicitly: when
// OTEL_EXPORTER_OTLP_ENDPOINT or its signal-specific variant
// (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set, or when OTEL_METRICS_EXPORTER / OTEL_TRACES_EXPORTER names an
// exporter (otlp or console). The OTel default would be to push to
// localhost:4318 and log an error on every export; this never does.
// OTEL_METRICS_EXPORTER=prometheus adds nothing, because /metrics is already
// served by MetricsHandler (autoexport's own prometheus exporter would open a
// second server on localhost:9464). OTEL_SDK_DISABLED=true turns the push off.
//
// It sets the global text-map propagator (W3C TraceContext and Baggage), so
// trace context crosses HTTP and River job boundaries; it does not set the
// global providers, see [Providers.SetGlobal].
func NewProviders(ctx context.Context, cfg Config) (*Providers, error) {
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("error registering go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("error registering process collector: %w", err)
	}

	promReader, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("error creating prometheus exporter: %w", err)
	}

	plan := exportPlanFromEnv(os.Getenv)

	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promReader), sdkmetric.WithView(Views()...)}
	var pushReader sdkmetric.Reader
	if plan.Metrics {
		pushReader, err = autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("error creating otlp metric reader: %w", err)
		}
		meterOpts = append(meterOpts, sdkmetric.WithReader(pushReader))
	}

	tracerOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	exporting := false
	if plan.Traces {
		exporter, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			if pushReader != nil {
				err = errors.Join(err, pushReader.Shutdown(ctx))
			}
			return nil, fmt.Errorf("error creating otlp span exporter: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exporter) {
			tracerOpts = append(tracerOpts, sdktrace.WithBatcher(exporter))
			exporting = true
		}
	}
	if !exporting {
		// No exporter will ever see a span: make them non-recording. They
		// still carry trace ids (logs, River job metadata), but a provider
		// call no longer pays for a recorded span nobody reads (about a
		// tenth of a call's CPU at fan-out 64).
		tracerOpts = append(tracerOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}

	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	return ProvidersFrom(reg, sdkmetric.NewMeterProvider(meterOpts...), sdktrace.NewTracerProvider(tracerOpts...), exporting), nil
}

// HTTPServerMetricAttributes are the only attributes the http.server.*
// instruments keep (see [Views]): each has a bounded set of values whatever
// the request says (otelhttp reads the method as one of the standard ones or
// _OTHER, the route from the mux's patterns).
var HTTPServerMetricAttributes = []attribute.Key{
	semconv.HTTPRequestMethodKey,
	semconv.HTTPResponseStatusCodeKey,
	semconv.HTTPRouteKey,
	semconv.URLSchemeKey,
	semconv.NetworkProtocolNameKey,
	semconv.NetworkProtocolVersionKey,
	semconv.ErrorTypeKey,
}

// Views are the views every meter provider of the service is built with.
// One allow-lists the attributes of the http.server.* instruments, whoever
// makes them, to [HTTPServerMetricAttributes]: otelhttp labels
// server.address and server.port from the request's Host header, before
// the api has authenticated anything, so any client could otherwise add a
// series per Host it sends. An allow-list, not a deny-list, so an attribute
// a later otelhttp adds is dropped too until it is judged bounded.
func Views() []sdkmetric.View {
	return []sdkmetric.View{
		sdkmetric.NewView(
			sdkmetric.Instrument{Name: "http.server.*"},
			sdkmetric.Stream{AttributeFilter: attribute.NewAllowKeysFilter(HTTPServerMetricAttributes...)},
		),
	}
}

// ProvidersFrom assembles providers from a meter and a tracer provider and
// the registry the meter's Prometheus reader registers on; spansRecorded
// says whether an exporter will see the tracer's spans. NewProviders builds
// on it, and so do the test providers (observabilitytest).
func ProvidersFrom(reg *prometheus.Registry, mp *sdkmetric.MeterProvider, tp *sdktrace.TracerProvider, spansRecorded bool) *Providers {
	return newProvidersFrom(reg, mp, tp, spansRecorded)
}

func newProvidersFrom(reg *prometheus.Registry, mp *sdkmetric.MeterProvider, tp *sdktrace.TracerProvider, spansRecorded bool) *Providers {
	return &Providers{
		Meter:          mp,
		Registry:       reg,
		Tracer:         tp,
		SpansRecorded:  spansRecorded,
		meterProvider:  mp,
		tracerProvider: tp,
	}
}

// MetricsHandler returns the Prometheus scrape handler for the private
// registry. Mount it at GET /metrics. A collector that fails doesn't fail the
// scrape: the metrics that could be gathered are still served.
func (p *Providers) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// SetGlobal installs the providers as OpenTelemetry's global meter and tracer
// providers, for libraries that only read the globals. Prefer passing Meter
// and Tracer explicitly; call this once, from cmd/radar, if at all.
func (p *Providers) SetGlobal() {
	otel.SetMeterProvider(p.Meter)
	otel.SetTracerProvider(p.Tracer)
}

// Shutdown flushes pending spans and metrics to their exporters and shuts
// both providers down. Call it last, after the worker has drained and the
// pools are closed, so that the counts of the final chunks are exported; a
// deadline on ctx bounds how long it may take. Calls after the first return
// the first call's result.
func (p *Providers) Shutdown(ctx context.Context) error {
	p.shutdownOnce.Do(func() {
		var errs []error
		if err := p.tracerProvider.ForceFlush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("error flushing tracer provider: %w", err))
		}
		if err := p.tracerProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("error shutting down tracer provider: %w", err))
		}
		if err := p.meterProvider.ForceFlush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("error flushing meter provider: %w", err))
		}
		if err := p.meterProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("error shutting down meter provider: %w", err))
		}
		p.shutdownErr = errors.Join(errs...)
	})
	return p.shutdownErr
}

// exportPlan says which signals are pushed over OTLP (or another exporter
// named by OTEL_*_EXPORTER) in addition to the Prometheus scrape.
type exportPlan struct {
	Metrics bool
	Traces  bool
}

// exportPlanFromEnv decides the push exporters from the standard OTEL_*
// variables read through getenv. Unlike autoexport's default it pushes
// nothing unless an endpoint is set or an exporter is named.
func exportPlanFromEnv(getenv func(string) string) exportPlan {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return exportPlan{}
	}
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != ""

	metrics := false
	switch v := strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")); v {
	case "":
		metrics = endpoint || strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")) != ""
	case "none", "prometheus":
		// prometheus: already served by MetricsHandler.
	default:
		metrics = true
	}

	traces := false
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "":
		traces = endpoint || strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
	case "none":
	default:
		traces = true
	}

	return exportPlan{Metrics: metrics, Traces: traces}
}

// newResource describes the process. OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME are applied last, so an operator can override any value.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(ServiceName)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	if cfg.Role != "" {
		attrs = append(attrs, RoleAttributeKey.String(cfg.Role))
	}
	if cfg.WorkerID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.WorkerID))
	}

	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("error creating telemetry resource: %w", err)
	}
	return res, nil
}
