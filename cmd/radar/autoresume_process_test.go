package main

import (
	"context"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability/observabilitytest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// A worker SIGTERMed mid-run while a second worker is alive: the run
// continues on the second worker with no request by anyone, completes, and
// the provider saw every combination exactly once.
func TestAutoResume_DrainedRunContinuesOnAnotherWorker(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Env: apptest.AutoResumeEnv, Fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	env := s.ProcessEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1"})

	draining := startRadar(t, bin, env, "worker")
	draining.waitLine(t, apptest.AdminAddrLine)
	id := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
	drainingID := s.WaitHeldBy(id)
	survivor := startRadar(t, bin, env, "worker")
	survivor.waitLine(t, apptest.AdminAddrLine)

	s.WaitChunksDone(id, 10)
	require.NoError(t, draining.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, draining.Wait(t, 30*time.Second), "the drained worker exits 0")

	stopped := s.WaitRequest(id, "DONE", "FAILED")
	stoppedExec := apptest.Execution(t, stopped)
	require.Equal(t, "STOPPED", stoppedExec["status"])
	require.Equal(t, batch.MessageDrained, stoppedExec["exitMessage"])
	// The resume committed with the stop: it exists the moment the stop does.
	resumeID := s.ResumeOf(stoppedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a drained run resumes by itself")

	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "resume", done["source"])
	require.Equal(t, "drain", done["resumeCause"])
	require.Equal(t, stoppedExec["id"], done["resumesExecutionId"])
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.NotEqual(t, drainingID, done["workerId"], "the survivor ran the rest")
	apptest.RequireEachKeyOnce(t, s, 72)
	require.Equal(t, 2, s.Count(`SELECT count(*) FROM job_request`), "nobody but the system asked again")
}

// kill -9 of a worker mid-run: after the reap, the run resumes by itself on
// the survivor and completes; only the chunk in flight is fetched again.
func TestAutoResume_ReapedRunResumesOnTheSurvivor(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Env: apptest.AutoResumeEnv, Fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	env := s.ProcessEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1"})

	victim := startRadar(t, bin, env, "worker")
	victim.waitLine(t, apptest.AdminAddrLine)
	id := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
	victimID := s.WaitHeldBy(id)
	survivor := startRadar(t, bin, env, "worker")
	survivorAdmin := survivor.waitLine(t, apptest.AdminAddrLine)[1]

	s.WaitChunksDone(id, 5)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.Wait(t, 10*time.Second)

	reaped := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "FAILED", reaped["status"])
	reapedExec := apptest.Execution(t, reaped)
	require.Equal(t, "ABANDONED", reapedExec["status"])
	resumeID := s.ResumeOf(reapedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a reaped run resumes by itself")

	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "reap", done["resumeCause"])
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.NotEqual(t, victimID, done["workerId"])
	refetched := 0
	for _, n := range s.CallsPerKey("aptTrade") {
		if n > 1 {
			refetched++
		}
	}
	require.LessOrEqual(t, refetched, 1, "only the chunk in flight at the kill is fetched again")
	require.Len(t, s.CallsPerKey("aptTrade"), 72)

	v, ok := apptest.MetricLine(apptest.Scrape(t, survivorAdmin), observability.MetricAutoResumes, `job="aptTrade"`, `cause="reap"`)
	require.True(t, ok)
	require.EqualValues(t, 1, v)
	// Every request has ended, and none over a live River job: the killed
	// worker's delivery ended at its claim, without River's rescuer.
	require.Zero(t, s.Count(`SELECT count(*) FROM job_request WHERE status IN ('QUEUED', 'RUNNING')`))
	s.RequireRequestsAgreeWithRiver()
}

// A run that crashes its worker every time is resumed at most
// BUILDRISK_AUTO_RESUME_MAX times, then stays FAILED with the refusal
// counted (the alert BuildriskAutoResumeExhausted reads the counter). The
// test plays the survivors' reaper itself, so no other worker runs the job.
func TestAutoResume_CrashLoopStopsAtTheAttemptLimit(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	env := map[string]string{"BUILDRISK_AUTO_RESUME_MAX": "2"}
	for k, v := range apptest.AutoResumeEnv {
		env[k] = v
	}
	s := apptest.New(t, &apptest.Opts{Env: env, Fake: fakeupstream.Config{Latency: 50 * time.Millisecond}})
	reaper := s.Role.Owner() // the api's, which resumes what it reaps
	procEnv := s.ProcessEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1", "BUILDRISK_REAP_INTERVAL": "1h"})

	id := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
	var lastExec map[string]any
	for crash := 0; crash <= 2; crash++ {
		victim := startRadar(t, bin, procEnv, "worker")
		victim.waitLine(t, regexp.MustCompile(`worker running`))
		s.WaitHeldBy(id)
		require.NoError(t, victim.cmd.Process.Kill())
		victim.Wait(t, 10*time.Second)

		apptest.WaitUntil(t, 30*time.Second, "the killed worker to be reaped", func() bool {
			n, err := reaper.Reap(context.Background(), "")
			require.NoError(t, err)
			return n == 1
		})
		reaped := s.WaitRequest(id, "FAILED", "DONE")
		require.Equal(t, "FAILED", reaped["status"])
		lastExec = apptest.Execution(t, reaped)
		next := s.ResumeOf(lastExec["id"].(string))
		if crash < 2 {
			require.NotEmpty(t, next, "crash %d: attempt %d of 2 resumes", crash+1, crash+1)
			id = next
			continue
		}
		require.Empty(t, next, "the third crash of the day is not resumed")
	}
	require.Equal(t, 2, s.Count(`SELECT count(*) FROM job_request WHERE source = 'resume'`))
	require.Zero(t, s.Count(`SELECT count(*) FROM job_request WHERE status IN ('QUEUED', 'RUNNING')`), "the run stays FAILED")
	refused, err := observabilitytest.MetricValue(s.Tel.Providers, observability.MetricAutoResumesRefused, map[string]string{"job": "aptTrade", "cause": "reap"})
	require.NoError(t, err)
	require.EqualValues(t, 1, refused)
}
