package request_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// newStockPriceEnqueuer returns a database and an owner of the one job
// stockPrice, with a River client.
func newStockPriceEnqueuer(t *testing.T) (*pgxpool.Pool, *request.Owner) {
	t.Helper()
	b := newStockPriceBundle(t, request.Config{})
	return b.pool, b.enqueuer
}

// reapPasses counts the round trips of a trace that list stale requests
// (a reap's first statement; its first use is prepared, then sent).
func reapPasses(tracer *pgtest.RoundTripTracer) int {
	n := 0
	for _, trip := range tracer.Log() {
		n += strings.Count(trip, "-- name: JobRequestListStale")
	}
	return n
}

// The enqueue reaps the job's dead runs only when the job has an active
// request (a reap finalizes only active requests, so without one it has
// nothing to do and would cost round trips on every enqueue), and reads
// the job's state again after it, so a request the reap freed no longer
// blocks the new one. The request row carries its River job's id.
func TestEnqueue_CleanupOnlyWithAnActiveRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	b := newStockPriceBundle(t, request.Config{StaleAfter: 2 * time.Second})
	pgtest.WaitServerUptime(t, b.pool, 2*time.Second)
	pool := pgtest.NewTracedPool(t, b.pool, tracer)
	enqueuer, err := request.NewOwner(pool, b.river, request.Config{Catalog: b.jobCatalog, Instruments: b.instruments, StaleAfter: 2 * time.Second})
	require.NoError(t, err)
	enqueue := func() (*request.EnqueueResult, error) {
		return enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	}

	first, err := enqueue()
	require.NoError(t, err)
	require.Zero(t, reapPasses(tracer), "no active request: nothing to reap")
	require.NotNil(t, first.Request.RiverJobID)
	var linked int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM job_request WHERE river_job_id = $1`, *first.Request.RiverJobID).Scan(&linked))
	require.Equal(t, first.Request.ID, linked, "the request row carries its River job's id")

	// The active request is claimed by a worker that died: the next
	// enqueue reaps it under the job's lock and goes on.
	dead := testfactory.Worker(ctx, t, b.pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	_, err = queries.New().JobRequestClaim(ctx, b.pool, &queries.JobRequestClaimParams{ID: first.Request.ID, WorkerID: &dead.ID})
	require.NoError(t, err)
	second, err := enqueue()
	require.NoError(t, err, "the reap freed the active request: the state is read again")
	require.Positive(t, reapPasses(tracer), "an active request may be a dead worker's: the enqueue reaps")
	require.NotEqual(t, first.Request.ID, second.Request.ID)
	got, err := queries.New().JobRequestGetByID(ctx, b.pool, first.Request.ID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", got.Status)
	require.Equal(t, rivertype.JobStateCancelled, b.riverState(t, *first.Request.RiverJobID), "the reaped request's River job ends with it")
}

// ownStatement reports whether a traced statement is one of the project's
// own (a sqlc query of package queries: its "-- name: X" is in queries/).
func ownStatement(t *testing.T, statement string) bool {
	t.Helper()
	names := ownQueryNames(t)
	for _, m := range regexp.MustCompile(`-- name: (\w+)`).FindAllStringSubmatch(statement, -1) {
		if !names[m[1]] {
			return false
		}
	}
	return strings.Contains(statement, "-- name: ")
}

// ownQueryNames returns the names of the project's sqlc queries.
func ownQueryNames(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	names := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^-- name: (\w+)`).FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names
}

