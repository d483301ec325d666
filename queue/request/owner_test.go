package request_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/request/requesttest"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
)

// claimed is a request a claimWorker claimed, with its execution.
type claimed struct {
	request     *queries.JobRequest
	executionID int64
}

// claimWorker claims each request River delivers as a runner's start
// does (the owner's Claim, an execution, the owner's Started, in one
// transaction), then leaves the run to the test. Jobs named in hold are
// not claimed: their River jobs are snoozed, so their requests stay
// QUEUED with a live River job.
type claimWorker struct {
	river.WorkerDefaults[catalog.RequestArgs]
	tb       testing.TB
	owner    func() *request.Owner
	pool     pgtx.Beginner
	workerID string
	hold     map[string]bool
	claimed  chan claimed
}

func (w *claimWorker) Work(ctx context.Context, job *river.Job[catalog.RequestArgs]) error {
	// A request that may not start yet (a resume's backoff) waits, as
	// the worker's River worker makes it.
	wait, err := queries.New().JobRequestWait(ctx, w.pool.(queries.DBTX), job.Args.RequestID)
	if err != nil {
		return err
	}
	if w.hold[job.Args.Job] || wait > 0 {
		return river.JobSnooze(time.Hour)
	}
	var c claimed
	err = pgtx.InTx(ctx, w.pool, func(tx pgx.Tx) error {
		req, err := w.owner().Claim(ctx, tx, job.Args.RequestID, w.workerID, job)
		if err != nil {
			return err
		}
		exec := testfactory.Execution(ctx, w.tb, tx, &testfactory.ExecutionOpts{
			RequestID: req.ID, Unlinked: true, WorkerID: w.workerID,
			InstanceID: resumableInstance(w.tb, tx, req.Job),
		})
		c = claimed{request: req, executionID: exec.ID}
		return w.owner().Started(ctx, tx, req, exec.ID, job)
	})
	if err != nil {
		return err
	}
	w.claimed <- c
	return nil
}

