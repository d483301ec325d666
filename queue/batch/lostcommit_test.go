package batch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
)

// lostCommitJob has chunks of perChunk targets; when it processes the chunk
// named at, it makes the commit of the chunk named lose vanish first
// (testfactory.LoseChunkCommit, as a failover to an asynchronous replica
// loses an acknowledged commit). It counts how often each chunk was
// processed.
type lostCommitJob struct {
	pool             *pgxpool.Pool
	chunks, perChunk int64
	declare          bool
	at, lose         string

	mu        sync.Mutex
	processed map[string]int
}

func (j *lostCommitJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: batch.TargetsUnknown, Chunks: chunkKeys(int(j.chunks))}
	if j.declare {
		plan.Targets = j.chunks * j.perChunk
	}
	return plan, nil
}

func (j *lostCommitJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	j.mu.Lock()
	j.processed[chunk]++
	first := j.processed[chunk] == 1
	j.mu.Unlock()
	if chunk == j.at && first {
		if err := testfactory.LoseChunkCommit(ctx, j.pool, run.ExecutionID, j.lose); err != nil {
			return nil, err
		}
	}
	return &batch.ChunkResult{Targets: j.perChunk, Written: j.perChunk}, nil
}

// A chunk commit that was acknowledged and then vanished (a failover to an
// asynchronous replica) is done again before the run ends: the run ends
// COMPLETED with every planned chunk committed, never COMPLETED short of
// its plan (the very failure this service exists to prevent) nor FAILED for a gap it can close.
// The loss is counted (buildrisk_commits_lost_total) and named in the
// execution's message, and the items are counted once in
// buildrisk_items_total, as the database holds them.
func TestRunner_LostChunkCommitIsDoneAgain(t *testing.T) {
	t.Parallel()
	for _, declare := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeclaredTargets_%v", declare), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			job := &lostCommitJob{chunks: 12, perChunk: 10, declare: declare, at: "c08", lose: "c03", processed: map[string]int{}}
			b := setup(t, map[string]batch.Job{"aptTrade": job})
			job.pool = b.pool

			out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "aptTrade")})
			require.NoError(t, err)
			require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
			require.Contains(t, out.Message, "120 targets")
			require.Contains(t, out.Message, "1 lost commit")
			require.Equal(t, 2, job.processed["c03"], "the lost chunk was processed again")
			require.Equal(t, 1, job.processed["c04"], "chunks that stayed committed were not")

			var checkpoints int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM job_checkpoint`).Scan(&checkpoints))
			require.Equal(t, 12, checkpoints, "every planned chunk is committed")
			exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
			require.NoError(t, err)
			require.Equal(t, int64(120), exec.ItemsWritten)
			require.Equal(t, int32(12), exec.ChunksDone)

			lost, err := observabilitytest.MetricValue(b.providers, "buildrisk_commits_lost_total", map[string]string{"job": "aptTrade"})
			require.NoError(t, err)
			require.Equal(t, float64(1), lost)
			requireItemsCounted(t, b, "aptTrade", 120)
		})
	}
}

// losePart returns a compactJob whose first Process of chunk "a" makes one
// of the chunk's committed parts vanish after FanOutCommit returns, as a
// failover to an asynchronous replica does with a part acknowledged and
// never replicated: the part and its items' writes are gone, and so is the
// execution's count of them. calls counts the calls of each item.
func losePart(pool *pgxpool.Pool) (job *compactJob, calls map[string]int) {
	var mu sync.Mutex
	calls = map[string]int{}
	lost := false
	job = &compactJob{
		called: func(item string) {
			mu.Lock()
			defer mu.Unlock()
			calls[item]++
		},
		committed: func(ctx context.Context, chunk string) error {
			mu.Lock()
			lose := chunk == "a" && !lost
			lost = true
			mu.Unlock()
			if !lose {
				return nil
			}
			// The part and its items' writes go together.
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				items, err := testfactory.LosePart(ctx, tx, "a")
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `DELETE FROM compact_write WHERE item = ANY ($1)`, items)
				return err
			})
		},
	}
	return job, calls
}

// A part commit that was acknowledged and then vanished is done again
// before its chunk commits: the run ends COMPLETED with every item written
// once, not FAILED "unaccounted" (which no resume repairs). Only the lost
// part's items are called again; the loss is counted.
func TestRunner_LostPartIsDoneAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]batch.Job{"creditEval": &compactJob{}})
	job, calls := losePart(b.pool)
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{"creditEval": job}, Upstream: b.upstream, Instruments: b.instruments,
	})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `CREATE TABLE compact_write (item text PRIMARY KEY)`)
	require.NoError(t, err)

	out, err := runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Contains(t, out.Message, "100 targets (written 100")
	require.Equal(t, 100, countRows(t, b, `SELECT count(*) FROM compact_write`))
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(100), exec.ItemsWritten)
	repeated := 0
	for _, n := range calls {
		repeated += n - 1
	}
	require.Positive(t, repeated, "the lost part's items were called again")
	require.Less(t, repeated, 50, "only the lost part's items")
	lost, err := observabilitytest.MetricValue(b.providers, "buildrisk_commits_lost_total", map[string]string{"job": "creditEval"})
	require.NoError(t, err)
	require.Equal(t, float64(1), lost)
	requireItemsCounted(t, b, "creditEval", 100)
}

// planTerminatedJob's first Plan has its connection terminated under it,
// as a failover, a restart or pg_terminate_backend does.
type planTerminatedJob struct {
	plans int
}

func (j *planTerminatedJob) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	j.plans++
	if j.plans == 1 {
		var ok bool
		if err := run.DB.QueryRow(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`).Scan(&ok); err != nil {
			return nil, fmt.Errorf("error reading the plan's targets: %w", err)
		}
	}
	return &batch.Plan{Chunks: chunkKeys(2), Targets: 2}, nil
}

