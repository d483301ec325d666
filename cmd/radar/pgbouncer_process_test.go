package main

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
)

// Through PgBouncer in transaction pooling mode, with the api and two worker
// processes: the README's walk-through, a duplicate burst (one 202, the
// rest 409, one execution) and a stop that a new request resumes to
// COMPLETED without a repeated provider call. Without BUILDRISK_DB_PGBOUNCER
// the same system does not even start (see the commit that added this
// test for what each missing piece breaks).
func TestPgBouncer_TransactionPooling(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{PgBouncer: true, Env: apptest.PgbouncerEnv})
	for range 2 {
		w := startRadar(t, bin, s.ProcessEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
	}

	// The README's walk-through.
	{
		body := apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03")
		s.Gate.Arm(1) // the run holds its second call: the duplicate below meets a running request
		status, out := s.Post("/v1/jobs/aptTrade/requests", body)
		require.Equal(t, http.StatusAccepted, status, "%v", out)
		require.Equal(t, float64(6), out["estimatedCalls"])
		require.Equal(t, "QUEUED", out["status"])
		id := out["requestId"].(string)
		apptest.Within(t, time.Minute, s.Gate.Blocked, "the run's second provider call")

		status, dup := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
		require.Equal(t, http.StatusConflict, status, "%v", dup)
		require.Equal(t, id, dup["activeRequestId"])
		s.Gate.Open()

		done := s.WaitRequest(id, "DONE", "FAILED")
		require.Equal(t, "DONE", done["status"], "%v", done)
		exec := apptest.Execution(t, done)
		require.Equal(t, "COMPLETED", exec["status"])
		require.Equal(t, float64(6), exec["chunksDone"])
		require.Equal(t, float64(6), exec["externalCalls"])

		status, jobs := s.Get("/v1/jobs")
		require.Equal(t, http.StatusOK, status, "%v", jobs)
		status, list := s.Get("/v1/requests?job=aptTrade&limit=10")
		require.Equal(t, http.StatusOK, status, "%v", list)
		require.Len(t, list["requests"], 1)
		status, workers := s.Get("/v1/workers")
		require.Equal(t, http.StatusOK, status, "%v", workers)
		alive := 0
		for _, w := range workers["workers"].([]any) {
			if w.(map[string]any)["alive"] == true {
				alive++
			}
		}
		require.Equal(t, 2, alive, "both worker processes registered and beat through PgBouncer: %v", workers)

		status, bad := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"1111"}, "2025-01", "2025-03"))
		require.Equal(t, http.StatusBadRequest, status, "%v", bad)
	}

	// A duplicate burst: one 202, the rest 409 naming it, one execution.
	{
		body := apptest.AptTradeBody([]string{"11170"}, "2025-01", "2025-02")
		s.Gate.Arm(0) // the winner's run holds its first call until every POST is answered
		accepted := s.PostBurst(t, body, 30)
		s.Gate.Open()
		done := s.WaitRequest(accepted, "DONE", "FAILED")
		require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
		require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_request WHERE params->'regions' = '["11170"]'`))
		require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_execution e JOIN job_request r ON r.execution_id = e.id WHERE r.params->'regions' = '["11170"]'`))
	}

	// Stop at a chunk boundary; a new request resumes it to COMPLETED.
	{
		body := apptest.AptTradeBody([]string{"11200", "11215"}, "2024-01", "2024-06")
		s.Gate.Arm(5)
		id := s.RequestAptTrade(body)
		apptest.Within(t, time.Minute, s.Gate.Blocked, "the sixth provider call") // chunk 6 is in flight, 5 are committed
		status, stop := s.Post("/v1/jobs/aptTrade/stop", "")
		require.Equal(t, http.StatusAccepted, status, "%v", stop)
		require.Equal(t, "STOPPING", stop["status"])
		s.Gate.Open()
		done := s.WaitRequest(id, "DONE", "FAILED")
		exec := apptest.Execution(t, done)
		require.Equal(t, "STOPPED", exec["status"], "%v", done)
		require.Equal(t, batch.MessageStopRequested, exec["exitMessage"])

		status, again := s.Post("/v1/jobs/aptTrade/requests", body)
		require.Equal(t, http.StatusAccepted, status, "%v", again)
		require.Equal(t, exec["id"], again["resumesExecutionId"])
		require.Equal(t, float64(6), again["estimatedCalls"], "the chunks left")
		resumed := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
		resumedExec := apptest.Execution(t, resumed)
		require.Equal(t, "COMPLETED", resumedExec["status"], "%v", resumed)
		require.Equal(t, float64(6), resumedExec["chunksDone"], "the resume's own chunks")
		require.Equal(t, float64(6), resumedExec["chunksBefore"])
		require.Equal(t, float64(12), resumed["instance"].(map[string]any)["chunksDone"])
	}

	// 6 + 2 + 12 combinations, each fetched exactly once: no chunk was
	// fetched twice, whichever worker ran it.
	apptest.RequireEachKeyOnce(t, s, 20)
	require.Zero(t, s.Count(`SELECT count(*) FROM job_request WHERE status = 'FAILED'`))

	// Pickup is River's fetch poll without LISTEN (docs/operations.md,
	// "PgBouncer"): logged, not asserted.
	var n int
	var median, slowest float64
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*),
		coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - created_at)), 0),
		coalesce(max(extract(epoch FROM claimed_at - created_at)), 0)
		FROM job_request WHERE claimed_at IS NOT NULL`).Scan(&n, &median, &slowest))
	t.Logf("pickup (claimed_at - created_at) of %d requests: median %.0f ms, slowest %.0f ms", n, median*1000, slowest*1000)
}
