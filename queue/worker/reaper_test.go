package worker_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// reaperStaleAfter is the stale window of the reaper tests: a worker whose
// heartbeat is an hour old is far past it, one that beat in the test's own
// transaction (whose now() does not move) is 0 s into it.
const reaperStaleAfter = 2 * time.Second

// stopped records the runs a reaper hands to the resume policy.
type stopped struct {
	mu   sync.Mutex
	runs []*request.Stopped
}

func (s *stopped) ResumeTx(_ context.Context, _ pgx.Tx, run *request.Stopped) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, run)
	return 0, nil
}

// The reaper finalizes what a worker whose heartbeat is older than the stale
// window holds, and nothing of a worker that beats: the dead worker's
// started run is ABANDONED and its request FAILED saying which worker
// stopped beating and when, handed to the resume policy with cause reap; a
// request it claimed but never started is FAILED saying nothing ran; a
// request held by a worker that never registered is reaped too. The live
// worker's run, however old, is left alone, and a second pass finds
// nothing more.
func TestReaper_ReapsOnlyStaleWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	waitServerUptime(t, pool, reaperStaleAfter)
	tel := newTelemetry(t)
	resumes := &stopped{}
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: reaperStaleAfter, Instruments: tel.instruments, Logger: discardLogger(), Resumer: resumes,
	})

	// One transaction: its now() is the same for the rows written and for
	// the reap, so the live worker's heartbeat is exactly 0 s old.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	dead := testfactory.Worker(ctx, t, tx, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	live := testfactory.Worker(ctx, t, tx, &testfactory.WorkerOpts{StartedAge: 24 * time.Hour})
	deadRun := testfactory.Execution(ctx, t, tx, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: dead.ID})
	deadClaim := testfactory.Request(ctx, t, tx, &testfactory.RequestOpts{Job: "filingParse", Status: radartype.RequestRunning, WorkerID: dead.ID})
	liveRun := testfactory.Execution(ctx, t, tx, &testfactory.ExecutionOpts{Job: "stockPrice", WorkerID: live.ID})
	unregistered := testfactory.Request(ctx, t, tx, &testfactory.RequestOpts{Job: "rules", Status: radartype.RequestRunning, WorkerID: "9@nowhere#gone"})

	n, err := reaper.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Equal(t, 3, n)

	q := queries.New()
	req, err := q.JobRequestGetByID(ctx, tx, deadRun.RequestID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Contains(t, req.Message, "worker "+dead.ID+" stopped heartbeating (last heartbeat "+dead.HeartbeatAt.UTC().Format(time.RFC3339)+" (1h0m0s ago)); execution abandoned")
	exec, err := q.JobExecutionGetByID(ctx, tx, deadRun.ID)
	require.NoError(t, err)
	require.Equal(t, "ABANDONED", exec.Status)
	require.Equal(t, req.Message, exec.ExitMessage)

	req, err = q.JobRequestGetByID(ctx, tx, deadClaim.ID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Contains(t, req.Message, "before it started the run; nothing ran")

	req, err = q.JobRequestGetByID(ctx, tx, unregistered.ID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Contains(t, req.Message, "worker 9@nowhere#gone stopped heartbeating (last heartbeat never)")

	req, err = q.JobRequestGetByID(ctx, tx, liveRun.RequestID)
	require.NoError(t, err)
	require.Equal(t, "RUNNING", req.Status, "a live worker's run is never reaped")
	exec, err = q.JobExecutionGetByID(ctx, tx, liveRun.ID)
	require.NoError(t, err)
	require.Equal(t, "STARTED", exec.Status)

	// Only the run that started has anything to resume.
	require.Len(t, resumes.runs, 1)
	require.Equal(t, deadRun.ID, resumes.runs[0].ExecutionID)
	require.Equal(t, radartype.CauseReap, resumes.runs[0].Cause)
	require.Equal(t, "FAILED", resumes.runs[0].Request.Status)
	require.Equal(t, float64(3), tel.metric(t, observability.MetricWorkerStaleHeartbeats, nil))

	n, err = reaper.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Zero(t, n, "what is finalized is not reaped again")
}

// Reap with a job reaps only that job's requests (the API's cleanup before
// an enqueue of that job).
func TestReaper_JobFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	waitServerUptime(t, pool, reaperStaleAfter)
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	apt := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: dead.ID})
	stock := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "stockPrice", WorkerID: dead.ID})
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: reaperStaleAfter, Instruments: newTelemetry(t).instruments, Logger: discardLogger()})

	n, err := reaper.Reap(ctx, "stockPrice")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, stock.ID).Status)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, pool, apt.ID).Status)

	n, err = reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, apt.ID).Status)
}

