package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// A request inserted right after another is claimed on its insert
// notification, not on the poll: the database announces every run's River
// job at its COMMIT (a trigger, in the message River's producers listen
// for), while the API's River client sends at most one notification of its
// own a day (River spaces an inserting client's NOTIFYs by its
// FetchCooldown; at its default of 100 ms, a request soon after another
// used to wait for the poll). The worker's poll is an hour here and both
// runs are held at their first provider call, so no poll and no completion
// can trigger the fetch that claims the second request.
func TestPickup_BackToBackInsertsAreNotified(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorkerWith(s.Pool, func(wc *worker.Config, _ *batch.Config) { wc.FetchPollInterval = time.Hour })
	s.Gate.Arm(0)
	defer s.Gate.Open()

	first := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	apptest.WaitClaimed(t, s, first)
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	apptest.WaitClaimed(t, s, out["requestId"].(string))
}

// The worker's own inserts notify too: a scheduled request and the request
// its run chains to are both claimed on their notifications, with the
// worker's poll at an hour and no completion or poll that could trigger the
// fetch instead. The two inserts come from the same River client (the
// worker's, which schedules and chains insert through), the chained one a
// whole run after the scheduled one: a client whose notifications were
// rate-limited beyond that (River's default FetchCooldown spaces them by
// 100 ms) or switched off leaves the chained request waiting for the poll,
// and the claim's deadline, far below the poll, fails the test.
func TestPickup_ScheduledAndChainedInsertsAreNotified(t *testing.T) {
	t.Parallel()
	clock := apptest.NewTestClock(time.Date(2026, 3, 31, 17, 59, 0, 0, seoul))
	s := apptest.New(t, &apptest.Opts{
		Env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "0 18 * * *"},
		Now: clock.Now,
	})
	w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) {
		wc.FetchPollInterval = time.Hour
		wc.SchedulePollInterval = 10 * time.Millisecond
		// The pickup is under test, not the jobs: both complete at once.
		rc.Jobs[riskmetric.Name] = apptest.NoopJob{}
		rc.Jobs[riskrule.Name] = apptest.NoopJob{}
	})
	s.WaitLeader(w)

	due := time.Date(2026, 3, 31, 18, 0, 0, 0, seoul)
	clock.Set(due.Add(time.Second))
	s.Eventually("the 18:00 metrics tick to be enqueued", func() bool { return s.TickOutcome(riskmetric.Name, due) == observability.TickEnqueued })
	apptest.WaitClaimed(t, s, s.ScheduledRequestID(riskmetric.Name, due))

	var chained string
	s.Eventually("metrics to chain to rules", func() bool {
		err := s.Pool.QueryRow(context.Background(), "SELECT id::text FROM job_request WHERE job = $1 AND source = 'chain'", riskrule.Name).Scan(&chained)
		return err == nil
	})
	apptest.WaitClaimed(t, s, chained)
}
