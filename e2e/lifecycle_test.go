package e2e_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// Stop via the API: STOPPING has no end time and still counts as running
// (409 for a new request); the job stops at the chunk boundary; only then
// is it STOPPED, and a new request resumes it without repeating a call.
func TestLifecycle_StopAtChunkBoundary(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()
	body := apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-06")

	s.Gate.Arm(5)
	id := s.RequestAptTrade(body)
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the sixth provider call") // chunk 6 is in flight, 5 are committed

	status, stop := s.Post("/v1/jobs/aptTrade/stop", "")
	require.Equal(t, http.StatusAccepted, status, "%v", stop)
	require.Equal(t, "STOPPING", stop["status"])

	_, req := s.Get("/v1/requests/" + id)
	require.Equal(t, "RUNNING", req["status"])
	exec := apptest.Execution(t, req)
	require.Equal(t, "STOPPING", exec["status"])
	require.Nil(t, exec["endedAt"], "STOPPING has no end time")
	status, dup := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusConflict, status, "a STOPPING job still counts as running")
	require.Equal(t, id, dup["activeRequestId"])
	_, aptTrade := s.Get("/v1/jobs/aptTrade")
	require.Equal(t, true, aptTrade["running"])

	s.Gate.Open()
	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", done["status"])
	exec = apptest.Execution(t, done)
	require.Equal(t, "STOPPED", exec["status"])
	require.Equal(t, float64(6), exec["chunksDone"], "the chunk in flight finished and committed")
	require.Equal(t, batch.MessageStopRequested, exec["exitMessage"])
	require.NotNil(t, exec["endedAt"])

	status, again := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, exec["id"], again["resumesExecutionId"])
	resumed := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
	resumedExec := apptest.Execution(t, resumed)
	require.Equal(t, "COMPLETED", resumedExec["status"], "%v", resumed)
	require.Equal(t, float64(6), resumedExec["chunksDone"], "the resume's own chunks")
	require.Equal(t, float64(6), resumedExec["chunksBefore"])
	require.Equal(t, float64(6), resumedExec["externalCalls"])
	require.Equal(t, float64(12), resumed["instance"].(map[string]any)["chunksDone"])
	apptest.RequireEachKeyOnce(t, s, 12)

	status, _ = s.Post("/v1/jobs/aptTrade/stop", "")
	require.Equal(t, http.StatusConflict, status, "nothing runs")
}

// A stop is bounded like a drain, end to end: against a provider
// that does not answer, POST /v1/jobs/{job}/stop ends the run within the
// stop timeout, not when the provider client gives up. The held call is
// abandoned by its caller, its chunk rolls back, the execution is STOPPED
// with cause operator and the request DONE.
func TestLifecycle_StopBoundedLikeADrain(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_STOP_TIMEOUT": "300ms"}})
	s.StartWorker()
	s.Gate.Arm(2)
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call") // chunk 3 is in flight, 2 are committed

	status, stop := s.Post("/v1/jobs/aptTrade/stop", "")
	require.Equal(t, http.StatusAccepted, status, "%v", stop)
	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", done["status"], "%v", done)
	exec := apptest.Execution(t, done)
	require.Equal(t, "STOPPED", exec["status"])
	require.Equal(t, batch.MessageStopTimeout, exec["exitMessage"])
	require.Equal(t, float64(2), exec["chunksDone"], "the chunk of the abandoned call rolled back")
	require.Equal(t, "operator", s.StopCause(exec["id"].(string)))
	apptest.Within(t, time.Minute, s.Gate.Abandoned, "the held call given up by its caller")
	s.Gate.Open()
}