// An execution a dead worker's transaction still holds locked is skipped
// for the pass, not waited for; the next pass, once the lock is gone,
// reaps it.
func TestReaper_SkipsAnExecutionStillLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	waitServerUptime(t, pool, reaperStaleAfter)
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	run := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: dead.ID})
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: reaperStaleAfter, Instruments: newTelemetry(t).instruments, Logger: discardLogger()})

	// The lock is held by a connection that is not the dead worker's (whose
	// backends the reaper would end first).
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = queries.New().JobExecutionLockSkipLocked(ctx, holder, run.ID)
	require.NoError(t, err)

	// A pass that waited for the lock would wait for ever (the holder is
	// this test): the deadline turns that into a failure.
	passCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := reaper.Reap(passCtx, "")
	require.NoError(t, err, "the pass must skip the locked execution, not wait for it")
	require.Zero(t, n)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, pool, run.ID).Status)

	require.NoError(t, holder.Rollback(ctx))
	n, err = reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, run.ID).Status)
}

// A reaper whose own link to the database was cut reaps nothing while it is
// cut, however stale the heartbeats it reads: the workers may have been cut
// off with it.
func TestReaper_CutOffReapsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	waitServerUptime(t, pool, reaperStaleAfter)
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	run := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: dead.ID})
	link := worker.NewReachability()
	link.Observe(syscall.ECONNREFUSED)
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: reaperStaleAfter, Instruments: newTelemetry(t).instruments, Logger: discardLogger(), Reachability: link,
	})

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	n, err := reaper.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, tx, run.ID).Status)

	// The same rows, judged by a reaper that was never cut off.
	n, err = worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: reaperStaleAfter, Instruments: newTelemetry(t).instruments, Logger: discardLogger()}).ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// riverCancels records the River jobs a reaper cancels; River no longer
// holds any of them.
type riverCancels struct {
	mu  sync.Mutex
	ids []int64
}

func (c *riverCancels) JobCancelTx(_ context.Context, _ pgx.Tx, id int64) (*rivertype.JobRow, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, id)
	return nil, rivertype.ErrNotFound
}

// A QUEUED request whose River job is gone will never run: the reaper fails
// it as orphaned (counted by reason, not as a stale worker's) and asks
// River to cancel the job; a QUEUED request without a River job, or whose
// job is still there, is left alone.
func TestReaper_FailsOrphanedRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tel := newTelemetry(t)
	cancels := &riverCancels{}
	gone := int64(424242)
	orphan := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "rules", RiverJobID: &gone})
	plain := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "metrics"})
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: reaperStaleAfter, Instruments: tel.instruments, Logger: discardLogger(), River: cancels})

	n, err := reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n, "an orphan is not a stale worker's")
	q := queries.New()
	req, err := q.JobRequestGetByID(ctx, pool, orphan.ID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Equal(t, "no worker will run it: its River job ended without running it; request again", req.Message)
	require.Equal(t, []int64{gone}, cancels.ids)
	require.Equal(t, float64(1), tel.metric(t, observability.MetricRequestsFailed, map[string]string{"job": "rules", "reason": observability.ReasonOrphaned}))
	require.Zero(t, tel.metric(t, observability.MetricWorkerStaleHeartbeats, nil))
	req, err = q.JobRequestGetByID(ctx, pool, plain.ID)
	require.NoError(t, err)
	require.Equal(t, "QUEUED", req.Status)
}

// A worker that restarts in the same pid@hostname slot finalizes at once
// what its earlier boots left active, whatever their heartbeat says, and
// nothing of another slot's.
func TestReaper_CleanupPreviousBoots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	old := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{ID: "7@slot-host#old"})
	neighbour := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{ID: "8@slot-host#old"})
	oldRun := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: old.ID})
	neighbourRun := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "stockPrice", WorkerID: neighbour.ID})
	resumes := &stopped{}
	reaper := worker.NewReaper(pool, worker.ReaperConfig{Instruments: newTelemetry(t).instruments, Logger: discardLogger(), Resumer: resumes})

	n, err := reaper.CleanupPreviousBoots(ctx, "slot-host", 7, "7@slot-host#new")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	req, err := queries.New().JobRequestGetByID(ctx, pool, oldRun.RequestID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Contains(t, req.Message, "worker 7@slot-host#old restarted as 7@slot-host#new")
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, oldRun.ID).Status)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, pool, neighbourRun.ID).Status)
	require.Len(t, resumes.runs, 1)
	require.Equal(t, oldRun.ID, resumes.runs[0].ExecutionID)

	n, err = reaper.CleanupPreviousBoots(ctx, "slot-host", 7, "7@slot-host#new")
	require.NoError(t, err)
	require.Zero(t, n)
}

var _ request.JobCanceller = (*riverCancels)(nil)