func (j *planTerminatedJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// A transient database error inside Plan costs a pause, not the run: the
// plan is read again and the run completes.
func TestRunner_PlanRetriesATerminatedBackend(t *testing.T) {
	t.Parallel()
	job := &planTerminatedJob{}
	b := setup(t, map[string]batch.Job{"metrics": job})
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "metrics")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Equal(t, 2, job.plans)
}

// shrinkJob's chunk c05 takes 10 written items off its execution's figures
// while every checkpoint stays: a loss the plan check cannot see.
type shrinkJob struct{ pool *pgxpool.Pool }

func (j *shrinkJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: chunkKeys(12), Targets: batch.TargetsUnknown}, nil
}

func (j *shrinkJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == "c05" {
		if err := testfactory.LoseWrittenItems(ctx, j.pool, run.ExecutionID, 10); err != nil {
			return nil, err
		}
	}
	return &batch.ChunkResult{Targets: 10, Written: 10}, nil
}

// A run whose execution holds fewer items than the run committed does not
// complete: before, the run logged an ERROR line after recording COMPLETED.
func TestRunner_TallyShortOfTheRunFails(t *testing.T) {
	t.Parallel()
	job := &shrinkJob{}
	b := setup(t, map[string]batch.Job{"rules": job})
	job.pool = b.pool
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "rules")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, out.Status, out.Message)
	require.Contains(t, out.Message, "the run committed 10 items that its execution does not hold")
	lost, err := observabilitytest.MetricValue(b.providers, "buildrisk_commits_lost_total", map[string]string{"job": "rules"})
	require.NoError(t, err)
	require.Equal(t, float64(1), lost)
}

// vanishJob's chunk c01 deletes its own execution's rows, as a failover to
// an asynchronous replica loses an execution started just before it.
type vanishJob struct{ pool *pgxpool.Pool }

func (j *vanishJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: chunkKeys(3), Targets: 3}, nil
}

func (j *vanishJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == "c01" {
		if err := testfactory.LoseExecution(ctx, j.pool, run.ExecutionID); err != nil {
			return nil, err
		}
	}
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// A run whose execution vanished from the database is told apart from one
// taken over by another worker: it counts buildrisk_commits_lost_total,
// not buildrisk_ownership_lost_total (which pages as a takeover).
func TestRunner_VanishedExecutionIsNotATakeover(t *testing.T) {
	t.Parallel()
	job := &vanishJob{}
	b := setup(t, map[string]batch.Job{"rules": job})
	job.pool = b.pool
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "rules")})
	require.ErrorIs(t, err, batch.ErrExecutionVanished, "%+v", out)
	require.ErrorIs(t, err, batch.ErrOwnershipLost)
	lost, err := observabilitytest.MetricValue(b.providers, "buildrisk_commits_lost_total", map[string]string{"job": "rules"})
	require.NoError(t, err)
	require.Equal(t, float64(1), lost)
	takeovers, err := observabilitytest.MetricValue(b.providers, "buildrisk_ownership_lost_total", map[string]string{"job": "rules"})
	if err == nil {
		require.Zero(t, takeovers)
	}
}

// movedJob loses the commit of chunk c02 while it processes c05 and tells
// the runner the database moved; it records the order it processes chunks
// in.
type movedJob struct {
	pool   *pgxpool.Pool
	runner *batch.Runner
	mu     sync.Mutex
	order  []string
}

func (j *movedJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: chunkKeys(12), Targets: batch.TargetsUnknown}, nil
}

func (j *movedJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	j.mu.Lock()
	j.order = append(j.order, chunk)
	first := len(j.order) == 6
	j.mu.Unlock()
	if chunk == "c05" && first {
		if err := testfactory.LoseChunkCommit(ctx, j.pool, run.ExecutionID, "c02"); err != nil {
			return nil, err
		}
		j.runner.DatabaseMoved()
	}
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// When the process learns that the database moved (a failover), a running
// execution checks its committed chunks at its next chunk boundary and
// does a lost one again at once, not only at its end.
func TestRunner_DatabaseMovedReverifiesAtOnce(t *testing.T) {
	t.Parallel()
	job := &movedJob{}
	b := setup(t, map[string]batch.Job{"rules": job})
	job.pool, job.runner = b.pool, b.runner
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "rules")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Contains(t, out.Message, "12 targets")
	require.Equal(t, []string{"c00", "c01", "c02", "c03", "c04", "c05", "c02", "c06", "c07", "c08", "c09", "c10", "c11"}, job.order)
}
