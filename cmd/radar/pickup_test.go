package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/batch"
	"github.com/buildrisk/radar/jobs/worker"
)

// A request inserted right after another is claimed on its insert
// notification, not on the poll: the API's River client notifies on every
// insert (River spaces an inserting client's NOTIFYs by its FetchCooldown,
// which was 100 ms). The worker's poll is an hour here and both runs are
// held at their first provider call, so no poll and no completion can
// trigger the fetch that claims the second request.
func TestPickup_BackToBackInsertsAreNotified(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	s.startWorkerWith(s.pool, func(wc *worker.Config, _ *batch.Config) { wc.FetchPollInterval = time.Hour })
	s.gate.arm(0)
	defer s.gate.open()

	first := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	waitClaimed(t, s, first)
	status, out := s.post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	waitClaimed(t, s, out["requestId"].(string))
}

// waitClaimed polls a request until a worker has claimed it.
func waitClaimed(t *testing.T, s *testSystem, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, out := s.get("/v1/requests/" + id)
		require.Equal(t, http.StatusOK, status)
		if out["status"] != "QUEUED" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s was not claimed without the poll: %v", id, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
