package queries_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
)

// startedExecution inserts a request, an instance and an execution of job
// under worker "w" at the instance's lease epoch, moved to STARTED.
func startedExecution(t *testing.T, pool *pgxpool.Pool, job string) *queries.JobExecution {
	t.Helper()
	ctx := context.Background()
	q := queries.New()
	var requestID int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT nextval(pg_get_serial_sequence('job_request', 'id'))").Scan(&requestID))
	req, err := q.JobRequestInsert(ctx, pool, &queries.JobRequestInsertParams{ID: requestID, Job: job, Params: []byte("{}"), Source: "api"})
	require.NoError(t, err)
	inst, err := q.JobInstanceInsert(ctx, pool, &queries.JobInstanceInsertParams{Job: job, Params: []byte("{}"), ParamsHash: "h"})
	require.NoError(t, err)
	exec, err := q.JobExecutionInsert(ctx, pool, &queries.JobExecutionInsertParams{
		InstanceID: inst.ID, Job: job, RequestID: req.ID, WorkerID: "w", LeaseEpoch: inst.LeaseEpoch,
	})
	require.NoError(t, err)
	status, err := q.JobExecutionStart(ctx, pool, &queries.JobExecutionStartParams{
		ID: exec.ID, WorkerID: "w", LeaseEpoch: inst.LeaseEpoch, ChunksTotal: 1, Targets: 1,
	})
	require.NoError(t, err)
	require.Equal(t, "STARTED", status)
	exec.Status = status
	return exec
}

// waitForLockWait returns once a backend running the named sqlc query waits
// for a lock, or fails the test after a deadline.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, queryName string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%name: ' || $1 || ' %'`,
			queryName).Scan(&waiting))
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend running %s waits for a lock after 30s", queryName)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stop that arrives while the run's outcome is being committed must lose:
// it finds no running execution once the outcome commits, and the finished
// row keeps its outcome. Before the fix the stop's outer UPDATE re-checked
// only the row's id after waiting for the lock, answered with the row and
// left a COMPLETED execution STOPPING for good (the soak's seed 777).
func TestJobExecutionRequestStop_LosesToTheOutcomeBeingCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	q := queries.New()
	exec := startedExecution(t, pool, "aptTrade")

	// The run's outcome write, holding the execution's row until released.
	finish, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = finish.Rollback(ctx) }()
	n, err := q.JobExecutionFinish(ctx, finish, &queries.JobExecutionFinishParams{
		ID: exec.ID, WorkerID: "w", LeaseEpoch: exec.LeaseEpoch, Status: "COMPLETED", ExitMessage: "done",
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	type result struct {
		row *queries.JobExecution
		err error
	}
	stopped := make(chan result, 1)
	go func() {
		var r result
		r.err = pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			r.row, err = q.JobExecutionRequestStop(ctx, tx, "aptTrade")
			return err
		})
		stopped <- r
	}()
	waitForLockWait(t, pool, "JobExecutionRequestStop")
	require.NoError(t, finish.Commit(ctx))

	r := <-stopped
	require.ErrorIs(t, queries.Interpret(r.err), queries.ErrNotFound, "the stop must find no running execution; it returned %+v", r.row)
	var status string
	require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM job_execution WHERE id = $1", exec.ID).Scan(&status))
	require.Equal(t, "COMPLETED", status)
}

