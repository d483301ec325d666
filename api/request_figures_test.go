package api_test

import (
	"net/http"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
)

// figures are the chunks, items and calls of one execution view or
// instance view.
type figures struct {
	chunks, written, skipped, failed, calls float64
}

func figuresOf(v map[string]any) figures {
	return figures{
		chunks: v["chunksDone"].(float64), written: v["itemsWritten"].(float64), skipped: v["itemsSkipped"].(float64),
		failed: v["itemsFailed"].(float64), calls: v["externalCalls"].(float64),
	}
}

func (f figures) plus(g figures) figures {
	return figures{f.chunks + g.chunks, f.written + g.written, f.skipped + g.skipped, f.failed + g.failed, f.calls + g.calls}
}

// A run stopped mid-way (maxCalls 5 of 12 chunks) and resumed: each
// execution's chunks, items and calls are its own, the instance's are
// their sum, in GET /v1/requests/{id} and in the list alike; the resume's
// estimate (its 202, its request, the dry run) is the 7 calls left, the
// first run's the 5 of its maxCalls (the whole plan's 12, bounded by the
// maxCalls it stops at). The stopped run is listed by
// GET /v1/requests?outcome=STOPPED&endedOn=today.
func TestRequestPath_ResumedExecutionFigures(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()
	params := `{"regions":["11110","11140"],"from":"2025-01","to":"2025-06"}` // 12 chunks, a call each

	status, created := s.Post("/v1/jobs/aptTrade/requests", `{"params":`+params+`,"maxCalls":5}`)
	require.Equal(t, http.StatusAccepted, status, "%v", created)
	require.Equal(t, float64(5), created["estimatedCalls"], "a first run's estimate is the whole plan, bounded by its maxCalls")
	firstID := created["requestId"].(string)
	first := s.WaitRequest(firstID, "DONE", "FAILED")
	firstExec := apptest.Execution(t, first)
	require.Equal(t, "STOPPED", firstExec["status"], "%v", first)
	require.Equal(t, "max_calls", firstExec["stopCause"])

	status, dry := s.Post("/v1/jobs/aptTrade/estimate", `{"params":`+params+`}`)
	require.Equal(t, http.StatusOK, status, "%v", dry)
	status, resumed := s.Post("/v1/jobs/aptTrade/requests", `{"params":`+params+`}`)
	require.Equal(t, http.StatusAccepted, status, "%v", resumed)
	require.Equal(t, firstExec["id"], resumed["resumesExecutionId"])
	secondID := resumed["requestId"].(string)
	second := s.WaitRequest(secondID, "DONE", "FAILED")
	secondExec := apptest.Execution(t, second)
	require.Equal(t, "COMPLETED", secondExec["status"], "%v", second)
	// The first request read again, now that its instance is complete.
	_, first = s.Get("/v1/requests/" + firstID)
	firstExec = apptest.Execution(t, first)

	instance, ok := second["instance"].(map[string]any)
	require.True(t, ok, "%v", second)
	t.Logf("first execution:  chunksDone %v of chunksTotal %v (chunksBefore %v), written %v, calls %v; request estimatedCalls %v",
		firstExec["chunksDone"], firstExec["chunksTotal"], firstExec["chunksBefore"], firstExec["itemsWritten"], firstExec["externalCalls"], first["estimatedCalls"])
	t.Logf("resumed execution: chunksDone %v of chunksTotal %v (chunksBefore %v), written %v, calls %v; request estimatedCalls %v (202: %v, dry run: %v)",
		secondExec["chunksDone"], secondExec["chunksTotal"], secondExec["chunksBefore"], secondExec["itemsWritten"], secondExec["externalCalls"],
		second["estimatedCalls"], resumed["estimatedCalls"], dry["estimatedCalls"])
	t.Logf("instance: chunksDone %v of chunksPlanned %v, written %v, calls %v, executions %v",
		instance["chunksDone"], instance["chunksPlanned"], instance["itemsWritten"], instance["externalCalls"], instance["executions"])

	// Each execution: what it did itself, out of what it had to do.
	require.Equal(t, float64(5), firstExec["chunksDone"])
	require.Equal(t, float64(12), firstExec["chunksTotal"])
	require.Equal(t, float64(0), firstExec["chunksBefore"])
	require.Equal(t, float64(5), firstExec["externalCalls"])
	require.Equal(t, float64(7), secondExec["chunksDone"], "the chunks the resume committed, not the instance's 12")
	require.Equal(t, float64(7), secondExec["chunksTotal"], "the chunks left when it started")
	require.Equal(t, float64(5), secondExec["chunksBefore"], "committed by the first execution")
	require.Equal(t, float64(7), secondExec["externalCalls"])

	// The instance: the sum of its two executions, in both requests' views.
	require.Equal(t, float64(2), instance["executions"])
	require.Equal(t, float64(12), instance["chunksPlanned"])
	sum := figuresOf(firstExec).plus(figuresOf(secondExec))
	require.Equal(t, sum, figuresOf(instance), "per instance = the sum of its executions")
	require.Equal(t, figures{12, sum.written, sum.skipped, sum.failed, 12}, sum)
	require.Equal(t, float64(s.Count("SELECT count(*) FROM apt_trade")), sum.written)
	require.Equal(t, instance, first["instance"], "the first request's instance is the same instance")

	// The estimates: the whole plan bounded by its maxCalls for the first
	// run, what was left for the resume, in its 202, its request and the
	// dry run before it.
	require.Equal(t, float64(5), first["estimatedCalls"])
	require.Equal(t, float64(7), resumed["estimatedCalls"], "the resume's estimate is the calls of the 7 chunks left")
	require.Equal(t, float64(7), second["estimatedCalls"])
	require.Equal(t, float64(7), dry["estimatedCalls"], "the dry run answers what the request would")
	require.Equal(t, firstExec["id"], dry["resumesExecutionId"])

	// The list shows each execution as GET /v1/requests/{id} does.
	status, list := s.Get("/v1/requests?job=aptTrade")
	require.Equal(t, http.StatusOK, status, "%v", list)
	listed := map[string]map[string]any{}
	for _, r := range list["requests"].([]any) {
		r := r.(map[string]any)
		listed[r["requestId"].(string)] = r
	}
	for _, want := range []map[string]any{first, second} {
		got := apptest.Execution(t, listed[want["requestId"].(string)])
		exec := apptest.Execution(t, want)
		for _, field := range []string{"chunksDone", "chunksTotal", "chunksBefore", "itemsWritten", "externalCalls"} {
			require.Equal(t, exec[field], got[field], "request %s: %s", want["requestId"], field)
		}
	}

	// Stopped today: the first run, by the list's outcome filter.
	status, today := s.Get("/v1/requests?outcome=STOPPED&endedOn=today")
	require.Equal(t, http.StatusOK, status, "%v", today)
	require.Len(t, today["requests"], 1, "%v", today)
	require.Equal(t, firstID, today["requests"].([]any)[0].(map[string]any)["requestId"])
	status, old := s.Get("/v1/requests?outcome=STOPPED&endedOn=2000-01-01")
	require.Equal(t, http.StatusOK, status, "%v", old)
	require.Empty(t, old["requests"])
	status, out := s.Get("/v1/requests?endedOn=today")
	require.Equal(t, http.StatusBadRequest, status, "endedOn needs an outcome: %v", out)
	status, out = s.Get("/v1/requests?outcome=STOPPED&endedOn=yesterday")
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
}