// Every end of a request keeps it and its River job agreeing about work
// still to do, with a real River client delivering the requests: a claim
// completes the River job in the claim's transaction (so a run's end, a
// reap or a reconcile of a claimed request leaves no River job live), and
// an end before the claim (a start that failed, an operator's abandon, an
// orphan) cancels it. After each end the invariant checker finds nothing.
func TestOwner_EveryEndKeepsRequestAndRiverAgreeing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const staleAfter = 2 * time.Second
	pool := pgtest.NewPool(t)
	pgtest.WaitServerUptime(t, pool, staleAfter)
	live := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{})
	var owner *request.Owner
	w := &claimWorker{
		tb: t, owner: func() *request.Owner { return owner }, pool: pool, workerID: live.ID,
		hold: map[string]bool{"rules": true, "metrics": true}, claimed: make(chan claimed, 16),
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.Worker[catalog.RequestArgs](w))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID: live.ID, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	b := newBundle(t, request.Config{})
	owner, err = request.NewOwner(pool, client, request.Config{
		Catalog: b.jobCatalog, Instruments: b.instruments, StaleAfter: staleAfter,
		Resume: request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseDrain}, MaxPerDay: 3, Backoff: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	agree := func(t *testing.T) {
		t.Helper()
		requesttest.RequireAgreement(t, pool, staleAfter)
	}
	enqueue := func(t *testing.T, job string) *request.EnqueueResult {
		t.Helper()
		res, err := owner.Enqueue(ctx, &request.EnqueueParams{Job: job, Params: []byte("{}"), Source: radartype.SourceAPI})
		require.NoError(t, err)
		return res
	}
	claim := func(t *testing.T, job string) claimed {
		t.Helper()
		enqueue(t, job)
		select {
		case c := <-w.claimed:
			require.Equal(t, job, c.request.Job)
			require.Equal(t, rivertype.JobStateCompleted, riverStateOf(t, client, *c.request.RiverJobID), "the claim ends the delivery")
			agree(t)
			return c
		case <-time.After(time.Minute):
			t.Fatalf("no claim of %s within a minute", job)
			return claimed{}
		}
	}
	// held enqueues a request of a held job and returns it once River has
	// handed it back (snoozed): QUEUED, its River job live and idle.
	held := func(t *testing.T, job string) *request.EnqueueResult {
		t.Helper()
		res := enqueue(t, job)
		require.Eventually(t, func() bool {
			row, err := client.JobGet(ctx, *res.Request.RiverJobID)
			return err == nil && row.State == rivertype.JobStateScheduled
		}, time.Minute, 10*time.Millisecond, "River never handed back the held %s job", job)
		agree(t)
		return res
	}
	inTx := func(t *testing.T, fn func(tx pgx.Tx) error) {
		t.Helper()
		require.NoError(t, pgtx.InTx(ctx, pool, fn))
	}
	finish := func(t *testing.T, c claimed, status radartype.ExecutionStatus, cause radartype.StopCause) {
		t.Helper()
		inTx(t, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE job_execution SET status = $2, ended_at = now() WHERE id = $1`, c.executionID, string(status))
			if err != nil {
				return err
			}
			ended, err := owner.Finish(ctx, tx, &request.End{Request: c.request, ExecutionID: c.executionID, Status: status, Message: "ended", Cause: cause})
			require.True(t, ended)
			return err
		})
	}

	t.Run("FinishCompleted", func(t *testing.T) {
		finish(t, claim(t, "aptTrade"), radartype.ExecutionCompleted, "")
		agree(t)
	})
	t.Run("FinishStoppedResumes", func(t *testing.T) {
		c := claim(t, "stockPrice")
		finish(t, c, radartype.ExecutionStopped, radartype.CauseDrain)
		require.Equal(t, map[int64]radartype.StopCause{c.executionID: radartype.CauseDrain}, b.resumes(t, pool))
		agree(t) // the resume waits (an hour's backoff) with its River job live
	})
	t.Run("Reconcile", func(t *testing.T) {
		c := claim(t, "corpCodeSync")
		n, err := owner.Reconcile(ctx, live.ID, batch.NewHeldSet())
		require.NoError(t, err)
		require.Positive(t, n)
		require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, c.executionID).Status)
		agree(t)
	})
	t.Run("Reap", func(t *testing.T) {
		c := claim(t, "filingParse")
		testfactory.WorkerHeartbeatAge(ctx, t, pool, live.ID, time.Hour)
		_, err := owner.Reap(ctx, "filingParse")
		require.NoError(t, err)
		testfactory.WorkerHeartbeatAge(ctx, t, pool, live.ID, 0)
		require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, c.executionID).Status)
		agree(t)
	})
	t.Run("AbandonClaimed", func(t *testing.T) {
		c := claim(t, "creditEval")
		inTx(t, func(tx pgx.Tx) error {
			_, err := owner.Abandon(ctx, tx, &request.Abandonment{RequestID: c.request.ID, ExecutionID: &c.executionID, Message: "abandoned"})
			return err
		})
		agree(t)
	})
	t.Run("FailStartBeforeTheClaim", func(t *testing.T) {
		res := held(t, "rules")
		owner.FailStart(ctx, res.Request.ID, live.ID, nil, context.DeadlineExceeded)
		require.Equal(t, rivertype.JobStateCancelled, riverStateOf(t, client, *res.Request.RiverJobID))
		agree(t)
	})
	t.Run("Orphan", func(t *testing.T) {
		res := held(t, "metrics")
		_, err := client.JobCancel(ctx, *res.Request.RiverJobID) // River ends it without running it
		require.NoError(t, err)
		agree := requesttest.RequireAgreement
		found, err := requesttest.Disagreements(ctx, pool, staleAfter)
		require.NoError(t, err)
		require.Len(t, found, 1, "a QUEUED request whose River job ended is a disagreement: %v", found)
		_, err = owner.Reap(ctx, "metrics")
		require.NoError(t, err)
		agree(t, pool, staleAfter)
	})
}

// The checker finds each kind of disagreement (so the test above can fail):
// an ended request over a River job still available, a QUEUED request
// whose River job ended, and a RUNNING request held by a dead worker.
func TestDisagreements_FindEachKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{})
	ended, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "aptTrade", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	testfactory.FinishRequest(ctx, t, b.pool, ended.Request.ID, radartype.RequestDone, "ended behind River's back")
	queued, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	_, err = b.river.JobCancel(ctx, *queued.Request.RiverJobID)
	require.NoError(t, err)
	dead := testfactory.Worker(ctx, t, b.pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	running := testfactory.Execution(ctx, t, b.pool, &testfactory.ExecutionOpts{Job: "filingParse", WorkerID: dead.ID})

	found, err := requesttest.Disagreements(ctx, b.pool, time.Minute)
	require.NoError(t, err)
	require.Len(t, found, 3, "%v", found)
	require.Contains(t, found[0], "is DONE but its River job")
	require.Contains(t, found[1], "is QUEUED but its River job")
	require.Contains(t, found[2], "is RUNNING but no live execution holds it")
	require.Contains(t, found[2], fmt.Sprintf("request %d ", running.RequestID))
}

// riverStateOf returns the state of River job id, read through River's
// API.
func riverStateOf(t *testing.T, client *river.Client[pgx.Tx], id int64) rivertype.JobState {
	t.Helper()
	job, err := client.JobGet(context.Background(), id)
	require.NoError(t, err)
	return job.State
}

// The owner is the only writer of job_request and the only caller of
// River's end-of-job API: outside this package no production code calls a
// query that writes a request, nor River's JobCompleteTx, JobCancel or
// JobCancelTx (nor returns river.JobCancel from a worker), and no SQL
// outside queries/job_request.sql writes the table. The test harness
// (internal/apptest) writes rows of its own and is not production code.
func TestOwner_IsTheOnlyWriterOfRequests(t *testing.T) {
	t.Parallel()
	writers := regexp.MustCompile(`\.(JobRequestInsert|JobRequestClaim|JobRequestSetExecution|JobRequestFinish|JobRequestSetResumeCause)\(|\bJobCompleteTx\b|\.JobCancel(Tx)?\(|(?i)(insert\s+into|update|delete\s+from)\s+job_request\b`)
	var found []string
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "queue/request", "queries", "internal/apptest", "tools", "examples", ".git", ".cache", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if trimmed := strings.TrimSpace(line); !strings.HasPrefix(trimmed, "//") && writers.MatchString(line) {
				found = append(found, fmt.Sprintf("%s:%d: %s", rel, i+1, trimmed))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "requests are written, and River jobs ended, by the request owner only")
}

// A request's estimate is what its plan has left, bounded by its maxCalls,
// and that figure is what the daily cap admits: a creditEval whose whole
// plan (1,908 calls) is over a cap of 300 is refused naming maxCalls, and
// accepted with maxCalls 250, estimated at 250; a resume after 50 calls
// is estimated at the 1,858 left, or its maxCalls.
func TestEstimate_MaxCallsBoundsTheEstimateTheCapAdmits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{
		Catalog: catalog.NewCatalog(&catalog.Spec[noParams]{
			JobName: "creditEval", Desc: "test job", ProviderName: "CREDIT", Estimate: func(*noParams) int { return 1908 },
		}),
		DailyCaps: map[string]int{"CREDIT": 300},
	})
	maxCalls := func(n int) *int { return &n }
	params := func(max *int) *request.EnqueueParams {
		return &request.EnqueueParams{Job: "creditEval", Params: []byte("{}"), Source: radartype.SourceAPI, MaxCalls: max}
	}

	_, err := b.enqueuer.Estimate(ctx, b.pool, params(nil))
	var over *request.OverCapError
	require.ErrorAs(t, err, &over)
	require.Contains(t, err.Error(), "estimated 1908 calls exceed the CREDIT daily cap of 300; give maxCalls")
	_, err = b.enqueuer.Enqueue(ctx, params(maxCalls(301)))
	require.ErrorAs(t, err, &over, "a maxCalls over the cap is over the cap")
	require.Equal(t, float64(1), b.tel.Metric(t, observability.MetricRequests, map[string]string{"job": "creditEval", "source": "api", "result": "invalid"}),
		"the refused enqueue counted as invalid (an estimate counts nothing)")

	estimate, err := b.enqueuer.Estimate(ctx, b.pool, params(maxCalls(250)))
	require.NoError(t, err)
	require.Equal(t, 250, estimate.Calls)
	res, err := b.enqueuer.Enqueue(ctx, params(maxCalls(250)))
	require.NoError(t, err)
	require.Equal(t, 250, res.EstimatedCalls)
	require.EqualValues(t, 250, res.Request.EstimatedCalls)

	// The run stops after 50 calls: a resume has 1,858 left.
	exec := testfactory.Execution(ctx, t, b.pool, &testfactory.ExecutionOpts{
		RequestID: res.Request.ID, WorkerID: "w", Status: radartype.ExecutionStopped, ChunksTotal: 2,
		InstanceID: resumableInstance(t, b.pool, "creditEval"),
	})
	_, err = b.pool.Exec(ctx, `UPDATE job_execution SET external_calls = 50 WHERE id = $1`, exec.ID)
	require.NoError(t, err)
	b2, err := request.NewOwner(b.pool, b.river, request.Config{Catalog: b.jobCatalog, Instruments: b.instruments})
	require.NoError(t, err)
	estimate, err = b2.Estimate(ctx, b.pool, params(nil))
	require.NoError(t, err)
	require.Equal(t, exec.ID, *estimate.ResumesExecutionID)
	require.Equal(t, 1858, estimate.Calls, "the whole plan less the calls made, no chunk committed yet")
	estimate, err = b2.Estimate(ctx, b.pool, params(maxCalls(100)))
	require.NoError(t, err)
	require.Equal(t, 100, estimate.Calls)
}
