package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
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
	clock := newTestClock(time.Date(2026, 3, 31, 17, 59, 0, 0, seoul))
	s := newTestSystem(t, &testSystemOpts{
		env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "0 18 * * *"},
		now: clock.Now,
	})
	w, _ := s.startWorkerWith(s.pool, func(wc *worker.Config, rc *batch.Config) {
		wc.FetchPollInterval = time.Hour
		wc.SchedulePollInterval = 10 * time.Millisecond
		// The pickup is under test, not the jobs: both complete at once.
		rc.Jobs[jobs.Metrics] = noopJob{}
		rc.Jobs[jobs.Rules] = noopJob{}
	})
	s.waitLeader(w)

	due := time.Date(2026, 3, 31, 18, 0, 0, 0, seoul)
	clock.Set(due.Add(time.Second))
	s.eventually("the 18:00 metrics tick to be enqueued", func() bool { return s.tickOutcome(jobs.Metrics, due) == observability.TickEnqueued })
	waitClaimed(t, s, s.scheduledRequestID(jobs.Metrics, due))

	var chained string
	s.eventually("metrics to chain to rules", func() bool {
		err := s.pool.QueryRow(context.Background(), "SELECT id::text FROM job_request WHERE job = $1 AND source = 'chain'", jobs.Rules).Scan(&chained)
		return err == nil
	})
	waitClaimed(t, s, chained)
}

// `radar run`'s chained request is claimed on its notification: the CLI
// runs its own request in the foreground, and the request the run chains
// to is inserted through the CLI's insert-only River client, whose insert
// notifies the worker (poll at an hour here).
func TestPickup_CLIChainedInsertIsNotified(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, nil)
	s.startWorkerWith(s.pool, func(wc *worker.Config, rc *batch.Config) {
		wc.FetchPollInterval = time.Hour
		rc.Jobs[jobs.Rules] = noopJob{}
	})
	ctx := context.Background()
	// One tracked company with no data: metrics completes, and chains.
	_, err := s.pool.Exec(ctx, "INSERT INTO company (corp_code, name, tracked, execution_id) VALUES ('00000001', 'pickup', true, 0)")
	require.NoError(t, err)
	cli := startRadar(t, bin, s.processEnv(nil), "run", jobs.Metrics)
	require.Equal(t, exitOK, cli.wait(t, time.Minute))

	var chained string
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT id::text FROM job_request WHERE job = $1 AND source = 'chain'", jobs.Rules).Scan(&chained))
	waitClaimed(t, s, chained)
}
