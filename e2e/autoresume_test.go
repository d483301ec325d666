package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// An operator's stop and a daily-cap stop stay stopped: the stop and its
// resume would commit in one transaction, so no resume the moment the stop
// is visible means none ever.
func TestAutoResume_DecisionsStayStopped(t *testing.T) {
	t.Parallel()
	t.Run("operator stop", func(t *testing.T) {
		t.Parallel()
		s := apptest.New(t, &apptest.Opts{Env: apptest.AutoResumeEnv, Fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
		s.StartWorker()
		id := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
		s.WaitChunksDone(id, 2)
		status, out := s.Post("/v1/jobs/aptTrade/stop", "")
		require.Equal(t, http.StatusAccepted, status, "%v", out)
		stopped := s.WaitRequest(id, "DONE", "FAILED")
		exec := apptest.Execution(t, stopped)
		require.Equal(t, "STOPPED", exec["status"])
		require.Equal(t, batch.MessageStopRequested, exec["exitMessage"])
		require.Empty(t, s.ResumeOf(exec["id"].(string)), "an operator's stop is never resumed")
		require.Equal(t, "operator", s.StopCause(exec["id"].(string)))
	})
	t.Run("daily cap", func(t *testing.T) {
		t.Parallel()
		s := apptest.New(t, &apptest.Opts{Env: apptest.AutoResumeEnv})
		// The API plans against a whole day's cap; the worker's cap is 10
		// calls, as if the day's budget were nearly spent.
		s.Env.DailyCaps["MOLIT"] = 10
		s.StartWorker()
		id := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
		stopped := s.WaitRequest(id, "DONE", "FAILED")
		exec := apptest.Execution(t, stopped)
		require.Equal(t, "STOPPED", exec["status"])
		require.Contains(t, exec["exitMessage"], "daily cap")
		require.Empty(t, s.ResumeOf(exec["id"].(string)), "a cap stop is never resumed")
		require.Equal(t, "cap", s.StopCause(exec["id"].(string)))
	})
}

// A resume is due while no River client anywhere is (or can become) the
// leader: its River job is inserted available and snoozed by the worker
// until the request's not_before, so it starts on time. Before, it was a
// scheduled River job that only the leader's scheduler makes available,
// and it never started.
func TestAutoResume_StartsWithoutALeader(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_AUTO_RESUME": "drain", "BUILDRISK_AUTO_RESUME_BACKOFF": "2s",
	}})
	noLeader := func(c *worker.Config, _ *batch.Config) { c.LeaderElectionDisabled = true }
	a, _ := s.StartWorkerWith(s.Pool, noLeader)
	s.Gate.Arm(2) // chunks 1-2 commit; chunk 3's call is held
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")

	drained := make(chan error, 1)
	go func() { drained <- a.Stop(context.Background()) }()
	apptest.WaitUntil(t, time.Minute, "worker A to drain", func() bool {
		return s.Count(`SELECT count(*) FROM worker WHERE id = $1 AND status = 'draining'`, a.ID()) == 1
	})
	s.Gate.Open()
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("worker A did not drain within a minute")
	}
	stopped := s.WaitRequest(id, "DONE", "FAILED")
	stoppedExec := apptest.Execution(t, stopped)
	require.Equal(t, "STOPPED", stoppedExec["status"], "%v", stopped)
	resumeID := s.ResumeOf(stoppedExec["id"].(string))
	require.NotEmpty(t, resumeID, "a drained run resumes by itself")

	s.StartWorkerWith(s.Pool, noLeader)
	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	var delay float64
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM claimed_at - not_before)::float8 FROM job_request WHERE id = $1::bigint`, resumeID).Scan(&delay))
	t.Logf("resume started %.2f s after it was due, with no River leader", delay)
	require.GreaterOrEqual(t, delay, 0.0, "never before its backoff")
	require.Less(t, delay, 10.0, "within 10 s of being due")
	apptest.RequireEachKeyOnce(t, s, 6)
}

// A provider answering 429 with a Retry-After of an hour is an instruction:
// after one paid call the run stops (STOPPED, cause provider-rate, the
// request DONE: not a failure, nothing pages), and its automatic resume is
// due when the provider said, an hour from the answer by the database's
// clock. Before, the client waited 5 s twice, and the run ended FAILED.
func TestAutoResume_ProviderRateResumesWhenTheProviderSaid(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{
		Env:  map[string]string{"BUILDRISK_AUTO_RESUME": request.AutoResumeCausesDefault},
		Fake: fakeupstream.Config{Rate429: 1, RetryAfter: time.Hour},
	})
	s.StartWorker()
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))

	stopped := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", stopped["status"], "%v", stopped)
	exec := apptest.Execution(t, stopped)
	execID := exec["id"].(string)
	require.Equal(t, "STOPPED", exec["status"], "%v", stopped)
	require.Equal(t, "provider-rate", s.StopCause(execID))
	require.Contains(t, exec["exitMessage"], "MOLIT")
	require.Contains(t, exec["exitMessage"], "Retry-After")
	require.Equal(t, int64(1), s.Fake.Stats().Total, "one paid call: no retry past the backoff cap")

	resumeID := s.ResumeOf(execID)
	require.NotEmpty(t, resumeID, "the run resumes by itself")
	var cause string
	var dueIn float64
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT resume_cause, extract(epoch FROM not_before - now())::float8 FROM job_request WHERE id = $1::bigint AND status = 'QUEUED'`,
		resumeID).Scan(&cause, &dueIn))
	require.Equal(t, "provider-rate", cause)
	require.Greater(t, dueIn, (50 * time.Minute).Seconds(), "due when the provider said, by the database's clock")
	require.LessOrEqual(t, dueIn, time.Hour.Seconds(), "an hour from the answer, not from the resume's insert")
	require.Less(t, dueIn, upstream.RetryAfterMaxDefault.Seconds())

	job := map[string]string{"job": "aptTrade"}
	require.Zero(t, s.Metric(observability.MetricExecutions, map[string]string{"job": "aptTrade", "status": "FAILED"}), "not a failure")
	require.Equal(t, float64(1), s.Metric(observability.MetricExecutions, map[string]string{"job": "aptTrade", "status": "STOPPED"}))
	require.Equal(t, float64(1), s.Metric(observability.MetricExecutionsStopped, map[string]string{"job": "aptTrade", "cause": "provider-rate"}))
	require.Equal(t, float64(1), s.Metric(observability.MetricAutoResumes, map[string]string{"job": "aptTrade", "cause": "provider-rate"}))
	require.Zero(t, s.Metric(observability.MetricFanoutRejections, job), "the stop is counted as such, not as a rejection that pages")
}

