package batch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// heldJob has `chunks` chunks of one target each; the chunk named hold
// signals entered and then waits for release (or, with release nil, for its
// context to end, which it reports on cancelled).
type heldJob struct {
	chunks    int
	hold      string
	entered   chan struct{}
	release   chan struct{}
	cancelled chan error
	// domainRows, when set, runs where the runner counts domain rows: after
	// the last commit, before the outcome is recorded.
	domainRows func(ctx context.Context)
	// probe, when set, makes each chunk queue a write of its name into the
	// table chunk_probe (ChunkResult.Queue: committed in the chunk's one
	// implicit transaction).
	probe bool
}

func (j *heldJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: int64(j.chunks)}
	plan.Chunks = chunkKeys(j.chunks)
	return plan, nil
}

func (j *heldJob) Process(ctx context.Context, _ *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == j.hold {
		close(j.entered)
		if j.release == nil {
			<-ctx.Done()
			j.cancelled <- context.Cause(ctx)
			return nil, ctx.Err()
		}
		<-j.release
	}
	res := &batch.ChunkResult{Targets: 1, Written: 1}
	if j.probe {
		res.Queue = func(b *pgx.Batch) { b.Queue(`INSERT INTO chunk_probe (chunk) VALUES ($1)`, chunk) }
	}
	return res, nil
}

type countingHeldJob struct{ *heldJob }

func (j countingHeldJob) DomainRows(ctx context.Context, _ queries.DBTX, _ []int64) (int64, error) {
	j.domainRows(ctx)
	return 0, nil
}

// abandon does what the reaper does to a dead worker's request.
func (b *testBundle) abandon(t *testing.T, requestID int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgtx.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		req, err := queries.New().JobRequestGetByID(ctx, tx, requestID)
		if err != nil {
			return err
		}
		ok, err := b.enqueuer.Abandon(ctx, tx, &request.Abandonment{RequestID: requestID, ExecutionID: req.ExecutionID, Message: "reaped by the test"})
		if err == nil && !ok {
			err = errors.New("request was not active")
		}
		return err
	}))
}

// runAsync runs the request and returns a function waiting (at most a
// minute, failing the test past it) for Run's result.
func runAsync(t *testing.T, runner *batch.Runner, requestID int64) func() (*batch.Outcome, error) {
	t.Helper()
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: requestID})
		done <- result{out, err}
	}()
	return func() (*batch.Outcome, error) {
		t.Helper()
		select {
		case r := <-done:
			return r.out, r.err
		case <-time.After(time.Minute):
			t.Fatal("Run did not return within a minute")
			return nil, nil
		}
	}
}

