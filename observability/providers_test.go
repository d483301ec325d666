package observability

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
)

// otelEnv lists the variables that steer the push exporters; the env tests
// set all of them so the machine's environment can't leak in.
var otelEnv = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_METRICS_EXPORTER",
	"OTEL_SDK_DISABLED",
	"OTEL_TRACES_EXPORTER",
}

func TestExportPlanFromEnv(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		env  map[string]string
		name string
		want exportPlan
	}{
		{nil, "NothingSet", exportPlan{}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "Endpoint", exportPlan{Metrics: true, Traces: true}},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, "MetricsEndpoint", exportPlan{Metrics: true}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "TracesEndpoint", exportPlan{Traces: true}},
		{map[string]string{"OTEL_METRICS_EXPORTER": "otlp", "OTEL_TRACES_EXPORTER": "otlp"}, "ExporterOTLP", exportPlan{Metrics: true, Traces: true}},
		{map[string]string{"OTEL_METRICS_EXPORTER": "console"}, "ExporterConsole", exportPlan{Metrics: true}},
		{map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "MetricsPrometheusIsServedAlready", exportPlan{Traces: true}},
		{map[string]string{"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "ExporterNone", exportPlan{}},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "SDKDisabled", exportPlan{}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, "BlankEndpoint", exportPlan{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.want, exportPlanFromEnv(func(k string) string { return tt.env[k] }))
		})
	}
}

// TestNewProvidersNoPushByDefault checks that with no OTEL_* variable set
// nothing is pushed: a push to the default localhost:4318 would fail and make
// Shutdown return an error. Not parallel: it sets environment variables.
func TestNewProvidersNoPushByDefault(t *testing.T) {
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	ctx := t.Context()

	providers, err := NewProviders(ctx, Config{Role: "api"})
	require.NoError(t, err)

	inst, err := NewInstruments(providers.Meter)
	require.NoError(t, err)
	inst.WorkersAliveSet(ctx, 1)
	_, span := providers.Tracer.Tracer("test").Start(ctx, "span")
	span.End()

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	require.NoError(t, providers.Shutdown(shutdownCtx))
}

// TestNewProvidersOTLPPush checks that setting OTEL_EXPORTER_OTLP_ENDPOINT
// pushes metrics and traces over OTLP/HTTP, and that Shutdown flushes them.
// Not parallel: it sets environment variables.
func TestNewProvidersOTLPPush(t *testing.T) {
	var (
		mu    sync.Mutex
		paths = map[string]int{}
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)

	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000") // only the flush on Shutdown exports
	ctx := t.Context()

	providers, err := NewProviders(ctx, Config{Role: "worker", WorkerID: "1@host#b"})
	require.NoError(t, err)

	require.True(t, providers.SpansRecorded)
	inst, err := NewInstruments(providers.Meter)
	require.NoError(t, err)
	inst.StaleHeartbeatReaped(ctx)
	_, span := providers.Tracer.Tracer("test").Start(ctx, "chunk")
	span.End()

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	require.NoError(t, providers.Shutdown(shutdownCtx))

	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, paths["/v1/metrics"], "paths seen: %v", paths)
	require.Positive(t, paths["/v1/traces"], "paths seen: %v", paths)
}

// TestNewProvidersPropagator checks that NewProviders installs a global
// propagator carrying W3C trace context and baggage.
func TestNewProvidersPropagator(t *testing.T) {
	t.Parallel()

	providers, err := NewProviders(t.Context(), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

	require.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"}, otel.GetTextMapPropagator().Fields())
}

// Without an exporter spans are not recorded (a provider call pays for no
// span nobody reads) but still carry trace ids for logs and River metadata.
func TestNewProvidersWithoutExporterRecordsNoSpans(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	providers, err := NewProviders(t.Context(), Config{Role: "worker"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

	_, span := providers.Tracer.Tracer("test").Start(t.Context(), "call")
	defer span.End()
	require.False(t, span.IsRecording())
	require.True(t, span.SpanContext().IsValid(), "a trace id for logs and propagation")
	require.False(t, providers.SpansRecorded, "span-only instrumentation may stay off hot paths")
}

func TestProvidersShutdownTwice(t *testing.T) {
	t.Parallel()

	providers, _ := NewTestProviders()
	ctx := context.WithoutCancel(t.Context())
	require.NoError(t, providers.Shutdown(ctx))
	require.NoError(t, providers.Shutdown(ctx))
}

func TestNewTestProvidersRecordsSpans(t *testing.T) {
	t.Parallel()

	providers, spans := NewTestProviders()
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

	_, span := providers.Tracer.Tracer("test").Start(t.Context(), "chunk")
	span.End()

	ended := spans.Ended()
	require.Len(t, ended, 1)
	require.Equal(t, "chunk", ended[0].Name())
	require.True(t, providers.SpansRecorded)
}
