package request_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/request/requesttest"
	"github.com/buildrisk/radar/radartype"
)

// A RUNNING request whose execution the database no longer holds (lost in
// a failover to an asynchronous replica after it was acknowledged) is
// failed by the reconcile loop, saying so, instead of staying RUNNING for
// ever: no execution will ever record its end.
// reconcilePolicy resumes the causes a reconciled run can carry.
var reconcilePolicy = request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseDrain, radartype.CauseDatabase}, MaxPerDay: 10}

func TestReconcile_RequestWhoseExecutionVanished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{Resume: reconcilePolicy})
	pool := b.pool
	lost := int64(424242)
	req := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Status: radartype.RequestRunning, WorkerID: "w1", ExecutionID: &lost})

	n, err := b.enqueuer.Reconcile(ctx, "w1", batch.NewHeldSet())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := queries.New().JobRequestGetByID(ctx, pool, req.ID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", got.Status)
	require.Contains(t, got.Message, "the database lost execution 424242")
	require.Empty(t, b.resumes(t, pool), "a lost execution has nothing to resume")
	requesttest.RequireAgreement(t, pool, time.Minute)
}

// The reconcile loop finishes the RUNNING requests of its worker that the
// worker no longer holds, from what their executions recorded, through the
// owner's one Finish: a run whose end was recorded on its execution but not
// on its request takes that outcome (a stopped one goes to resume, with its
// cause; a completed one chains to the next job); a run whose execution
// never ended is ABANDONED with cause database. Requests the worker still
// holds, and other workers' requests, are left alone.
func TestReconcile_FinishesWhatTheWorkerNoLongerHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{Resume: reconcilePolicy})
	pool := b.pool
	const me = "3@reconcile#b"
	run := func(job string, status radartype.ExecutionStatus, cause radartype.StopCause) *queries.JobExecution {
		return testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{
			Job: job, WorkerID: me, Status: status, StopCause: cause, ExitMessage: "recorded " + string(status), KeepRequest: true,
			InstanceID: resumableInstance(t, pool, job),
		})
	}
	completed := run("metrics", radartype.ExecutionCompleted, "")
	stoppedRun := run("stockPrice", radartype.ExecutionStopped, radartype.CauseDrain)
	active := run("filingParse", radartype.ExecutionStarted, "")
	held := run("creditEval", radartype.ExecutionStarted, "")
	other := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "corpCodeSync", WorkerID: "4@reconcile#b", Status: radartype.ExecutionCompleted, KeepRequest: true})
	heldSet := batch.NewHeldSet()
	heldSet.Add(held.RequestID)

	n, err := b.enqueuer.Reconcile(ctx, me, heldSet)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	q := queries.New()
	status := func(requestID int64) (string, string) {
		req, err := q.JobRequestGetByID(ctx, pool, requestID)
		require.NoError(t, err)
		return req.Status, req.Message
	}
	s, msg := status(completed.RequestID)
	require.Equal(t, "DONE", s)
	require.Equal(t, "recorded COMPLETED", msg)
	s, msg = status(stoppedRun.RequestID)
	require.Equal(t, "DONE", s)
	require.Equal(t, "recorded STOPPED", msg)
	s, msg = status(active.RequestID)
	require.Equal(t, "FAILED", s)
	require.Contains(t, msg, "the worker lost its result recording; execution abandoned")
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, active.ID).Status)
	s, _ = status(held.RequestID)
	require.Equal(t, "RUNNING", s, "a request the worker holds is its runner's")
	s, _ = status(other.RequestID)
	require.Equal(t, "RUNNING", s, "another worker's request is its own reconcile loop's")

	// The stopped run and the abandoned one go to resume with their causes;
	// the completed run has nothing to resume, and chains to its next job.
	require.Equal(t, map[int64]radartype.StopCause{stoppedRun.ID: radartype.CauseDrain, active.ID: radartype.CauseDatabase}, b.resumes(t, pool))
	var chained int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_request WHERE job = 'rules' AND source = 'chain'`).Scan(&chained))
	require.Equal(t, 1, chained, "the completed metrics run chains to rules")

	n, err = b.enqueuer.Reconcile(ctx, me, heldSet)
	require.NoError(t, err)
	require.Zero(t, n, "finished requests are not finished again")
}
