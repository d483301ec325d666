package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// otelErrors counts the errors handed to OpenTelemetry's error handler,
// which logs each (multi-line) on its own.
type otelErrors struct {
	mu   sync.Mutex
	errs []error
}

func (h *otelErrors) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// During a database outage the gauges read from the database (job
// freshness, coverage) fail at every scrape; each source logs that once
// per outage, as the services do, not once per scrape and job, and hands
// nothing to OpenTelemetry's error handler, which would log every one.
//
// Not parallel: it replaces OpenTelemetry's global error handler while
// it runs.
func TestMetricSources_LogAnOutageOnce(t *testing.T) {
	// A database nobody answers: every read fails, as in an outage.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "postgres://radar@" + gone.Addr().String() + "/radar?connect_timeout=2"
	require.NoError(t, gone.Close())
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	env, err := config.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	var logs syncBuffer
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	tel := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	handler := &otelErrors{}
	previous := otel.GetErrorHandler()
	otel.SetErrorHandler(handler)
	t.Cleanup(func() { otel.SetErrorHandler(previous) })

	ctx := context.Background()
	app.ObserveSchedules(ctx, pool, env, tel)
	_, err = app.ObserveCoverage(ctx, pool, env, tel)
	require.NoError(t, err)

	const scrapes = 5
	for range scrapes {
		rec := httptest.NewRecorder()
		providers.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
	}

	out := logs.String()
	warnings := strings.Count(out, "level=WARN")
	require.Equal(t, 2, warnings, "one warning per source for the whole outage, not per scrape:\n%s", out)
	require.Equal(t, 1, strings.Count(out, `msg="job freshness read failed"`), out)
	require.Equal(t, 1, strings.Count(out, `msg="coverage count failed"`), out)
	handler.mu.Lock()
	require.Empty(t, handler.errs, "the sources' failures reach OpenTelemetry's error handler, which logs each")
	handler.mu.Unlock()
	// The failed counts are still counted, per job and scrape.
	failed, err := observabilitytest.MetricValue(providers, observability.MetricCoverageCheckFailures, nil)
	require.NoError(t, err)
	require.GreaterOrEqual(t, failed, float64(scrapes))
}
