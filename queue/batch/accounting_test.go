package batch_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
)

// skewedJob's chunks claim one item too many and one too few in turn: the
// net totals add up, each chunk does not.
type skewedJob struct{ chunks int }

func (j *skewedJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: batch.TargetsUnknown}
	plan.Chunks = chunkKeys(j.chunks)
	return plan, nil
}

func (j *skewedJob) Process(_ context.Context, _ *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == "c00" {
		return &batch.ChunkResult{Targets: 10, Written: 11}, nil
	}
	return &batch.ChunkResult{Targets: 10, Written: 9}, nil
}

// The invariant targets = written + skipped + failed holds at every chunk
// commit, not only as net totals: +1 in one chunk and -1 in the next do not
// cancel. The first chunk that does not add up fails the execution,
// uncommitted, and is counted.
func TestRunner_EveryChunkAddsUp(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]batch.Job{"aptTrade": &skewedJob{chunks: 2}})
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "aptTrade")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, out.Status, out.Message)
	require.Equal(t, "chunk c00: unaccounted: 1 of 10 targets (written 11, skipped 0, failed 0)", out.Message)
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int32(0), exec.ChunksDone, "the chunk that did not add up did not commit")
	require.Zero(t, exec.ItemsWritten)
	v, err := observabilitytest.MetricValue(b.providers, "buildrisk_items_total", map[string]string{"job": "aptTrade", "outcome": "unaccounted"})
	require.NoError(t, err)
	require.Equal(t, float64(1), v)
}

// failedItems is an ItemFailures error of n items.
type failedItems struct{ n int64 }

func (e failedItems) Error() string      { return fmt.Sprintf("%d items failed", e.n) }
func (e failedItems) FailedItems() int64 { return e.n }

// fencedOutJob's chunk loses its execution (another run took it over: the
// lease epoch moved on) and then fails with 5 failed items.
type fencedOutJob struct{ pool *pgxpool.Pool }

func (j *fencedOutJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Targets: 5, Chunks: chunkKeys(1)}, nil
}

func (j *fencedOutJob) Process(ctx context.Context, run *batch.Run, _ string) (*batch.ChunkResult, error) {
	if _, err := queries.New().JobInstanceTakeLease(ctx, j.pool, run.InstanceID); err != nil {
		return nil, err
	}
	return nil, failedItems{n: 5}
}

// Failed items are counted (buildrisk_items_total{outcome="failed"}) only
// once the execution's items_failed holds them: a run that is no longer
// the execution's owner writes nothing, so it counts nothing either, and
// the counter never says more than the database.
func TestRunner_FailedItemsCountedOnlyWhenRecorded(t *testing.T) {
	t.Parallel()
	job := &fencedOutJob{}
	b := setup(t, map[string]batch.Job{"aptTrade": job})
	job.pool = b.pool // the job's writes stand for another run's takeover
	_, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "aptTrade")})
	require.ErrorIs(t, err, batch.ErrOwnershipLost)
	var itemsFailed int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT items_failed FROM job_execution`).Scan(&itemsFailed))
	require.Zero(t, itemsFailed, "a run that lost the execution writes nothing to it")
	v, err := observabilitytest.MetricValue(b.providers, "buildrisk_items_total", map[string]string{"job": "aptTrade", "outcome": "failed"})
	require.NoError(t, err)
	require.Zero(t, v, "counted as the database records them")
}
