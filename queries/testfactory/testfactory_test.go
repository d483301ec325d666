package testfactory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The rows come out as the service writes them: a worker with its slot and
// ages, an execution owned by its worker at the instance's lease epoch and
// named by a request that worker claimed, a finished request beside the
// job's active one, a chunk commit that folds the chunk's parts.
func TestFactory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	w := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{ID: "12@host-a#boot", HeartbeatAge: time.Hour})
	require.Equal(t, "host-a", w.Hostname)
	require.Equal(t, int32(12), w.Pid)
	require.Equal(t, "boot", w.Boot)
	require.Equal(t, "running", w.Status)
	require.WithinDuration(t, time.Now().Add(-time.Hour), w.HeartbeatAt, time.Minute)
	require.NotEqual(t, testfactory.Worker(ctx, t, pool, nil).ID, testfactory.Worker(ctx, t, pool, nil).ID)

	first := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: w.ID, Targets: 10})
	require.Equal(t, "STARTED", first.Status)
	require.Equal(t, int64(1), first.LeaseEpoch)
	req, err := queries.New().JobRequestGetByID(ctx, pool, first.RequestID)
	require.NoError(t, err)
	require.Equal(t, "RUNNING", req.Status)
	require.Equal(t, w.ID, *req.WorkerID)
	require.Equal(t, first.ID, *req.ExecutionID)
	done := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: first.Job, Status: radartype.RequestDone, Message: "earlier"})
	require.Equal(t, "DONE", done.Status)
	require.NotNil(t, done.FinishedAt)

	testfactory.CheckpointPart(ctx, t, pool, first, "c1", "x", "y")
	cp := testfactory.Checkpoint(ctx, t, pool, first, &testfactory.CheckpointOpts{Chunk: "c1", Targets: 1, Written: 1})
	require.Equal(t, int64(3), cp.Targets, "the chunk's two part items fold into its checkpoint")
	require.Equal(t, int64(3), cp.Written)
	exec := testfactory.ExecutionByID(ctx, t, pool, first.ID)
	require.Equal(t, int32(1), exec.ChunksDone)
	require.Equal(t, int64(3), exec.ItemsWritten)

	testfactory.FinishExecution(ctx, t, pool, first.ID, &testfactory.FinishOpts{Status: radartype.ExecutionStopped, Message: "drained"})
	req, err = queries.New().JobRequestGetByID(ctx, pool, first.RequestID)
	require.NoError(t, err)
	require.Equal(t, "DONE", req.Status)
	require.Equal(t, "drained", req.Message)

	// The resume of the instance takes its next epoch.
	second := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{InstanceID: first.InstanceID, Status: radartype.ExecutionCompleted, ExitMessage: "ok"})
	require.Equal(t, int64(2), second.LeaseEpoch)
	require.Equal(t, "COMPLETED", second.Status)
	require.NotNil(t, second.EndedAt)
	req, err = queries.New().JobRequestGetByID(ctx, pool, second.RequestID)
	require.NoError(t, err)
	require.Equal(t, "DONE", req.Status, "an execution that ends finishes its request")
}
