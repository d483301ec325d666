package apptest

import (
	"net/http"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// RequestJob posts a request for job and returns the 202's body.
func (s *System) RequestJob(job, body string) map[string]any {
	s.T.Helper()
	status, out := s.Post("/v1/jobs/"+job+"/requests", body)
	require.Equal(s.T, http.StatusAccepted, status, "%s: %v", job, out)
	return out
}

// RunJob requests job, waits for it to end and requires it COMPLETED; it
// returns the 202's body and the finished request.
func (s *System) RunJob(job, body string) (accepted, done map[string]any) {
	s.T.Helper()
	accepted = s.RequestJob(job, body)
	done = s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec, ok := done["execution"].(map[string]any)
	require.True(s.T, ok, "%s: no execution: %v", job, done)
	require.Equal(s.T, "COMPLETED", exec["status"], "%s: %v", job, done)
	return accepted, done
}

// StartRadarWorker starts a worker whose corpCodeSync downloads into the
// test's temporary directory (nothing left behind in the system's).
func (s *System) StartRadarWorker() {
	s.T.Helper()
	dir := s.T.TempDir()
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir} })
}

// FakeCounts returns what the fake universe says about tracking: tracked
// (construction) companies, and the listed ones among them.
func FakeCounts(s *System) (tracked, listedTracked int) {
	for _, c := range s.Fake.Companies() {
		if c.Construction {
			tracked++
			if c.StockCode != "" {
				listedTracked++
			}
		}
	}
	return tracked, listedTracked
}
