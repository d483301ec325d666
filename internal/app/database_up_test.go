package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// buildrisk_database_up follows the database in the api (its probe) and in
// a worker (its heartbeat), each with telemetry of its own: 1 while the
// database answers, 0 within a few probe intervals of an outage, with
// /metrics still answering 200, and 1 again once the database is back.
func TestDatabaseUp_FollowsAnOutage(t *testing.T) {
	t.Parallel()
	cluster, url := apptest.PrivateCluster(t)
	s := apptest.New(t, &apptest.Opts{DBURL: url})

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	workerTel := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w, err := app.NewWorker(s.Pool, s.Env, workerTel, app.WorkerOptions{})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	apiUp := func() float64 { return s.Metric(observability.MetricDatabaseUp, nil) }
	workerUp := func() float64 {
		v, err := observabilitytest.MetricValue(providers, observability.MetricDatabaseUp, nil)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, float64(1), apiUp(), "the api records 1 once its pool has connected")
	require.Equal(t, float64(1), workerUp(), "the worker records 1 once it has registered")

	require.NoError(t, cluster.Halt())
	halted := time.Now()
	apptest.WaitUntil(t, 30*time.Second, "the api's gauge to read 0", func() bool { return apiUp() == 0 })
	apptest.WaitUntil(t, 30*time.Second, "the worker's gauge to read 0", func() bool { return workerUp() == 0 })
	t.Logf("both gauges read 0 %s after the halt (probe interval %s)", time.Since(halted).Round(time.Millisecond), s.Env.HeartbeatInterval)

	// /metrics needs no database for the gauge: it answers with the 0.
	resp, err := http.Get(s.API.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	v, ok := apptest.MetricLine(string(body), observability.MetricDatabaseUp)
	require.True(t, ok, "/metrics lists %s while the database is down", observability.MetricDatabaseUp)
	require.Equal(t, float64(0), v)

	require.NoError(t, cluster.Resume(context.Background()))
	apptest.WaitUntil(t, time.Minute, "the api's gauge to read 1 again", func() bool { return apiUp() == 1 })
	apptest.WaitUntil(t, time.Minute, "the worker's gauge to read 1 again", func() bool { return workerUp() == 1 })
}
