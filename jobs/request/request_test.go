package request_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/request"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/sql/pgtest"
)

// newStockPriceEnqueuer returns a database and an enqueuer of the one job
// stockPrice, with a River client and cleanup.
func newStockPriceEnqueuer(t *testing.T, cleanup request.CleanupFunc) (*pgxpool.Pool, *request.Enqueuer) {
	t.Helper()
	b := newStockPriceBundle(t, request.Config{Cleanup: cleanup})
	return b.pool, b.enqueuer
}

// The enqueue runs the stale cleanup only when the job has an active
// request (the cleanup finalizes only active requests, so without one it
// has nothing to do and would cost round trips on every enqueue), and reads
// the job's state again after a cleanup, so a request the cleanup freed no
// longer blocks the new one. The request row carries its River job's id.
func TestEnqueue_CleanupOnlyWithAnActiveRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// cleanups counts the cleanup's calls; freeActive makes the next one
	// finalize the job's active request, as the reaper does for a dead
	// worker's.
	var cleanups int
	var freeActive bool
	pool, enqueuer := newStockPriceEnqueuer(t, func(ctx context.Context, tx pgx.Tx, job string) error {
		cleanups++
		if !freeActive {
			return nil
		}
		_, err := tx.Exec(ctx, `WITH freed AS (
			UPDATE job_request SET status = 'FAILED', finished_at = now() WHERE job = $1 AND status IN ('QUEUED', 'RUNNING') RETURNING river_job_id)
			UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id IN (SELECT river_job_id FROM freed)`, job)
		return err
	})
	enqueue := func() (*request.EnqueueResult, error) {
		return enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	}

	first, err := enqueue()
	require.NoError(t, err)
	require.Equal(t, 0, cleanups, "no active request: nothing to clean up")
	require.NotNil(t, first.Request.RiverJobID)
	var linked int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM job_request WHERE river_job_id = $1`, *first.Request.RiverJobID).Scan(&linked))
	require.Equal(t, first.Request.ID, linked, "the request row carries its River job's id")

	_, err = enqueue()
	var dup *request.DuplicateError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, first.Request.ID, dup.ActiveRequestID)
	require.Equal(t, 1, cleanups, "an active request may be a dead worker's: the cleanup runs")

	freeActive = true
	second, err := enqueue()
	require.NoError(t, err, "the cleanup freed the active request: the state is read again")
	require.Equal(t, 2, cleanups)
	require.NotEqual(t, first.Request.ID, second.Request.ID)
}

// River's INSERT goes with the enqueue's first round trip, before the job's
// state is known. When that state calls for the stale cleanup, the cleanup
// still runs before this request's River job exists: an automatic resume it
// inserts must find River's unique slot as the stale request left it.
func TestEnqueue_CleanupSeesNoRiverJobOfTheNewRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	liveRiverJobs := -1
	pool, enqueuer := newStockPriceEnqueuer(t, func(ctx context.Context, tx pgx.Tx, job string) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'job' = $1 AND finalized_at IS NULL`, job).Scan(&liveRiverJobs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE job_request SET status = 'FAILED', finished_at = now() WHERE job = $1 AND status IN ('QUEUED', 'RUNNING')`, job)
		return err
	})
	enqueue := func() (*request.EnqueueResult, error) {
		return enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	}
	first, err := enqueue()
	require.NoError(t, err)
	// A stale request whose River job is gone already (cancelled), so River's
	// unique slot is free and the next enqueue's early INSERT succeeds.
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, *first.Request.RiverJobID)
	require.NoError(t, err)

	second, err := enqueue()
	require.NoError(t, err)
	require.Zero(t, liveRiverJobs, "the cleanup ran before this request's River job was inserted")
	var args jobs.RunArgs
	require.NoError(t, pool.QueryRow(ctx, `SELECT args FROM river_job WHERE id = $1`, *second.Request.RiverJobID).Scan(&args))
	require.Equal(t, second.Request.ID, args.RequestID, "the River job inserted after the cleanup carries its request's id")
	var riverJobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&riverJobs))
	require.Equal(t, 2, riverJobs, "the early River job was withdrawn, not left behind")
}

// An enqueue of a job without an active request is one round trip from
// its BEGIN (created_at) to its COMMIT: the job's lock, River's INSERT and
// the request row, which the server decides on (the restart rule, the link
// to the River job), travel with both. The job's notification is delivered
// at that COMMIT (a trigger); River's own NOTIFY follows it, on its own.
// Each round trip is pickup latency, so they are pinned here.
func TestEnqueue_RoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	pool := pgtest.NewTracedPool(t, pgtest.NewPool(t), tracer)
	providers, _ := observability.NewTestProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	// Two clients on one driver: River spaces one client's insert
	// notifications (by its FetchCooldown), so the measured enqueue goes
	// through a client that has not notified yet.
	driver := riverpgxv5.New(pool)
	newEnqueuer := func() *request.Enqueuer {
		riverClient, err := river.NewClient(driver, &river.Config{FetchCooldown: river.FetchCooldownMin})
		require.NoError(t, err)
		enqueuer, err := request.NewEnqueuer(pool, riverClient, request.Config{
			Catalog: jobs.NewCatalog(
				&jobs.Spec[noParams]{JobName: "stockPrice", Desc: "test job"},
				&jobs.Spec[noParams]{JobName: "filingParse", Desc: "test job"},
			),
			Instruments: instruments,
			Cleanup:     func(context.Context, pgx.Tx, string) error { return nil },
		})
		require.NoError(t, err)
		return enqueuer
	}
	// The first enqueue prepares the statements and lets River read the
	// server's version; the second is the steady state.
	_, err = newEnqueuer().Enqueue(ctx, &request.EnqueueParams{Job: "filingParse", Params: []byte("{}"), Source: request.SourceAPI})
	require.NoError(t, err)
	tracer.Reset()
	res, err := newEnqueuer().Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	require.NoError(t, err)
	require.NotNil(t, res.Request.RiverJobID)

	trips := tracer.Log()
	require.Len(t, trips, 2, "%q", trips)
	one := trips[0]
	require.True(t, strings.HasPrefix(one, "batch: begin isolation level read committed; "), "BEGIN travels with the lock, River's INSERT and the request row: %q", one)
	require.True(t, strings.HasSuffix(one, "; commit"), "... and with the COMMIT: %q", one)
	lock, insert, row := strings.Index(one, "pg_advisory_xact_lock"), strings.Index(one, "INSERT INTO river_job"), strings.Index(one, "-- name: JobRequestInsertDecided")
	require.True(t, lock > 0 && insert > lock && row > insert, "the lock, then River's INSERT, then the request row that links it: %q", one)
	require.NotContains(t, one, "job_request_enqueue_state", "the server decides: no state read for the client")
	require.Contains(t, trips[1], "pg_notify", "River's NOTIFY follows the COMMIT")
	require.NotContains(t, trips[1], "commit", "River's NOTIFY is its own statement, after the transaction")
	require.NotContains(t, strings.Join(trips, " "), "UPDATE river_job", "the River job is written once (its fetch writes the request id into its args)")

	var args jobs.RunArgs
	require.NoError(t, pool.QueryRow(ctx, `SELECT args FROM river_job WHERE id = $1`, *res.Request.RiverJobID).Scan(&args))
	require.Equal(t, jobs.RunArgs{Job: "stockPrice"}, args, "the args get the request id at the fetch")
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM job_request WHERE id = $1 AND river_job_id = $2`, res.Request.ID, *res.Request.RiverJobID).Scan(&status))
	require.Equal(t, request.StatusQueued, status, "committed, linked to its River job")
}

