package request_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/request"
	"github.com/buildrisk/radar/queries"
)

// heldWorker hands each job's request id to fetched and holds the job
// until release is closed.
type heldWorker struct {
	river.WorkerDefaults[jobs.RunArgs]
	fetched chan int64
	release chan struct{}
}

func (w *heldWorker) Work(ctx context.Context, job *river.Job[jobs.RunArgs]) error {
	w.fetched <- job.Args.RequestID
	select {
	case <-w.release:
	case <-ctx.Done():
	}
	return nil
}

// enqueueStockPrice enqueues one stockPrice request on a database of its
// own and returns the database and the request.
func enqueueStockPrice(t *testing.T) (*pgxpool.Pool, *request.EnqueueResult) {
	t.Helper()
	pool, enqueuer := newStockPriceEnqueuer(t, nil)
	res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	require.NoError(t, err)
	return pool, res
}

// River's fetch claims the request in the same statement: the request is
// the fetching worker's, claimed at the fetch's time, before the worker has
// run a statement of its own (it stays QUEUED until the worker starts the
// run), and the args River hands the worker carry the request's id, which
// the enqueue could not write.
func TestFetch_ClaimsTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, res := enqueueStockPrice(t)

	held := &heldWorker{fetched: make(chan int64, 1), release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.Worker[jobs.RunArgs](held))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID: "worker-a", Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })
	defer close(held.release)

	select {
	case id := <-held.fetched:
		require.Equal(t, res.Request.ID, id, "the args River's fetch returns carry the request's id")
	case <-time.After(30 * time.Second):
		t.Fatal("the worker was never handed the job")
	}
	var status, workerID string
	var executionID *int64
	var claimedAt, attemptedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT r.status, r.worker_id, r.execution_id, r.claimed_at, j.attempted_at
		FROM job_request r JOIN river_job j ON j.id = r.river_job_id WHERE r.id = $1`, res.Request.ID).
		Scan(&status, &workerID, &executionID, &claimedAt, &attemptedAt))
	require.Equal(t, request.StatusQueued, status, "RUNNING once the worker starts the run")
	require.Equal(t, "worker-a", workerID, "claimed by the fetch, while the worker has not run a statement")
	require.Nil(t, executionID, "the worker creates the execution when it starts the run")
	require.True(t, claimedAt.Equal(attemptedAt), "claimed at the fetch: claimed_at %s, attempted_at %s", claimedAt, attemptedAt)
}

// A request claimed at its River job's fetch but not started belongs to
// nobody once River holds the job again (its worker snoozed it, fenced
// before it could start): the reapers leave it for the next fetch, which
// claims it for its own worker. Until then, a dead fetcher's claim is
// reaped, and so is a claim whose River job ended without running it.
func TestFetch_SnoozedClaimWaitsForTheNextFetch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, res := enqueueStockPrice(t)
	riverJobID := *res.Request.RiverJobID
	q := queries.New()

	// fetch moves the River job to running for workerID as River's fetch
	// does (state, attempt, attempted_at, attempted_by in one UPDATE).
	fetch := func(workerID string) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(),
			attempted_by = array_append(attempted_by, $2::text) WHERE id = $1`, riverJobID, workerID)
		require.NoError(t, err)
	}
	listed := func() (stale, orphaned, previousBoot bool) {
		t.Helper()
		staleRows, err := q.JobRequestListStale(ctx, pool, &queries.JobRequestListStaleParams{StaleSeconds: 60})
		require.NoError(t, err)
		orphanRows, err := q.JobRequestListOrphaned(ctx, pool, &queries.JobRequestListOrphanedParams{StaleSeconds: 60})
		require.NoError(t, err)
		bootRows, err := q.JobRequestListPreviousBoot(ctx, pool, &queries.JobRequestListPreviousBootParams{SlotPrefix: "1@host#%", CurrentID: "1@host#new"})
		require.NoError(t, err)
		return len(staleRows) == 1, len(orphanRows) == 1, len(bootRows) == 1
	}
	claimedBy := func() string {
		t.Helper()
		var status, workerID string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, worker_id FROM job_request WHERE id = $1`, res.Request.ID).Scan(&status, &workerID))
		require.Equal(t, request.StatusQueued, status)
		return workerID
	}

	// Fetched by a worker that never registered (dead): its claim is stale.
	fetch("1@host#old")
	require.Equal(t, "1@host#old", claimedBy())
	stale, _, previousBoot := listed()
	require.True(t, stale, "a dead fetcher's claim is reaped")
	require.True(t, previousBoot, "a restarted slot's claim is reaped")

	// Snoozed: River holds the job again; nobody holds the request.
	_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 minute' WHERE id = $1`, riverJobID)
	require.NoError(t, err)
	stale, orphaned, previousBoot := listed()
	require.False(t, stale, "a snoozed claim is left for the next fetch")
	require.False(t, orphaned, "a snoozed claim is left for the next fetch")
	require.False(t, previousBoot, "a snoozed claim is left for the next fetch")

	// The next fetch claims it for its own worker.
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'available' WHERE id = $1`, riverJobID)
	require.NoError(t, err)
	fetch("worker-b")
	require.Equal(t, "worker-b", claimedBy(), "the next fetch claims it again")

	// Its River job ends without running it: orphaned.
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, riverJobID)
	require.NoError(t, err)
	_, orphaned, _ = listed()
	require.True(t, orphaned, "a claim whose River job ended without running it is orphaned")
}
