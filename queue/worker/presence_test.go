package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// presenceConfig is a worker's config whose heartbeat service never beats
// on its own during a test (every hour) and whose fence never falls: each
// heartbeat the test sees is one it asked for (SetStatus, Stop).
func presenceConfig(id string, tel *observabilitytest.Telemetry) worker.Config {
	return worker.Config{
		ID: id, Hostname: "presence-host", PID: 5, Boot: "b1", Version: "v-test",
		ConfiguredKeys: []string{"BUILDRISK_KEY_KRX"}, DailyCaps: map[string]int{"KRX": 7},
		HeartbeatInterval: time.Hour, StaleAfter: 3 * time.Hour,
		Instruments: tel.Instruments, Logger: discardLogger(),
	}
}

// heartbeatAge returns how old the worker's heartbeat is by the database's
// clock.
func heartbeatAge(t *testing.T, pool *pgxpool.Pool, id string) time.Duration {
	t.Helper()
	var seconds float64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM now() - heartbeat_at)::float8 FROM worker WHERE id = $1`, id).Scan(&seconds))
	return time.Duration(seconds * float64(time.Second))
}

// A process's presence registers its row (id, slot, version, the keys and
// caps it holds), and each heartbeat refreshes the row's heartbeat_at and
// status: a worker whose heartbeat was an hour old beats again at once. A
// row removed meanwhile (the retention pass) is registered again by the
// next heartbeat, and Stop records the process stopped.
func TestPresence_RegistersAndHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tel := newTelemetry(t)
	const id = "5@presence-host#b1"
	p, err := worker.StartPresence(ctx, pool, presenceConfig(id, tel))
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			p.Stop(context.Background())
		}
	})

	q := queries.New()
	row, err := q.WorkerGetByID(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, "presence-host", row.Hostname)
	require.Equal(t, int32(5), row.Pid)
	require.Equal(t, "b1", row.Boot)
	require.Equal(t, "running", row.Status)
	require.Equal(t, "v-test", row.Version)
	require.Equal(t, []string{"BUILDRISK_KEY_KRX"}, row.ConfiguredKeys)
	var caps map[string]int
	require.NoError(t, json.Unmarshal(row.DailyCaps, &caps))
	require.Equal(t, map[string]int{"KRX": 7}, caps)
	require.Less(t, heartbeatAge(t, pool, id), time.Minute)
	require.Equal(t, float64(1), tel.Metric(t, observability.MetricDatabaseUp, nil))

	// An hour without a heartbeat, then one: the row is fresh again.
	testfactory.WorkerHeartbeatAge(ctx, t, pool, id, time.Hour)
	require.Greater(t, heartbeatAge(t, pool, id), 59*time.Minute)
	p.SetStatus(ctx, radartype.WorkerDraining)
	require.Less(t, heartbeatAge(t, pool, id), time.Minute)
	row, err = q.WorkerGetByID(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, "draining", row.Status)
	require.Equal(t, radartype.WorkerDraining, p.Status())

	// The retention pass removes the silent row; the next heartbeat
	// registers the process again, in full.
	testfactory.WorkerHeartbeatAge(ctx, t, pool, id, time.Hour)
	n, err := q.WorkerDeleteExpired(ctx, pool, time.Minute.Seconds())
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	p.SetStatus(ctx, radartype.WorkerRunning)
	row, err = q.WorkerGetByID(ctx, pool, id)
	require.NoError(t, err, "the heartbeat registers a removed row again")
	require.Equal(t, "running", row.Status)
	require.Equal(t, "v-test", row.Version)
	require.Less(t, heartbeatAge(t, pool, id), time.Minute)

	require.NoError(t, p.FenceError())
	select {
	case <-p.Fenced():
		t.Fatal("a process whose heartbeats succeed is not fenced")
	default:
	}

	p.Stop(ctx)
	stopped = true
	row, err = q.WorkerGetByID(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, "stopped", row.Status)
}

// A heartbeat that cannot reach the database is reported (database_up 0)
// and marks the process's link cut, so its reaper waits a stale window
// once the link is back; the process is not fenced before FenceAfter.
func TestPresence_FailedHeartbeatCutsTheLink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	tel := newTelemetry(t)
	cfg := presenceConfig("6@presence-host#b2", tel)
	cfg.Reachability = request.NewReachability()
	p, err := worker.StartPresence(ctx, pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(context.Background()) })
	require.Zero(t, cfg.Reachability.Wait(time.Hour))

	pool.Close() // every call from now on fails at once: a cut link
	p.SetStatus(ctx, radartype.WorkerDraining)
	require.Zero(t, tel.Metric(t, observability.MetricDatabaseUp, nil))
	require.Equal(t, time.Hour, cfg.Reachability.Wait(time.Hour), "a reaper of this process waits while its link is cut")
	require.NoError(t, p.FenceError(), "the fence falls only FenceAfter after the last successful heartbeat")
}