// When River holds an active job of the name that no active request owns,
// the one-round-trip enqueue cannot link a job (River skipped its insert as
// a duplicate and took a new id anyway): the server refuses, everything
// rolls back, and the client-side path answers with the duplicate. No
// request is written, least of all one linked to a River job that does not
// exist.
func TestEnqueue_RiverSlotHeldWithoutARequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, enqueuer := newStockPriceEnqueuer(t, nil)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	held, err := riverClient.Insert(ctx, jobs.RunArgs{Job: "stockPrice"}, nil)
	require.NoError(t, err)
	require.False(t, held.UniqueSkippedAsDuplicate)

	_, err = enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	var dup *request.DuplicateError
	require.ErrorAs(t, err, &dup, "River's unique slot is taken")
	var requests, riverJobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_request`).Scan(&requests))
	require.Zero(t, requests, "no request was written")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&riverJobs))
	require.Equal(t, 1, riverJobs, "only the job that held the slot")
}

// A buildrisk_run job is announced at the COMMIT that inserts it, in the
// message River's producers listen for (topic river_insert under the
// current schema, the queue as JSON), whoever inserts it: here a plain
// INSERT that no River client notifies for.
func TestEnqueue_RunJobAnnouncedAtCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool := pgtest.NewPool(t)
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN "public.river_insert"`)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES ('{"job": "stockPrice"}', 'buildrisk_run', 1, 'default', 'available')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES ('{}', 'other_kind', 1, 'default', 'available')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at) VALUES ('{"job": "filingParse"}', 'buildrisk_run', 1, 'default', 'scheduled', now() + interval '1 hour')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	// A later transaction's notification marks the end: the server
	// delivers notifications in commit order.
	_, err = pool.Exec(ctx, `SELECT pg_notify('public.river_insert', 'end')`)
	require.NoError(t, err)
	var payloads []string
	for {
		n, err := listener.Conn().WaitForNotification(ctx)
		require.NoError(t, err, "the notifications arrive before the deadline")
		require.Equal(t, "public.river_insert", n.Channel)
		if n.Payload == "end" {
			break
		}
		payloads = append(payloads, n.Payload)
	}
	require.Len(t, payloads, 1, "one announcement: not for another kind, nor for a job that is not available yet")
	require.JSONEq(t, `{"queue": "default"}`, payloads[0])
}

// A River client's first insert reads the server's version before its
// INSERT, so that statement, not the INSERT, carries the one-round-trip
// batch: the request row finds no River job of the transaction, everything
// rolls back (River's INSERT is refused, not run after the rollback), and
// the client-side path enqueues. Exactly one River job and one request,
// linked, and the refusal drew no request id: a fresh database's first
// request is request 1 (as the README's walk-through shows).
func TestEnqueue_FirstInsertOfAFreshRiverClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, enqueuer := newStockPriceEnqueuer(t, nil) // a River client that has not inserted yet
	res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: request.SourceAPI})
	require.NoError(t, err)
	var riverJobs int
	var linked int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), max(id) FROM river_job`).Scan(&riverJobs, &linked))
	require.Equal(t, 1, riverJobs, "one River job, inserted inside the transaction that committed")
	require.Equal(t, linked, *res.Request.RiverJobID)
	require.Equal(t, int64(1), res.Request.ID, "the refused round trip drew no id")
}