// A stop that reaches the row first wins the race: the outcome write then
// still finds its row (STOPPING is active) and records the outcome.
func TestJobExecutionRequestStop_BeforeTheOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	q := queries.New()
	exec := startedExecution(t, pool, "aptTrade")

	row, err := q.JobExecutionRequestStop(ctx, pool, "aptTrade")
	require.NoError(t, err)
	require.Equal(t, exec.ID, row.ID)
	require.Equal(t, "STOPPING", row.Status)
	n, err := q.JobExecutionFinish(ctx, pool, &queries.JobExecutionFinishParams{
		ID: exec.ID, WorkerID: "w", LeaseEpoch: exec.LeaseEpoch, Status: "STOPPED", ExitMessage: "stopped",
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// Two scheduler passes that see a job's schedule for the first time at the
// same instant both learn since when the job has had it: the second waits
// for the first's row and reads it, instead of finding no row (its
// statement's snapshot predates the first's commit) and failing its pass.
func TestJobScheduleSince_ConcurrentFirstPasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	q := queries.New()
	since := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	params := &queries.JobScheduleSinceParams{Job: "metrics", Spec: "@every 24h", Since: since}

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	got, err := q.JobScheduleSince(ctx, first, params)
	require.NoError(t, err)
	require.True(t, since.Equal(got))

	type result struct {
		since time.Time
		err   error
	}
	second := make(chan result, 1)
	go func() {
		later := *params
		later.Since = since.Add(time.Hour) // the second pass started later
		var r result
		r.since, r.err = q.JobScheduleSince(ctx, pool, &later)
		second <- r
	}()
	waitForLockWait(t, pool, "JobScheduleSince")
	require.NoError(t, first.Commit(ctx))
	r := <-second
	require.NoError(t, r.err, "the second pass reads the first's row")
	require.True(t, since.Equal(r.since), "since is the first pass's: %s", r.since)
}

// A part commit retried while its first attempt is still committing (the
// first attempt's statement timed out on the client, its transaction went
// on) inserts nothing and does not move the written count again: the
// retry waits for the first attempt's part and finds it taken. Before, the
// part was inserted twice and its items counted twice (items_written ran
// 4 ahead of the rows under load).
func TestJobExecutionPartCommit_RetryDuringTheFirstCommitsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	q := queries.New()
	exec := startedExecution(t, pool, "creditEval")
	params := &queries.JobExecutionPartCommitParams{
		ID: exec.ID, WorkerID: "w", LeaseEpoch: exec.LeaseEpoch, Chunk: "c0", Items: []string{"a", "b", "c", "d"},
	}

	// The first attempt: committed up to its end, not yet committed.
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck // committed below
	_, err = q.JobExecutionPartCommit(ctx, first, params)
	require.NoError(t, err)

	// The retry, on another connection, waits for it.
	retried := make(chan error, 1)
	go func() {
		_, err := q.JobExecutionPartCommit(ctx, pool, params)
		retried <- err
	}()
	waitForLockWait(t, pool, "JobExecutionPartCommit")
	require.NoError(t, first.Commit(ctx))
	select {
	case err := <-retried:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the retried part commit did not return")
	}

	var parts int
	var written int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_checkpoint_part`).Scan(&parts))
	require.NoError(t, pool.QueryRow(ctx, `SELECT items_written FROM job_execution WHERE id = $1`, exec.ID).Scan(&written))
	require.Equal(t, 1, parts, "the part is inserted once")
	require.Equal(t, int64(4), written, "its items are counted once")
}

// A chunk commit retried while its first attempt is still committing waits
// for it, then checkpoints nothing and moves no count: before, the retry
// failed the chunk on the checkpoint's primary key (23505, not transient).
func TestJobExecutionChunkCommit_RetryDuringTheFirstCommitsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	q := queries.New()
	exec := startedExecution(t, pool, "aptTrade")
	params := &queries.JobExecutionChunkCommitParams{
		ID: exec.ID, WorkerID: "w", LeaseEpoch: exec.LeaseEpoch, Chunk: "11110:202501", Targets: 5, Written: 5, ExternalCalls: 1, ChunkCalls: 1,
	}

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck // committed below
	_, err = q.JobExecutionChunkCommit(ctx, first, params)
	require.NoError(t, err)

	retried := make(chan error, 1)
	go func() {
		_, err := q.JobExecutionChunkCommit(ctx, pool, params)
		retried <- err
	}()
	waitForLockWait(t, pool, "JobExecutionChunkCommit")
	require.NoError(t, first.Commit(ctx))
	select {
	case err := <-retried:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the retried chunk commit did not return")
	}

	var checkpoints int
	var chunksDone int32
	var written int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_checkpoint`).Scan(&checkpoints))
	require.NoError(t, pool.QueryRow(ctx, `SELECT chunks_done, items_written FROM job_execution WHERE id = $1`, exec.ID).Scan(&chunksDone, &written))
	require.Equal(t, 1, checkpoints)
	require.Equal(t, int32(1), chunksDone, "the chunk is counted once")
	require.Equal(t, int64(5), written)
}
