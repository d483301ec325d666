package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// The gauges say what the rows say: live workers are those not stopped
// whose heartbeat is inside the stale window, and each job's queue age is
// its oldest QUEUED request's by the database's clock, 0 for a job with
// nothing queued (a RUNNING request is not queued), and back to 0 once the
// request leaves the queue.
func TestGauges_ReportWhatTheRowsSay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tel := newTelemetry(t)
	for _, w := range []*testfactory.WorkerOpts{
		{Status: radartype.WorkerRunning},
		{Status: radartype.WorkerRunning, HeartbeatAge: 30 * time.Second},
		{Status: radartype.WorkerDraining},
		{Status: radartype.WorkerStopped},                          // stopped: not alive
		{Status: radartype.WorkerRunning, HeartbeatAge: time.Hour}, // silent: not alive
	} {
		testfactory.Worker(ctx, t, pool, w)
	}
	apt := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "aptTrade", CreatedAge: 90 * time.Minute})
	testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "stockPrice", CreatedAge: 2 * time.Minute})
	testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "filingParse", Status: radartype.RequestRunning, CreatedAge: 3 * time.Hour})
	testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "rules", Status: radartype.RequestDone, CreatedAge: 5 * time.Hour})
	gauges := &worker.Gauges{
		Pool: pool, Jobs: []string{"aptTrade", "stockPrice", "filingParse", "rules"},
		StaleAfter: time.Minute, Instruments: tel.Instruments,
	}

	require.NoError(t, gauges.Record(ctx))
	require.Equal(t, float64(3), tel.Metric(t, observability.MetricWorkersAlive, nil))
	age := func(job string) float64 {
		return tel.Metric(t, observability.MetricQueueOldestAge, map[string]string{"job": job})
	}
	// The ages grow while the test runs: bounds, not equalities.
	require.GreaterOrEqual(t, age("aptTrade"), (90 * time.Minute).Seconds())
	require.Less(t, age("aptTrade"), (100 * time.Minute).Seconds())
	require.GreaterOrEqual(t, age("stockPrice"), (2 * time.Minute).Seconds())
	require.Less(t, age("stockPrice"), (12 * time.Minute).Seconds())
	require.Zero(t, age("filingParse"), "a RUNNING request is not queued")
	require.Zero(t, age("rules"), "nothing queued")

	testfactory.FinishRequest(ctx, t, pool, apt.ID, radartype.RequestFailed, "gone")
	testfactory.WorkerHeartbeatAge(ctx, t, pool, "", time.Hour)
	require.NoError(t, gauges.Record(ctx))
	require.Zero(t, age("aptTrade"), "an emptied queue reads 0, not its last age")
	require.Zero(t, tel.Metric(t, observability.MetricWorkersAlive, nil))
}
