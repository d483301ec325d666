package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
)

// failoverEnv gives the failover tests a fencing window (15 s) far longer
// than a failover (a kill and a promotion, about a second even on a loaded
// machine): the failover must cost the run a pause, never the run.
var failoverEnv = map[string]string{"BUILDRISK_HEARTBEAT_INTERVAL": "500ms", "BUILDRISK_STALE_AFTER": "30s"}

// aptTradeMonths is the 12-chunk aptTrade request of the failover tests and
// its plan's chunk keys.
const (
	failoverRegion = "11110"
	failoverFrom   = "2025-01"
	failoverTo     = "2025-12"
)

// failoverChunks returns the chunk keys of the failover tests' plan:
// REGION:YYYYMM for every month of 2025.
func failoverChunks() []string {
	keys := make([]string, 12)
	for m := range 12 {
		keys[m] = fmt.Sprintf("%s:2025%02d", failoverRegion, m+1)
	}
	return keys
}

// failoverSystem is the whole service on a replicated database, reached
// through the multi-host URL, with one worker, and the moves its shared
// DatabaseWatch reports.
type failoverSystem struct {
	*apptest.System
	pair  *pgtest.Replicated
	moves chan worker.DatabaseMove
}

func startFailoverSystem(t *testing.T, synchronous bool) *failoverSystem {
	t.Helper()
	pair, url := apptest.ReplicatedCluster(t, synchronous)
	s := apptest.New(t, &apptest.Opts{DBURL: url, Env: failoverEnv})
	s.StartWorker()
	moves := make(chan worker.DatabaseMove, 8)
	cancel := s.Tel.Database.Subscribe(func(m worker.DatabaseMove) { moves <- m })
	t.Cleanup(cancel)
	require.Zero(t, s.Metric(observability.MetricDatabaseFailovers, nil))
	return &failoverSystem{System: s, pair: pair, moves: moves}
}

// failover kills the primary and promotes the standby, then waits until
// the system has seen the move (its api probe or its worker's heartbeat
// through the multi-host URL) and returns the move and how long after the
// kill it was seen.
func (f *failoverSystem) failover(t *testing.T) (worker.DatabaseMove, time.Duration) {
	t.Helper()
	killed := time.Now()
	require.NoError(t, f.pair.Failover(context.Background()))
	promoted := time.Since(killed)
	select {
	case m := <-f.moves:
		seen := time.Since(killed)
		t.Logf("failover: primary killed, standby promoted after %s, the move seen %s after the kill: %s -> %s",
			promoted.Round(time.Millisecond), seen.Round(time.Millisecond), m.From, m.To)
		return m, seen
	case <-time.After(time.Minute):
		t.Fatalf("the system did not see the failover within a minute")
		return worker.DatabaseMove{}, 0
	}
}

// checkpointedChunks returns the chunk keys with a job_checkpoint row for
// the instance of execution id.
func (f *failoverSystem) checkpointedChunks(t *testing.T, executionID any) []string {
	t.Helper()
	rows, err := f.Pool.Query(context.Background(), `SELECT c.chunk FROM job_checkpoint c
		JOIN job_execution e ON e.instance_id = c.instance_id WHERE e.id = $1::bigint ORDER BY c.chunk`, executionID)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return keys
}

