package main

import (
	"context"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// autoResumeEnv turns automatic resume on, as it is by default outside tests.
var autoResumeEnv = map[string]string{
	"BUILDRISK_AUTO_RESUME":         "drain,reap",
	"BUILDRISK_AUTO_RESUME_BACKOFF": "10ms",
}

// resumeOf returns the id of the automatic resume of execution execID, or ""
// when there is none.
func (s *testSystem) resumeOf(execID string) string {
	s.t.Helper()
	var ids []string
	rows, err := s.pool.Query(context.Background(), `SELECT id::text FROM job_request WHERE source = 'resume' AND resumes_execution_id = $1::bigint`, execID)
	require.NoError(s.t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(s.t, err)
	require.LessOrEqual(s.t, len(ids), 1, "one automatic resume per stopped execution")
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// A worker SIGTERMed mid-run while a second worker is alive: the run
// continues on the second worker with no request by anyone, completes, and
// the provider saw every combination exactly once.
func TestAutoResume_DrainedRunContinuesOnAnotherWorker(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{env: autoResumeEnv, fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	env := s.processEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1"})

	draining := startRadar(t, bin, env, "worker")
	draining.waitLine(t, adminAddrLine)
	id := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
	drainingID := s.waitHeldBy(id)
	survivor := startRadar(t, bin, env, "worker")
	survivor.waitLine(t, adminAddrLine)

	s.waitChunksDone(id, 10)
	require.NoError(t, draining.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, draining.wait(t, 30*time.Second), "the drained worker exits 0")

	stopped := s.waitRequest(id, "DONE", "FAILED")
	stoppedExec := execution(t, stopped)
	require.Equal(t, "STOPPED", stoppedExec["status"])
	require.Equal(t, batch.MessageDrained, stoppedExec["exitMessage"])
	// The resume committed with the stop: it exists the moment the stop does.
	resumeID := s.resumeOf(stoppedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a drained run resumes by itself")

	done := s.waitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "resume", done["source"])
	require.Equal(t, "drain", done["resumeCause"])
	require.Equal(t, stoppedExec["id"], done["resumesExecutionId"])
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	require.NotEqual(t, drainingID, done["workerId"], "the survivor ran the rest")
	requireEachKeyOnce(t, s, 72)
	require.Equal(t, 2, s.count(`SELECT count(*) FROM job_request`), "nobody but the system asked again")
}

// kill -9 of a worker mid-run: after the reap, the run resumes by itself on
// the survivor and completes; only the chunk in flight is fetched again.
func TestAutoResume_ReapedRunResumesOnTheSurvivor(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{env: autoResumeEnv, fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	env := s.processEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1"})

	victim := startRadar(t, bin, env, "worker")
	victim.waitLine(t, adminAddrLine)
	id := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
	victimID := s.waitHeldBy(id)
	survivor := startRadar(t, bin, env, "worker")
	survivorAdmin := survivor.waitLine(t, adminAddrLine)[1]

	s.waitChunksDone(id, 5)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.wait(t, 10*time.Second)

	reaped := s.waitRequest(id, "DONE", "FAILED")
	require.Equal(t, "FAILED", reaped["status"])
	reapedExec := execution(t, reaped)
	require.Equal(t, "ABANDONED", reapedExec["status"])
	resumeID := s.resumeOf(reapedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a reaped run resumes by itself")

	done := s.waitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "reap", done["resumeCause"])
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	require.NotEqual(t, victimID, done["workerId"])
	refetched := 0
	for _, n := range s.callsPerKey("aptTrade") {
		if n > 1 {
			refetched++
		}
	}
	require.LessOrEqual(t, refetched, 1, "only the chunk in flight at the kill is fetched again")
	require.Len(t, s.callsPerKey("aptTrade"), 72)

	v, ok := metricLine(scrape(t, survivorAdmin), observability.MetricAutoResumes, `job="aptTrade"`, `cause="reap"`)
	require.True(t, ok)
	require.EqualValues(t, 1, v)
}

// An operator's stop and a daily-cap stop stay stopped: the stop and its
// resume would commit in one transaction, so no resume the moment the stop
// is visible means none ever.
func TestAutoResume_DecisionsStayStopped(t *testing.T) {
	t.Parallel()
	t.Run("operator stop", func(t *testing.T) {
		t.Parallel()
		s := newTestSystem(t, &testSystemOpts{env: autoResumeEnv, fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
		s.startWorker()
		id := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
		s.waitChunksDone(id, 2)
		status, out := s.post("/v1/jobs/aptTrade/stop", "")
		require.Equal(t, http.StatusAccepted, status, "%v", out)
		stopped := s.waitRequest(id, "DONE", "FAILED")
		exec := execution(t, stopped)
		require.Equal(t, "STOPPED", exec["status"])
		require.Equal(t, batch.MessageStopRequested, exec["exitMessage"])
		require.Empty(t, s.resumeOf(exec["id"].(string)), "an operator's stop is never resumed")
		require.Equal(t, "operator", s.stopCause(exec["id"].(string)))
	})
	t.Run("daily cap", func(t *testing.T) {
		t.Parallel()
		s := newTestSystem(t, &testSystemOpts{env: autoResumeEnv})
		// The API plans against a whole day's cap; the worker's cap is 10
		// calls, as if the day's budget were nearly spent.
		s.env.DailyCaps["MOLIT"] = 10
		s.startWorker()
		id := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
		stopped := s.waitRequest(id, "DONE", "FAILED")
		exec := execution(t, stopped)
		require.Equal(t, "STOPPED", exec["status"])
		require.Contains(t, exec["exitMessage"], "daily cap")
		require.Empty(t, s.resumeOf(exec["id"].(string)), "a cap stop is never resumed")
		require.Equal(t, "cap", s.stopCause(exec["id"].(string)))
	})
}

func (s *testSystem) stopCause(execID string) string {
	s.t.Helper()
	var cause string
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT stop_cause FROM job_execution WHERE id = $1::bigint`, execID).Scan(&cause))
	return cause
}

// A run that crashes its worker every time is resumed at most
// BUILDRISK_AUTO_RESUME_MAX times, then stays FAILED with the refusal
// counted (the alert BuildriskAutoResumeExhausted reads the counter). The
// test plays the survivors' reaper itself, so no other worker runs the job.
func TestAutoResume_CrashLoopStopsAtTheAttemptLimit(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	env := map[string]string{"BUILDRISK_AUTO_RESUME_MAX": "2"}
	for k, v := range autoResumeEnv {
		env[k] = v
	}
	s := newTestSystem(t, &testSystemOpts{env: env, fake: fakeupstream.Config{Latency: 50 * time.Millisecond}})
	riverClient, err := newInsertOnlyRiver(s.pool, s.tel)
	require.NoError(t, err)
	enqueuer, err := newEnqueuer(s.pool, riverClient, s.env, s.tel)
	require.NoError(t, err)
	reaper := worker.NewReaper(s.pool, worker.ReaperConfig{
		StaleAfter: s.env.StaleAfter, Instruments: s.tel.instruments, Logger: s.tel.logger, River: riverClient,
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := enqueuer.ResumeTx(ctx, tx, stopped)
			return err
		},
	})
	procEnv := s.processEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1", "BUILDRISK_REAP_INTERVAL": "1h"})

	id := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
	var lastExec map[string]any
	for crash := 0; crash <= 2; crash++ {
		victim := startRadar(t, bin, procEnv, "worker")
		victim.waitLine(t, regexp.MustCompile(`worker running`))
		s.waitHeldBy(id)
		require.NoError(t, victim.cmd.Process.Kill())
		victim.wait(t, 10*time.Second)

		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := reaper.Reap(context.Background(), "")
			require.NoError(t, err)
			if n == 1 {
				break
			}
			require.True(t, time.Now().Before(deadline), "the killed worker was never reaped")
			time.Sleep(100 * time.Millisecond)
		}
		reaped := s.waitRequest(id, "FAILED", "DONE")
		require.Equal(t, "FAILED", reaped["status"])
		lastExec = execution(t, reaped)
		next := s.resumeOf(lastExec["id"].(string))
		if crash < 2 {
			require.NotEmpty(t, next, "crash %d: attempt %d of 2 resumes", crash+1, crash+1)
			id = next
			continue
		}
		require.Empty(t, next, "the third crash of the day is not resumed")
	}
	require.Equal(t, 2, s.count(`SELECT count(*) FROM job_request WHERE source = 'resume'`))
	require.Zero(t, s.count(`SELECT count(*) FROM job_request WHERE status IN ('QUEUED', 'RUNNING')`), "the run stays FAILED")
	refused, err := observabilitytest.MetricValue(s.tel.providers, observability.MetricAutoResumesRefused, map[string]string{"job": "aptTrade", "cause": "reap"})
	require.NoError(t, err)
	require.EqualValues(t, 1, refused)
}

// A resume is due while no River client anywhere is (or can become) the
// leader: its River job is inserted available and snoozed by the worker
// until the request's not_before, so it starts on time. Before, it was a
// scheduled River job that only the leader's scheduler makes available,
// and it never started.
func TestAutoResume_StartsWithoutALeader(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{
		"BUILDRISK_AUTO_RESUME": "drain", "BUILDRISK_AUTO_RESUME_BACKOFF": "2s",
	}})
	noLeader := func(c *worker.Config, _ *batch.Config) { c.LeaderElectionDisabled = true }
	a, _ := s.startWorkerWith(s.pool, noLeader)
	s.gate.arm(2) // chunks 1-2 commit; chunk 3's call is held
	id := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	within(t, time.Minute, s.gate.blocked, "the third provider call")

	drained := make(chan error, 1)
	go func() { drained <- a.Drain(context.Background()) }()
	waitUntil(t, time.Minute, "worker A to drain", func() bool {
		return s.count(`SELECT count(*) FROM worker WHERE id = $1 AND status = 'draining'`, a.ID()) == 1
	})
	s.gate.open()
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("worker A did not drain within a minute")
	}
	stopped := s.waitRequest(id, "DONE", "FAILED")
	stoppedExec := execution(t, stopped)
	require.Equal(t, "STOPPED", stoppedExec["status"], "%v", stopped)
	resumeID := s.resumeOf(stoppedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a drained run resumes by itself")

	s.startWorkerWith(s.pool, noLeader)
	done := s.waitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	var delay float64
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM claimed_at - not_before)::float8 FROM job_request WHERE id = $1::bigint`, resumeID).Scan(&delay))
	t.Logf("resume started %.2f s after it was due, with no River leader", delay)
	require.GreaterOrEqual(t, delay, 0.0, "never before its backoff")
	require.Less(t, delay, 10.0, "within 10 s of being due")
	requireEachKeyOnce(t, s, 6)
}
