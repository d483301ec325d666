package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// A worker exports River's metrics, the OpenTelemetry semantic-convention
// messaging.process.duration among them (otelriver's
// EnableSemanticMetrics), once it has worked a job: every name of
// observability.RiverMetricNames, which the dashboard's River row reads,
// is served with at least one observation, the semantic one for the
// operation "work" of the system "river" and River's own by job kind.
func TestWorker_ExportsRiverSemanticMetrics(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	tel := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w, err := app.NewWorker(s.Pool, s.Env, tel, app.WorkerOptions{})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	s.WaitRequest(id, "DONE")

	// River records a job's metrics when its middleware returns, which may
	// be just after the request is DONE: wait for the observation, bounded.
	count := func(name string, labels map[string]string) float64 {
		v, err := observabilitytest.MetricValue(providers, name+"_count", labels)
		if err != nil {
			return 0
		}
		return v
	}
	semantic := map[string]string{"messaging_operation_name": "work", "messaging_system": "river"}
	apptest.WaitUntil(t, time.Minute, "messaging.process.duration to count the job", func() bool {
		return count(observability.MetricMessagingProcessDuration, semantic) >= 1
	})
	require.GreaterOrEqual(t, count(observability.MetricRiverWorkDuration, map[string]string{"kind": "buildrisk_run"}), float64(1))

	rec := httptest.NewRecorder()
	providers.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, name := range observability.RiverMetricNames {
		require.Contains(t, rec.Body.String(), name+"_count{", "/metrics serves %s", name)
	}
}
