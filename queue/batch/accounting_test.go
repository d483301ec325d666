package batch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
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
	require.Equal(t, "FAILED", out.Status, out.Message)
	require.Equal(t, "chunk c00: unaccounted: 1 of 10 targets (written 11, skipped 0, failed 0)", out.Message)
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int32(0), exec.ChunksDone, "the chunk that did not add up did not commit")
	require.Zero(t, exec.ItemsWritten)
	v, err := observabilitytest.MetricValue(b.providers, "buildrisk_items_total", map[string]string{"job": "aptTrade", "outcome": "unaccounted"})
	require.NoError(t, err)
	require.Equal(t, float64(1), v)
}