// Restart rules: equal params resume; different params start a new instance
// from scratch; an execution that carried confirmPurge is never resumed.
func TestLifecycle_RestartRules(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()

	stopped := func(body string) string {
		id := s.RequestAptTrade(body)
		out := s.WaitRequest(id, "DONE", "FAILED")
		exec := apptest.Execution(t, out)
		require.Equal(t, "STOPPED", exec["status"], "%v", out)
		return exec["id"].(string)
	}
	withMax := func(params string, maxCalls int, extra string) string {
		return `{"params":` + params + `,"maxCalls":` + itoa(maxCalls) + extra + `}`
	}
	paramsA := `{"regions":["11110"],"from":"2025-01","to":"2025-04"}`
	paramsB := `{"regions":["11110"],"from":"2025-01","to":"2025-05"}`

	// maxCalls stops after exactly that many calls, resumable.
	first := stopped(withMax(paramsA, 2, ""))
	require.Equal(t, int64(2), s.Fake.Stats().Total)

	// Different params: a new instance, all its chunks fetched.
	status, out := s.Post("/v1/jobs/aptTrade/requests", `{"params":`+paramsB+`}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, out["resumesExecutionId"])
	fresh := s.WaitRequest(out["requestId"].(string), "DONE")
	require.Equal(t, float64(5), apptest.Execution(t, fresh)["externalCalls"])
	require.Equal(t, float64(5), apptest.Execution(t, fresh)["chunksDone"])

	// A completed execution is not resumed either: equal params run again.
	status, out = s.Post("/v1/jobs/aptTrade/requests", `{"params":`+paramsB+`}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, out["resumesExecutionId"])
	s.WaitRequest(out["requestId"].(string), "DONE")

	// confirmPurge: that execution is never resumed, and a new confirmPurge
	// does not resume an earlier execution.
	purged := stopped(withMax(paramsA, 1, `,"confirmPurge":true`))
	status, out = s.Post("/v1/jobs/aptTrade/requests", `{"params":`+paramsA+`,"maxCalls":1}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, out["resumesExecutionId"], "execution %s carried confirmPurge", purged)
	plain := s.WaitRequest(out["requestId"].(string), "DONE")
	plainExec := apptest.Execution(t, plain)
	require.Equal(t, "STOPPED", plainExec["status"])
	status, out = s.Post("/v1/jobs/aptTrade/requests", `{"params":`+paramsA+`,"confirmPurge":true}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, out["resumesExecutionId"], "a new confirmation starts fresh")
	s.WaitRequest(out["requestId"].(string), "DONE")

	// Equal params without confirmPurge resume the newest STOPPED execution.
	stoppedAgain := stopped(withMax(paramsA, 1, ""))
	status, out = s.Post("/v1/jobs/aptTrade/requests", `{"params":`+paramsA+`}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, stoppedAgain, out["resumesExecutionId"])
	resumed := s.WaitRequest(out["requestId"].(string), "DONE")
	require.Equal(t, float64(3), apptest.Execution(t, resumed)["externalCalls"], "3 of 4 chunks left")
	require.NotEqual(t, first, stoppedAgain)
}

// Daily cap: enforced at call time in PostgreSQL; reaching it stops the job
// (STOPPED, resumable) after exactly cap calls; the next day resumes it.
func TestLifecycle_DailyCap(t *testing.T) {
	t.Parallel()
	var day atomic.Int64
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := apptest.New(t, &apptest.Opts{Now: func() time.Time { return base.Add(time.Duration(day.Load()) * 24 * time.Hour) }})
	// The API plans against a whole day's cap (10,000); the worker's cap is
	// 10 calls, as if the day's budget were nearly spent.
	s.Env.DailyCaps["MOLIT"] = 10
	s.StartWorker()

	body := apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12")
	id := s.RequestAptTrade(body)
	out := s.WaitRequest(id, "DONE", "FAILED")
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"], "%v", out)
	require.Equal(t, "daily cap of MOLIT reached; resumes from the last commit", exec["exitMessage"])
	require.Equal(t, float64(10), exec["chunksDone"])
	require.Equal(t, int64(10), s.Fake.Stats().Total, "exactly cap calls")
	require.Equal(t, float64(1), s.Metric("buildrisk_external_calls_total", map[string]string{"provider": "MOLIT", "outcome": "capped"}))

	// Same day: still capped, nothing called; the refusal is counted.
	again := s.RequestAptTrade(body)
	againExec := apptest.Execution(t, s.WaitRequest(again, "DONE"))
	require.Equal(t, "STOPPED", againExec["status"])
	require.Equal(t, exec["id"], mustResumes(t, s, again))
	require.Equal(t, int64(10), s.Fake.Stats().Total)
	require.Equal(t, float64(2), s.Metric("buildrisk_external_calls_total", map[string]string{"provider": "MOLIT", "outcome": "capped"}))

	// Next day: a new request resumes at chunk 11 and makes the day's 10.
	day.Store(1)
	status, next := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, againExec["id"], next["resumesExecutionId"])
	nextExec := apptest.Execution(t, s.WaitRequest(next["requestId"].(string), "DONE"))
	require.Equal(t, "STOPPED", nextExec["status"])
	require.Equal(t, float64(10), nextExec["chunksDone"], "the day's own chunks")
	require.Equal(t, float64(10), nextExec["chunksBefore"])
	require.Equal(t, float64(10), nextExec["externalCalls"])
	apptest.RequireEachKeyOnce(t, s, 20)
	first := map[string]bool{}
	for _, region := range apptest.SixRegions[:1] {
		for m := 1; m <= 12; m++ {
			first[region+":2025"+twoDigits(m)] = true
		}
	}
	// Chunks run in plan order: region 11110's 12 months come first.
	require.Subset(t, apptest.Keys(s.CallsPerKey("aptTrade")), apptest.Keys(first))
}

func mustResumes(t *testing.T, s *apptest.System, requestID string) any {
	t.Helper()
	_, out := s.Get("/v1/requests/" + requestID)
	return out["resumesExecutionId"]
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + itoa(n)
	}
	return itoa(n)
}

// A provider failing one combination fails the execution with a message
// naming provider, call and status; nothing committed is lost, and after the
// fault is fixed a new request resumes without repeating a committed call.
func TestLifecycle_UpstreamFailure(t *testing.T) {
	t.Parallel()
	broken := fakeupstream.Config{FailKeys: map[string][]string{"aptTrade": {"11140:202502"}}}
	s := apptest.New(t, &apptest.Opts{Fake: broken})
	s.StartWorker()

	body := apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03")
	id := s.RequestAptTrade(body)
	out := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "FAILED", out["status"])
	exec := apptest.Execution(t, out)
	require.Equal(t, "FAILED", exec["status"])
	require.Contains(t, exec["exitMessage"], "MOLIT aptTrade 11140:202502: HTTP 500 after 3 attempts")
	require.Equal(t, float64(4), exec["chunksDone"], "the chunks before the failure stay committed")
	// River never contradicts the request: the River job only delivered
	// it, and ended at the claim, completed, with an output that names the
	// request and its execution, where the outcome is kept; none is left
	// running under the FAILED request.
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job j JOIN job_request r ON r.river_job_id = j.id
		WHERE r.id = $1 AND j.state = 'completed' AND (j.metadata->'output'->>'request_id')::bigint = r.id
		AND (j.metadata->'output'->>'execution_id')::bigint = r.execution_id`, id))
	require.Zero(t, s.Count(`SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled')`))

	s.Fake.SetConfig(fakeupstream.Config{})
	status, again := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, exec["id"], again["resumesExecutionId"])
	done := s.WaitRequest(again["requestId"].(string), "DONE")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"])
	calls := s.CallsPerKey("aptTrade")
	require.Equal(t, int64(4), calls["11140:202502"], "3 failed attempts, then 1 good call")
	delete(calls, "11140:202502")
	for key, n := range calls {
		require.Equal(t, int64(1), n, key)
	}
}

