package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtx"
)

// within waits for ch, failing the test after d.
func within(t *testing.T, d time.Duration, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// abandonRequest does to a request what the reaper does to a dead worker's.
func (s *testSystem) abandonRequest(id any, msg string) {
	s.t.Helper()
	ctx := context.Background()
	require.NoError(s.t, pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var requestID int64
		var executionID *int64
		if err := tx.QueryRow(ctx, `SELECT id, execution_id FROM job_request WHERE id = $1::bigint`, id).Scan(&requestID, &executionID); err != nil {
			return err
		}
		ok, err := request.Abandon(ctx, tx, nil, requestID, executionID, nil, msg)
		require.True(s.t, ok, "request %v was not active", id)
		return err
	}))
}

// Fencing, through the CLI: the execution of a `radar run` is set ABANDONED
// (as a reaper would) while a chunk is in flight; the run gets no further
// commit, ends saying its ownership was lost, and exits 1.
func TestFencing_CLIOwnershipLost(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, nil)
	s.gate.arm(2) // chunks 1 and 2 commit, chunk 3's call is held
	cli := startRadar(t, bin, s.processEnv(nil), "run", "aptTrade", "-p", "regions=11110", "-p", "from=2025-01", "-p", "to=2025-06")
	within(t, time.Minute, s.gate.blocked, "the third provider call")

	var requestID int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT id FROM job_request WHERE source = 'cli'`).Scan(&requestID))
	s.abandonRequest(requestID, "abandoned by the test")
	s.gate.open()

	require.Equal(t, exitFailed, cli.wait(t, time.Minute), cli.Output())
	require.Contains(t, cli.Output(), "ownership lost")
	require.Contains(t, cli.Output(), "ownership of the execution lost")
	require.Equal(t, 2, s.count("SELECT count(*) FROM job_checkpoint"), "no commit after the execution was abandoned")
	require.Equal(t, 1, s.count(`SELECT count(*) FROM job_execution WHERE status = 'ABANDONED' AND chunks_done = 2 AND exit_message = 'abandoned by the test'`))
	require.Equal(t, 1, s.count(`SELECT count(*) FROM job_request WHERE status = 'FAILED' AND message = 'abandoned by the test'`))
	require.Equal(t, 0, s.count(`SELECT count(*) FROM job_request WHERE source = 'chain'`))
}

// A run that cannot start keeps its real error: a worker of a rolling
// deploy that does not know the job fails the request with that error
// (counted as start_failed), instead of leaving it QUEUED for the reaper
// to call orphaned.
func TestWorker_StartFailureKeepsItsError(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	s.startWorkerWith(s.pool, func(_ *worker.Config, rc *batch.Config) { delete(rc.Jobs, "aptTrade") })
	id := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	out := s.waitRequest(id, "FAILED", "DONE")
	require.Equal(t, "FAILED", out["status"])
	require.Contains(t, out["message"], "the run could not start")
	require.Contains(t, out["message"], `job "aptTrade" is not registered in this process`)
	require.Equal(t, float64(1), s.metric("buildrisk_requests_failed_total", map[string]string{"job": "aptTrade", "reason": "start_failed"}))
	s.eventually("the River job to end cancelled", func() bool {
		return s.count(`SELECT count(*) FROM river_job WHERE state = 'cancelled'`) == 1
	})
}