// The enqueue is one transaction of the project's own statements and River's
// public InsertTx, in this order: BEGIN with the job's lock and its state,
// River's insert (whatever statements River sends: they are River's, bound
// by its public API, and marked here by a middleware around InsertTx), the
// request row, COMMIT. Nothing else touches River's tables, and the River
// job's args carry the request id from the start.
func TestEnqueue_OneTransactionOfOwnStatementsAndRiversInsertTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	pool := pgtest.NewTracedPool(t, pgtest.NewPool(t), tracer)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	var inInsert atomic.Bool
	marker := river.JobInsertMiddlewareFunc(func(ctx context.Context, many []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
		inInsert.Store(true)
		defer inInsert.Store(false)
		return doInner(ctx)
	})
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{marker}})
	require.NoError(t, err)
	enqueuer, err := request.NewOwner(pool, riverClient, request.Config{
		Catalog: catalog.NewCatalog(
			&catalog.Spec[noParams]{JobName: "stockPrice", Desc: "test job"},
			&catalog.Spec[noParams]{JobName: "filingParse", Desc: "test job"},
		),
		Instruments: instruments,
	})
	require.NoError(t, err)
	// The first enqueue prepares the statements and lets River read the
	// server's version; the second is the steady state.
	_, err = enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "filingParse", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)

	type trip struct {
		statement string
		river     bool
	}
	var trips []trip
	tracer.Reset()
	tracer.OnTrip = func(statement string) { trips = append(trips, trip{statement, inInsert.Load()}) }
	res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	tracer.OnTrip = nil
	require.NoError(t, err)
	require.NotNil(t, res.Request.RiverJobID)

	require.GreaterOrEqual(t, len(trips), 5, "%q", trips)
	begin, state, last := trips[0], trips[1], trips[len(trips)-1]
	require.Equal(t, "begin isolation level read committed", begin.statement)
	require.True(t, strings.HasPrefix(state.statement, "batch: "), "the lock and the state travel together: %q", state.statement)
	require.Contains(t, state.statement, "-- name: JobLockUnlessSettled")
	require.Contains(t, state.statement, "-- name: JobRequestEnqueueState")
	require.Equal(t, "commit", last.statement)
	phase := "state"
	for _, tr := range trips[2 : len(trips)-1] {
		switch {
		case tr.river:
			require.Equal(t, "state", phase, "River's InsertTx runs once, right after the state: %q", trips)
			require.Contains(t, tr.statement, "river_job", "River's statements inside InsertTx: %q", tr.statement)
		case ownStatement(t, tr.statement):
			require.Contains(t, tr.statement, "-- name: JobRequestInsert ", "the only own statement after the state is the request row")
			phase = "request"
		default:
			t.Fatalf("a statement that is neither the project's nor River's InsertTx: %q", tr.statement)
		}
	}
	require.Equal(t, "request", phase, "the request row is written: %q", trips)
	riverTable := regexp.MustCompile(`\briver_(job|leader|queue|client|client_queue|migration)\b`)
	for _, tr := range trips {
		if !tr.river {
			require.False(t, riverTable.MatchString(tr.statement), "the project's own statements leave River's tables alone: %q", tr.statement)
		}
	}

	var args catalog.RequestArgs
	require.NoError(t, pool.QueryRow(ctx, `SELECT args FROM river_job WHERE id = $1`, *res.Request.RiverJobID).Scan(&args))
	require.Equal(t, catalog.RequestArgs{Job: "stockPrice", RequestID: res.Request.ID}, args, "the River job carries its request's id from its insert")
}

// A duplicate (409) draws no request id and inserts no River job: the next
// accepted request takes the next id.
func TestEnqueue_DuplicateDrawsNoID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, enqueuer := newStockPriceEnqueuer(t)
	enqueue := func() (*request.EnqueueResult, error) {
		return enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	}
	first, err := enqueue()
	require.NoError(t, err)
	require.Equal(t, int64(1), first.Request.ID, "a fresh database's first request is request 1")
	for range 3 {
		_, err = enqueue()
		var dup *request.DuplicateError
		require.ErrorAs(t, err, &dup)
		require.Equal(t, first.Request.ID, dup.ActiveRequestID)
	}
	testfactory.FinishRequest(ctx, t, pool, first.Request.ID, radartype.RequestDone, "")
	second, err := enqueue()
	require.NoError(t, err)
	require.Equal(t, int64(2), second.Request.ID, "the three duplicates drew no id")
	var riverJobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&riverJobs))
	require.Equal(t, 2, riverJobs, "a duplicate inserts no River job")
}