// A provider answering 200 with its body cut short of its Content-Length
// (the connection closed) is the provider's failure, not the database's:
// the client's 3 attempts, then the execution fails naming the provider and
// the call. Before, pgtx.IsTransient took the unexpected EOF for a
// database outage and the runner redid the chunk for RecordRetryWindow
// (120 calls for one item), ending "database errors ... retried in vain".
func TestLifecycle_ProviderCutBody(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{CutBodyRate: 1}})
	s.StartWorker()

	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	out := s.WaitRequest(id, "DONE", "FAILED")
	exec := apptest.Execution(t, out)
	require.Equal(t, "FAILED", exec["status"])
	msg, _ := exec["exitMessage"].(string)
	require.Contains(t, msg, "MOLIT aptTrade 11110:202501")
	require.Contains(t, msg, "unexpected EOF after 3 attempts")
	require.NotContains(t, msg, "database")
	require.LessOrEqual(t, s.Fake.Stats().Total, int64(3), "the client's attempts, no chunk retried: %s", msg)
}

// Past the drain timeout the chunk in flight is cancelled and rolls back;
// the execution is still recorded STOPPED, the request DONE, and the River
// job, which ended at the claim, is never handed to another worker.
func TestLifecycle_DrainTimeout(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DRAIN_TIMEOUT": "300ms"}})
	w, _ := s.StartWorker()
	s.Gate.Arm(2)
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")

	require.NoError(t, w.Stop(context.Background()))
	out := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", out["status"])
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"])
	require.Equal(t, batch.MessageDrainTimeout, exec["exitMessage"])
	require.Equal(t, float64(2), exec["chunksDone"], "the cancelled chunk rolled back")
	require.Equal(t, 2, s.Count("SELECT count(*) FROM job_checkpoint"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job WHERE state = 'completed'"), "the delivery ended at the claim")
	require.Zero(t, s.Count(`SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled')`),
		"nothing left for another worker to take")
	s.Gate.Open()
}

// A soft drain stops at the next chunk boundary: the chunk in flight
// finishes and commits, then the execution is STOPPED and the request DONE.
func TestLifecycle_DrainAtChunkBoundary(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	w, _ := s.StartWorker()
	s.Gate.Arm(3)
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the fourth provider call")

	drained := make(chan error, 1)
	go func() { drained <- w.Stop(context.Background()) }()
	apptest.WaitUntil(t, time.Minute, "the worker to report draining", func() bool { return w.Status() == "draining" })
	require.ErrorContains(t, w.Ready(context.Background()), "draining", "/readyz fails while draining")
	// Drain tells the runner before it reports draining: the chunk in
	// flight is the last one, whenever it ends.
	s.Gate.Open()
	require.NoError(t, <-drained)
	out := s.WaitRequest(id, "DONE", "FAILED")
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"])
	require.Equal(t, batch.MessageDrained, exec["exitMessage"])
	require.Equal(t, float64(4), exec["chunksDone"])
}

func itoa(n int) string { return apptest.FmtInt(n) }
