package e2e_test

import (
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// A run that cannot start keeps its real error: a worker of a rolling
// deploy that does not know the job fails the request with that error
// (counted as start_failed), instead of leaving it QUEUED for the reaper
// to call orphaned.
func TestWorker_StartFailureKeepsItsError(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { delete(rc.Jobs, "aptTrade") })
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	out := s.WaitRequest(id, "FAILED", "DONE")
	require.Equal(t, "FAILED", out["status"])
	require.Contains(t, out["message"], "the run could not start")
	require.Contains(t, out["message"], `job "aptTrade" is not registered in this process`)
	require.Equal(t, float64(1), s.Metric("buildrisk_requests_failed_total", map[string]string{"job": "aptTrade", "reason": "start_failed"}))
	// Its River job ended with the request, in the same transaction, and
	// says how: nothing is left for another worker to take.
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE state = 'completed'
		AND metadata->'output'->>'request_status' = 'FAILED' AND metadata->'output'->>'message' LIKE '%could not start%'`))
	s.RequireRequestsAgreeWithRiver()
}