// A duplicate (409) of an active request that the stale cleanup could not
// free takes no advisory lock: a burst of 200 duplicates while the run's
// start holds the job's lock (as the runner's start does) all answer 409
// without waiting for it, whether the request is still QUEUED with its River
// job available or RUNNING under a live worker, so they never queue ahead
// of the run's start; each sends one lock statement (JobLockUnlessSettled,
// in its BEGIN batch) and no other. A duplicate whose holder is stale waits
// for the lock, takes it once and runs the cleanup under it.
func TestEnqueue_DuplicateBurstTakesNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	base := pgtest.NewPool(t)
	pool := pgtest.NewTracedPool(t, base, tracer)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	jobCatalog := catalog.NewCatalog(&catalog.Spec[noParams]{JobName: "stockPrice", Desc: "test job"})
	enqueuer, err := request.NewOwner(pool, riverClient, request.Config{Catalog: jobCatalog, Instruments: instruments, StaleAfter: time.Minute})
	require.NoError(t, err)
	enqueueWith := func(ctx context.Context, owner *request.Owner) (*request.EnqueueResult, error) {
		return owner.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	}
	enqueue := func(ctx context.Context) error {
		_, err := enqueueWith(ctx, enqueuer)
		return err
	}
	require.NoError(t, enqueue(ctx))
	var active int64
	require.NoError(t, base.QueryRow(ctx, `SELECT id FROM job_request WHERE status = 'QUEUED'`).Scan(&active))
	lockStatements := func() (conditional, plain int) {
		for _, trip := range tracer.Log() {
			conditional += strings.Count(trip, "-- name: JobLockUnlessSettled")
			plain += strings.Count(trip, "-- name: AdvisoryXactLockJob")
		}
		return conditional, plain
	}
	holdLock := func(t *testing.T) pgx.Tx {
		t.Helper()
		runStart, err := base.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = runStart.Rollback(ctx) })
		require.NoError(t, queries.New().AdvisoryXactLockJob(ctx, runStart, "stockPrice"))
		return runStart
	}
	// burst sends 200 duplicates at once while another connection holds the
	// job's lock, as the run's start does; each must answer before the
	// deadline, which only a lock-free answer can.
	burst := func(t *testing.T) {
		holdLock(t)
		tracer.Reset()
		deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		errs := make([]error, 200)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = enqueue(deadline) })
		}
		wg.Wait()
		for _, err := range errs {
			var dup *request.DuplicateError
			require.ErrorAs(t, err, &dup)
			require.Equal(t, active, dup.ActiveRequestID)
		}
		conditional, plain := lockStatements()
		require.Equal(t, 200, conditional, "one conditional lock statement per duplicate")
		require.Zero(t, plain)
		require.Zero(t, reapPasses(tracer), "nothing a reap could free")
	}

	t.Run("Queued", burst)

	holder := testfactory.Worker(ctx, t, base, &testfactory.WorkerOpts{ID: "1@host#b"})
	_, err = queries.New().JobRequestClaim(ctx, base, &queries.JobRequestClaimParams{ID: active, WorkerID: &holder.ID})
	require.NoError(t, err)
	t.Run("RunningUnderLiveWorker", burst)

	testfactory.WorkerHeartbeatAge(ctx, t, base, holder.ID, time.Hour)
	t.Run("StaleHolderWaitsForTheLock", func(t *testing.T) {
		// A stale window the test's cluster has been up for: the holder,
		// silent for an hour, is dead.
		pgtest.WaitServerUptime(t, base, 2*time.Second)
		reaper, err := request.NewOwner(pool, riverClient, request.Config{Catalog: jobCatalog, Instruments: instruments, StaleAfter: 2 * time.Second})
		require.NoError(t, err)
		runStart := holdLock(t)
		tracer.Reset()
		type answer struct {
			res *request.EnqueueResult
			err error
		}
		answered := make(chan answer, 1)
		go func() {
			res, err := enqueueWith(ctx, reaper)
			answered <- answer{res, err}
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			require.NoError(t, base.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&waiting))
			if waiting == 1 {
				break
			}
			require.True(t, time.Now().Before(deadline), "the stale holder's duplicate never waited for the job's lock")
			time.Sleep(10 * time.Millisecond)
		}
		require.Zero(t, reapPasses(tracer), "the reap waits for the lock")
		require.NoError(t, runStart.Rollback(ctx))
		got := <-answered
		require.NoError(t, got.err, "the reap under the lock freed the dead worker's request")
		require.NotEqual(t, active, got.res.Request.ID)
		require.Positive(t, reapPasses(tracer), "the reap ran, under the lock")
		conditional, plain := lockStatements()
		require.Equal(t, 1, conditional, "the lock is taken once")
		require.Zero(t, plain)
	})
}