// With cap in BUILDRISK_AUTO_RESUME (opt-in), a run stopped by its
// provider's daily cap resumes by itself at the provider's next reset: on
// a clock the test moves, the day's 10 calls are spent a second before
// midnight (Asia/Seoul), the stop's resume waits for midnight (resumesAt),
// and once the clock has passed it the resume spends the new day's budget
// and completes the run, no call made twice.
func TestAutoResume_CapResumesAfterTheReset(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	clock := apptest.NewTestClock(time.Date(2026, 12, 8, 23, 59, 59, 0, seoul))
	s := apptest.New(t, &apptest.Opts{Now: clock.Now, Env: map[string]string{
		"BUILDRISK_AUTO_RESUME": "cap", "BUILDRISK_AUTO_RESUME_BACKOFF": "10ms",
	}})
	// The api admits against the whole day's cap; the worker's is 10
	// calls a day.
	s.Env.DailyCaps["MOLIT"] = 10
	s.StartWorker()
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-12")) // 12 calls
	stopped := s.WaitRequest(id, "DONE", "FAILED")
	exec := apptest.Execution(t, stopped)
	require.Equal(t, "STOPPED", exec["status"], "%v", stopped)
	require.Equal(t, "cap", exec["stopCause"])
	resumeID := s.ResumeOf(exec["id"].(string))
	require.NotEmpty(t, resumeID, "a capped run resumes by itself when cap is named")
	_, resume := s.Get("/v1/requests/" + resumeID)
	require.Equal(t, "QUEUED", resume["status"])
	resumesAt, err := time.Parse(time.RFC3339Nano, resume["resumesAt"].(string))
	require.NoError(t, err)
	created, err := time.Parse(time.RFC3339Nano, resume["createdAt"].(string))
	require.NoError(t, err)
	require.Equal(t, time.Second, resumesAt.Sub(created).Round(time.Millisecond), "it waits for the reset, a second away on the budget's clock")

	clock.Set(time.Date(2026, 12, 9, 0, 0, 1, 0, seoul)) // the new day's budget
	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.Equal(t, "cap", done["resumeCause"])
	calls := s.CallsPerKey("aptTrade")
	require.Len(t, calls, 12)
	for key, n := range calls {
		require.Equal(t, int64(1), n, key)
	}
	s.RequireRequestsAgreeWithRiver()
}