// The primary of a synchronous pair crashes in the middle of a run (an
// immediate shutdown while a provider call is in flight) and the standby is
// promoted. Every process follows through the multi-host URL, inside the
// fencing window: the run carries on in the same execution and ends
// COMPLETED with every planned chunk checkpointed and every
// provider call made once. Nothing acknowledged is lost: both requests
// answered 202 are there, one of them posted just before the crash. The
// system counts the failover once (buildrisk_database_failovers_total)
// and hands the move, same system identifier on the next timeline, to its
// subscribers.
func TestFailover_SynchronousLosesNothing(t *testing.T) {
	t.Parallel()
	f := startFailoverSystem(t, true)
	require.Equal(t, float64(1), f.Metric(observability.MetricDatabaseSyncRepl, nil), "the api's probe sees synchronous replication")

	f.Gate.Arm(4) // chunks 1-4 commit; chunk 5's call is held
	id := f.RequestAptTrade(apptest.AptTradeBody([]string{failoverRegion}, failoverFrom, failoverTo))
	apptest.Within(t, time.Minute, f.Gate.Blocked, "the fifth provider call")
	f.WaitChunksDone(id, 4)
	// A request acknowledged the instant before the crash: synchronous
	// replication keeps it.
	status, late := f.Post("/v1/jobs/rules/requests", `{}`)
	require.Equal(t, http.StatusAccepted, status, "%v", late)
	accepted := []string{id, late["requestId"].(string)}

	move, _ := f.failover(t)
	f.Gate.Open() // chunk 5's call returns; its commit goes to the new primary
	require.True(t, move.Failover(), "a promotion keeps the system identifier")
	require.Equal(t, move.From.Timeline+1, move.To.Timeline)

	done := f.WaitRequestAfterOutage(id, "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(12), exec["chunksDone"])
	require.Equal(t, failoverChunks(), f.checkpointedChunks(t, exec["id"]), "every planned chunk is checkpointed")
	apptest.RequireEachKeyOnce(t, f.System, 12)
	for _, reqID := range accepted {
		status, out := f.Get("/v1/requests/" + reqID)
		require.Equal(t, http.StatusOK, status, "request %s answered 202 before the failover: %v", reqID, out)
	}
	require.Equal(t, float64(1), f.Metric(observability.MetricDatabaseFailovers, nil), "the failover is counted once")
	require.Equal(t, float64(0), f.Metric(observability.MetricDatabaseSyncRepl, nil), "the promoted standby has no synchronous standby")
	f.NoOverlap(t)
}

// The primary of an asynchronous pair crashes while the standby lags: the
// replication link is cut after the run's first three chunks reached the
// standby, the primary then acknowledges four more alone, and is killed
// with a provider call in flight; the standby is promoted without them.
// The system counts the failover and hands it to its subscribers; and no
// run may end COMPLETED with a planned chunk missing (a chunk key of its
// plan without a job_checkpoint row): the runs re-verify their committed
// chunks against the database after a failover and redo the lost ones.
func TestFailover_AsyncLossIsCaught(t *testing.T) {
	t.Parallel()
	f := startFailoverSystem(t, false)
	require.Equal(t, float64(0), f.Metric(observability.MetricDatabaseSyncRepl, nil))
	ctx := context.Background()

	f.Gate.Arm(3) // chunks 1-3 commit, and reach the standby
	id := f.RequestAptTrade(apptest.AptTradeBody([]string{failoverRegion}, failoverFrom, failoverTo))
	apptest.Within(t, time.Minute, f.Gate.Blocked, "the fourth provider call")
	f.WaitChunksDone(id, 3)
	require.NoError(t, f.pair.CatchUp(ctx))
	require.NoError(t, f.pair.CutReplication(ctx))

	f.Gate.Rearm(3) // chunk 4's call is released; chunks 4-7 commit on the primary alone
	apptest.Within(t, time.Minute, f.Gate.Blocked, "the eighth provider call")
	f.WaitChunksDone(id, 7)
	_, out := f.Get("/v1/requests/" + id)
	acked := apptest.Execution(t, out)["chunksDone"].(float64)
	executionID := apptest.Execution(t, out)["id"]

	move, _ := f.failover(t)
	lost := acked - float64(len(f.checkpointedChunks(t, executionID))) // the run waits on the gate
	f.Gate.Open()
	require.True(t, move.Failover())
	t.Logf("%v chunks acknowledged before the failover, %v of them lost with the primary", acked, lost)
	require.Equal(t, float64(7), acked)
	require.Equal(t, float64(4), lost, "the chunks committed after the cut are gone")

	done := f.WaitRequestAfterOutage(id, "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	t.Logf("the run ended %s: %v", exec["status"], exec["exitMessage"])
	require.Equal(t, float64(1), f.Metric(observability.MetricDatabaseFailovers, nil), "the failover is counted once")
	require.Equal(t, "COMPLETED", exec["status"], "the lost chunks were done again: %v", exec["exitMessage"])
	require.Equal(t, failoverChunks(), f.checkpointedChunks(t, exec["id"]), "a COMPLETED run has every planned chunk checkpointed")
	require.Contains(t, exec["exitMessage"], "4 lost commit(s) done again")
	require.Equal(t, float64(4), f.Metric(observability.MetricCommitsLost, map[string]string{"job": "aptTrade"}), "each lost chunk counted")
	stats := f.Fake.Stats()
	t.Logf("provider calls: %d for %d chunks (each lost chunk's call made again)", stats.Total, len(failoverChunks()))
	require.Equal(t, int64(len(failoverChunks())+4), stats.Total, "only the lost chunks were paid for again")
	require.Zero(t, f.Count(`SELECT count(*) FROM job_execution e WHERE e.status = 'COMPLETED'
		AND e.chunks_total > (SELECT count(*) FROM job_checkpoint c WHERE c.instance_id = e.instance_id)`),
		"no execution ended COMPLETED with a planned chunk missing")
}
