package batch_test

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
)

// errAnswerLost is what a commit's answer lost on its way back looks like
// to the run: the connection reset after the server committed.
var errAnswerLost = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

// loseAnswers returns the test signals that take the answer of the commits
// of a kind (batch.CommitPart, batch.CommitChunk) numbered in lost (1 is the
// run's first of them) as lost, and a count of the commits of that kind
// they saw.
func loseAnswers(kind string, lost ...int64) (batch.TestSignals, *atomic.Int64) {
	var commits atomic.Int64
	return batch.TestSignals{AnswerLost: func(commit string) error {
		if commit != kind {
			return nil
		}
		n := commits.Add(1)
		for _, l := range lost {
			if n == l {
				return errAnswerLost
			}
		}
		return nil
	}}, &commits
}

// requireItemsCounted asserts that buildrisk_items_total{job, outcome=written}
// equals want.
func requireItemsCounted(t *testing.T, b *testBundle, job string, want int64) {
	t.Helper()
	got, err := observabilitytest.MetricValue(b.providers, "buildrisk_items_total", map[string]string{"job": job, "outcome": "written"})
	require.NoError(t, err)
	require.Equal(t, float64(want), got, "buildrisk_items_total{outcome=written}")
}

// A part commit that lands while its answer is lost: the chunk runs again
// without the part's items (they are committed), so nothing counted them;
// the run counts them when it ends, from its execution's figures. The
// counter ends equal to what the database holds, as the soak's counters
// invariant demands (seeds 3 and 4 found it one item short).
func TestRunner_PartCommitWhoseAnswerIsLostIsCountedOnce(t *testing.T) {
	t.Parallel()
	signals, commits := loseAnswers(batch.CommitPart, 1)
	job := &compactJob{}
	b := setup(t, map[string]batch.Job{"creditEval": job})
	b.runner.SetTestSignals(signals)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE TABLE compact_write (item text PRIMARY KEY)`)
	require.NoError(t, err)

	out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Greater(t, commits.Load(), int64(1), "the chunk ran again after the lost answer")
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(100), exec.ItemsWritten, "each item written once")
	requireItemsCounted(t, b, "creditEval", 100)
}

// A chunk commit whose answer is lost: the retry finds the chunk's
// checkpoint and does not commit it again; the chunk is counted once.
func TestRunner_ChunkCommitWhoseAnswerIsLostIsCountedOnce(t *testing.T) {
	t.Parallel()
	signals, commits := loseAnswers(batch.CommitChunk, 2)
	b := setup(t, map[string]batch.Job{"aptTrade": &itemsJob{chunks: 3, perChunk: 10, declare: true}})
	b.runner.SetTestSignals(signals)
	ctx := context.Background()

	out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "aptTrade")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(30), exec.ItemsWritten)
	require.Equal(t, int32(3), exec.ChunksDone)
	require.Equal(t, int64(3), commits.Load(), "each chunk committed once, the one whose answer was lost too")
	requireItemsCounted(t, b, "aptTrade", 30)
}
