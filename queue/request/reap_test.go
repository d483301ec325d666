package request_test

import (
	"context"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// reaperStaleAfter is the stale window of the reaper tests: a worker whose
// heartbeat is an hour old is far past it, one that beat in the test's own
// transaction (whose now() does not move) is 0 s into it.
const reaperStaleAfter = 2 * time.Second

// reapPolicy resumes what a reap abandons, so the tests see the runs a
// reap hands to the resume policy as resume requests.
var reapPolicy = request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseReap}, MaxPerDay: 10}

// newReaper returns an owner (the process's reaper) with the reaper tests'
// stale window and reapPolicy, on a database of its own, configured by
// configure.
func newReaper(t *testing.T, configure ...func(*request.Config)) *resumeBundle {
	t.Helper()
	cfg := request.Config{StaleAfter: reaperStaleAfter, Resume: reapPolicy}
	for _, c := range configure {
		c(&cfg)
	}
	b := newBundle(t, cfg)
	pgtest.WaitServerUptime(t, b.pool, reaperStaleAfter)
	return b
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
	b := newReaper(t)
	pool, reaper, tel := b.pool, b.enqueuer, b.tel

	// One transaction: its now() is the same for the rows written and for
	// the reap, so the live worker's heartbeat is exactly 0 s old.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	dead := testfactory.Worker(ctx, t, tx, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	live := testfactory.Worker(ctx, t, tx, &testfactory.WorkerOpts{StartedAge: 24 * time.Hour})
	deadRun := testfactory.Execution(ctx, t, tx, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: dead.ID, InstanceID: resumableInstance(t, tx, "aptTrade")})
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

	// Only the run that started has anything to resume; its resume
	// commits with the reap.
	require.Equal(t, map[int64]radartype.StopCause{deadRun.ID: radartype.CauseReap}, b.resumes(t, tx))
	require.Equal(t, float64(3), tel.Metric(t, observability.MetricWorkerStaleHeartbeats, nil))

	n, err = reaper.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Zero(t, n, "what is finalized is not reaped again")
}

// Reap with a job reaps only that job's requests (the API's cleanup before
// an enqueue of that job).
func TestReaper_JobFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newReaper(t)
	pool, reaper := b.pool, b.enqueuer
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	apt := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: dead.ID})
	stock := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "stockPrice", WorkerID: dead.ID})

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
	b := newReaper(t)
	pool, reaper := b.pool, b.enqueuer
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	run := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: dead.ID})

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
	link := request.NewReachability()
	link.Observe(syscall.ECONNREFUSED)
	b := newReaper(t, func(c *request.Config) { c.Reachability = link })
	pool, reaper := b.pool, b.enqueuer
	dead := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
	run := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: dead.ID})

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	n, err := reaper.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, tx, run.ID).Status)

	// The same rows, judged by a reaper that was never cut off.
	fresh, err := request.NewOwner(pool, b.river, request.Config{Catalog: b.jobCatalog, StaleAfter: reaperStaleAfter, Instruments: b.instruments, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	n, err = fresh.ReapTx(ctx, tx, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A QUEUED request whose River job is gone, or ended without running it,
// will never run: the reaper fails it as orphaned (counted by reason, not
// as a stale worker's); a QUEUED request without a River job, or whose job
// is still there to run, is left alone.
func TestReaper_FailsOrphanedRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{StaleAfter: reaperStaleAfter})
	pool, reaper, tel := b.pool, b.enqueuer, b.tel
	gone := int64(424242)
	orphan := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "rules", RiverJobID: &gone})
	plain := testfactory.Request(ctx, t, pool, &testfactory.RequestOpts{Job: "metrics"})
	live, err := reaper.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	cancelled, err := reaper.Enqueue(ctx, &request.EnqueueParams{Job: "aptTrade", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	_, err = b.river.JobCancel(ctx, *cancelled.Request.RiverJobID)
	require.NoError(t, err)

	n, err := reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n, "an orphan is not a stale worker's")
	q := queries.New()
	for _, id := range []int64{orphan.ID, cancelled.Request.ID} {
		req, err := q.JobRequestGetByID(ctx, pool, id)
		require.NoError(t, err)
		require.Equal(t, "FAILED", req.Status)
		require.Equal(t, "no worker will run it: its River job ended without running it; request again", req.Message)
	}
	require.Equal(t, float64(1), tel.Metric(t, observability.MetricRequestsFailed, map[string]string{"job": "rules", "reason": observability.ReasonOrphaned}))
	require.Equal(t, float64(1), tel.Metric(t, observability.MetricRequestsFailed, map[string]string{"job": "aptTrade", "reason": observability.ReasonOrphaned}))
	require.Zero(t, tel.Metric(t, observability.MetricWorkerStaleHeartbeats, nil))
	for _, id := range []int64{plain.ID, live.Request.ID} {
		req, err := q.JobRequestGetByID(ctx, pool, id)
		require.NoError(t, err)
		require.Equal(t, "QUEUED", req.Status)
	}
	require.Equal(t, rivertype.JobStateAvailable, b.riverState(t, *live.Request.RiverJobID), "a request left alone keeps its River job")
}

// A worker that restarts in the same pid@hostname slot finalizes at once
// what its earlier boots left active, whatever their heartbeat says, and
// nothing of another slot's.
func TestReaper_CleanupPreviousBoots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, request.Config{Resume: reapPolicy})
	pool, reaper := b.pool, b.enqueuer
	old := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{ID: "7@slot-host#old"})
	neighbour := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{ID: "8@slot-host#old"})
	oldRun := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: old.ID, InstanceID: resumableInstance(t, pool, "aptTrade")})
	neighbourRun := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{Job: "stockPrice", WorkerID: neighbour.ID})
	n, err := reaper.CleanupPreviousBoots(ctx, "slot-host", 7, "7@slot-host#new")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	req, err := queries.New().JobRequestGetByID(ctx, pool, oldRun.RequestID)
	require.NoError(t, err)
	require.Equal(t, "FAILED", req.Status)
	require.Contains(t, req.Message, "worker 7@slot-host#old restarted as 7@slot-host#new")
	require.Equal(t, "ABANDONED", testfactory.ExecutionByID(ctx, t, pool, oldRun.ID).Status)
	require.Equal(t, "STARTED", testfactory.ExecutionByID(ctx, t, pool, neighbourRun.ID).Status)
	require.Equal(t, map[int64]radartype.StopCause{oldRun.ID: radartype.CauseReap}, b.resumes(t, pool))

	n, err = reaper.CleanupPreviousBoots(ctx, "slot-host", 7, "7@slot-host#new")
	require.NoError(t, err)
	require.Zero(t, n)
}