// Fencing: an execution set ABANDONED (or taken over by a newer lease epoch)
// while its run is mid-chunk gets no further write: the run stops with
// ErrOwnershipLost, the chunk in flight is not committed, the outcome and
// the chained request are not recorded, the reaper's record stands, and
// buildrisk_ownership_lost_total moves.
func TestRunner_OwnershipLost(t *testing.T) {
	t.Parallel()

	type check struct {
		lost       func(t *testing.T, b *testBundle, requestID int64)
		leaseCheck time.Duration // 0: an hour, so only a fenced write can notice
		inFlight   bool          // the held chunk never returns by itself
		atRecord   bool          // lose it after the last commit, before the outcome
		probe      bool          // chunks queue a write: the lost chunk's must not land
		wantStatus string        // the execution's status afterwards
	}
	abandon := func(t *testing.T, b *testBundle, id int64) { b.abandon(t, id) }
	takeOver := func(t *testing.T, b *testBundle, id int64) {
		// A newer execution of the instance took the next lease epoch.
		ctx, q := context.Background(), queries.New()
		req, err := q.JobRequestGetByID(ctx, b.pool, id)
		require.NoError(t, err)
		exec, err := q.JobExecutionGetByID(ctx, b.pool, *req.ExecutionID)
		require.NoError(t, err)
		_, err = q.JobInstanceTakeLease(ctx, b.pool, exec.InstanceID)
		require.NoError(t, err)
	}
	for name, tc := range map[string]check{
		"Abandoned_FencedCommit":    {lost: abandon, wantStatus: "ABANDONED"},
		"Abandoned_FencedWrites":    {lost: abandon, probe: true, wantStatus: "ABANDONED"},
		"TakenOver_FencedCommit":    {lost: takeOver, wantStatus: "STARTED"},
		"Abandoned_NoticedInFlight": {lost: abandon, leaseCheck: 10 * time.Millisecond, inFlight: true, wantStatus: "ABANDONED"},
		"Abandoned_FencedOutcome":   {lost: abandon, atRecord: true, wantStatus: "ABANDONED"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := &heldJob{chunks: 4, hold: "c01", entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan error, 1), probe: tc.probe}
			if tc.inFlight {
				job.release = nil
			}
			var registered batch.Job = job
			if tc.atRecord {
				job.hold = ""
				registered = countingHeldJob{job}
			}
			leaseCheck := tc.leaseCheck
			if leaseCheck == 0 {
				leaseCheck = time.Hour
			}
			b := setup(t, map[string]batch.Job{"metrics": registered})
			_, err := b.pool.Exec(context.Background(), `CREATE TABLE chunk_probe (chunk text PRIMARY KEY)`)
			require.NoError(t, err)
			runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
				WorkerID: "1@test#boot", Jobs: map[string]batch.Job{"metrics": registered}, Upstream: b.upstream, Instruments: b.instruments,
				LeaseCheckInterval: leaseCheck,
			})
			require.NoError(t, err)
			id := b.enqueue(t, "metrics")
			lostAtRecord := make(chan struct{})
			job.domainRows = func(context.Context) { tc.lost(t, b, id); close(lostAtRecord) }
			wait := runAsync(t, runner, id)
			if tc.atRecord {
				<-lostAtRecord
			} else {
				<-job.entered
				tc.lost(t, b, id)
				if job.release != nil {
					close(job.release)
				}
			}
			out, err := wait()
			require.ErrorIs(t, err, batch.ErrOwnershipLost)
			require.Empty(t, out.Status, "no outcome of the run is the execution's")
			if tc.inFlight {
				require.ErrorIs(t, <-job.cancelled, batch.ErrOwnershipLost, "the chunk in flight was cancelled with the cause")
			}

			var status, message string
			var chunksDone int
			require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, exit_message, chunks_done FROM job_execution WHERE id = $1`, out.ExecutionID).Scan(&status, &message, &chunksDone))
			require.Equal(t, tc.wantStatus, status)
			wantChunks := 1 // c00 only: the held chunk c01 was never committed
			if tc.atRecord {
				wantChunks = 4
			}
			require.Equal(t, wantChunks, chunksDone)
			require.Equal(t, wantChunks, countRows(t, b, `SELECT count(*) FROM job_checkpoint`))
			if tc.probe {
				// The chunk's writes and its fenced bookkeeping travel in one
				// implicit transaction: the fence must roll the writes back.
				require.Equal(t, wantChunks, countRows(t, b, `SELECT count(*) FROM chunk_probe`), "only committed chunks' writes landed")
				require.Zero(t, countRows(t, b, `SELECT count(*) FROM chunk_probe WHERE chunk = 'c01'`), "the lost chunk's write rolled back")
			}
			if tc.wantStatus == "ABANDONED" {
				require.Equal(t, "reaped by the test", message, "the reaper's record stands")
			}
			require.Zero(t, countRows(t, b, `SELECT count(*) FROM job_request WHERE source = 'chain'`), "no chained request")
			v, err := observabilitytest.MetricValue(b.providers, "buildrisk_ownership_lost_total", map[string]string{"job": "metrics"})
			require.NoError(t, err)
			require.Equal(t, float64(1), v)
			v, err = observabilitytest.MetricValue(b.providers, "buildrisk_executions_total", map[string]string{"job": "metrics", "status": "COMPLETED"})
			require.NoError(t, err)
			require.Zero(t, v, "no execution counted as finished")
		})
	}
}

func countRows(t *testing.T, b *testBundle, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query).Scan(&n))
	return n
}

// flakyWriteJob's chunk writes fail with err the first `fail` times (fail
// < 0: always).
type flakyWriteJob struct {
	chunks int
	fail   int
	err    error
	writes int
}

func (j *flakyWriteJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: int64(j.chunks)}
	plan.Chunks = chunkKeys(j.chunks)
	return plan, nil
}

func (j *flakyWriteJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	return &batch.ChunkResult{Targets: 1, Written: 1, Write: func(context.Context, pgx.Tx) error {
		j.writes++
		if j.fail < 0 || j.writes <= j.fail {
			return j.err
		}
		return nil
	}}, nil
}

// A transient database error at a chunk's commit is retried (the chunk
// counted once); one that never clears stops the run after
// RecordRetryWindow (STOPPED, cause database, so it resumes: a stall is
// the database's doing, not the job's), naming the error, instead of
// retrying forever while the database is otherwise up; a non-transient one
// fails at once.
func TestRunner_TransientCommitErrors(t *testing.T) {
	t.Parallel()
	statementTimeout := &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}
	for name, tc := range map[string]struct {
		job        *flakyWriteJob
		wantStatus radartype.ExecutionStatus
		wantMsg    string
		wantWrites int
	}{
		"RetriedThenCommitted": {&flakyWriteJob{chunks: 3, fail: 2, err: statementTimeout}, radartype.ExecutionCompleted, "completed: 3 targets", 5},
		"NeverClears":          {&flakyWriteJob{chunks: 3, fail: -1, err: statementTimeout}, radartype.ExecutionStopped, "retried in vain", 0},
		"NotTransient":         {&flakyWriteJob{chunks: 3, fail: -1, err: &pgconn.PgError{Code: "23514"}}, radartype.ExecutionFailed, "SQLSTATE 23514", 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, map[string]batch.Job{"metrics": tc.job})
			var transient int
			runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
				WorkerID: "1@test#boot", Jobs: map[string]batch.Job{"metrics": tc.job}, Upstream: b.upstream, Instruments: b.instruments,
				RecordRetryWindow: 300 * time.Millisecond,
			})
			require.NoError(t, err)
			runner.SetTestSignals(batch.TestSignals{Transient: func(error) { transient++ }})
			out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "metrics")})
			require.NoError(t, err)
			require.Equal(t, tc.wantStatus, out.Status, out.Message)
			require.Contains(t, out.Message, tc.wantMsg)
			var chunksDone, written int
			require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT chunks_done, items_written FROM job_execution WHERE id = $1`, out.ExecutionID).Scan(&chunksDone, &written))
			require.Equal(t, countRows(t, b, `SELECT count(*) FROM job_checkpoint`), chunksDone, "each committed chunk counted once")
			require.Equal(t, chunksDone, written)
			if tc.wantWrites > 0 {
				require.Equal(t, tc.wantWrites, tc.job.writes)
			}
			if name == "NeverClears" {
				var cause string
				require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT stop_cause FROM job_execution WHERE id = $1`, out.ExecutionID).Scan(&cause))
				require.Equal(t, "database", cause)
			}
			if name == "NotTransient" {
				require.Zero(t, transient)
			} else {
				require.Positive(t, transient)
			}
		})
	}
}

// fencedPlanJob writes a row in Run.Fenced from its Plan, after take (when
// set) has taken the execution from the run.
type fencedPlanJob struct{ take func(run *batch.Run) }

func (j fencedPlanJob) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	if j.take != nil {
		j.take(run)
	}
	if err := run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO plan_probe (execution_id) VALUES ($1)`, run.ExecutionID)
		return err
	}); err != nil {
		return nil, err
	}
	return &batch.Plan{Chunks: chunkKeys(1), Targets: 1}, nil
}

func (fencedPlanJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// Run.Fenced, a job's one way to write outside its chunks' commits, commits
// while the run owns its execution and, once the run has lost it (the
// reaper abandoned it), writes nothing and ends the run with
// ErrOwnershipLost.
func TestRun_FencedWritesOnlyWhileOwned(t *testing.T) {
	t.Parallel()
	var b *testBundle
	taken := fencedPlanJob{take: func(run *batch.Run) { b.abandon(t, run.RequestID) }}
	b = setup(t, map[string]batch.Job{"owned": fencedPlanJob{}, "taken": taken})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE TABLE plan_probe (execution_id bigint PRIMARY KEY)`)
	require.NoError(t, err)

	out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "owned")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	var probes int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM plan_probe WHERE execution_id = $1`, out.ExecutionID).Scan(&probes))
	require.Equal(t, 1, probes)

	out, err = b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "taken")})
	require.ErrorIs(t, err, batch.ErrOwnershipLost)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM plan_probe WHERE execution_id = $1`, out.ExecutionID).Scan(&probes))
	require.Zero(t, probes, "a run that lost its execution wrote through Run.Fenced")
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "ABANDONED", exec.Status, "the reaper's record stands")
}
