package credit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// takenOverJob is creditEval whose run is taken over just before it plans:
// takeover runs first, in the run's Plan.
type takenOverJob struct {
	*credit.Job
	takeover func(run *batch.Run)
}

func (j takenOverJob) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	j.takeover(run)
	return j.Job.Plan(ctx, run)
}

// A run that lost its execution before planning (the reaper abandoned it,
// and a new execution of the same instance, under the next lease epoch,
// has frozen its own plan) neither deletes nor overwrites the new
// execution's plan: creditEval freezes its plan in a transaction fenced on
// the execution, and its clearing is scoped to its own execution and to
// executions that have ended.
func TestCreditEval_StalePlanLeavesTheNewExecutionsPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 30})
	ctx := context.Background()
	q := queries.New()
	var successor int64
	job := takenOverJob{Job: credit.New(), takeover: func(run *batch.Run) {
		n, err := q.JobExecutionAbandon(ctx, b.pool, &queries.JobExecutionAbandonParams{ID: run.ExecutionID, ExitMessage: "worker gone"})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		epoch, err := q.JobInstanceTakeLease(ctx, b.pool, run.InstanceID)
		require.NoError(t, err)
		exec, err := q.JobExecutionInsert(ctx, b.pool, &queries.JobExecutionInsertParams{
			InstanceID: run.InstanceID, Job: credit.Name, RequestID: run.RequestID, WorkerID: "2@test#boot", LeaseEpoch: epoch,
		})
		require.NoError(t, err)
		successor = exec.ID
		// The successor freezes its plan: every target in one chunk.
		page, err := q.CreditEvalPlanPage(ctx, b.pool, &queries.CreditEvalPlanPageParams{
			ExecutionID: successor, InstanceID: run.InstanceID, EvalDate: b.today(), ChunkSize: int32(len(b.targets)),
		})
		require.NoError(t, err)
		require.Equal(t, b.targets[0]+"-"+b.targets[len(b.targets)-1], page.Chunk)
	}}
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{credit.Name: job},
		Upstream: b.client, Instruments: b.instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	id, _ := b.request(t, `{}`, nil)
	_, err = runner.Run(ctx, batch.RunOpts{RequestID: id})
	require.ErrorIs(t, err, batch.ErrOwnershipLost)

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_eval_plan WHERE execution_id = $1`, successor),
		"the stale run deleted the new execution's plan")
	require.Equal(t, len(b.targets), b.count(t, `SELECT cardinality(corp_codes) FROM credit_eval_plan WHERE execution_id = $1`, successor),
		"the stale run overwrote the new execution's plan")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM credit_eval_plan WHERE execution_id <> $1`, successor),
		"the stale run froze a plan of its own")
}
