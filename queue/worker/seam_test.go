package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// telemetry is a test's private instruments and the providers to read them
// back from (observabilitytest.MetricValue).
type telemetry struct {
	providers   *observability.Providers
	instruments *observability.Instruments
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	return &telemetry{providers: providers, instruments: instruments}
}

func (tel *telemetry) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := observabilitytest.MetricValue(tel.providers, name, labels)
	require.NoError(t, err)
	return v
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitServerUptime returns once the database server has been up for longer
// than d by its own clock. The reaper counts a heartbeat from the server's
// start at the earliest (a worker cannot beat while the server is down), so
// a worker is stale only on a server up for longer than the stale window;
// the cluster of a test binary may have just started.
func waitServerUptime(t *testing.T, pool *pgxpool.Pool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d + time.Minute)
	for {
		var up bool
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT now() - pg_postmaster_start_time() > make_interval(secs => $1)`, d.Seconds()).Scan(&up))
		if up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database server is not up for %s after a minute more", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
