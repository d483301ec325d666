package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

var seoul = func() *time.Location {
	loc, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		panic(err)
	}
	return loc
}()

// A tick that meets an active request is kept, not dropped: it is enqueued
// when that request ends, with its own day. A long manual stockPrice run
// holds the job from before 18:00 until after midnight, and the scheduler
// only gets to the 18:00 due time after midnight; the due time of
// 2026-03-31 still fetches 2026-03-31, not the day it ran.
func TestSchedule_DeferredTickKeepsItsDate(t *testing.T) {
	t.Parallel()
	clock := apptest.NewTestClock(time.Date(2026, 3, 31, 17, 0, 0, 0, seoul))
	s := apptest.New(t, &apptest.Opts{
		Env:  map[string]string{"BUILDRISK_SCHEDULE_STOCKPRICE": "0 18 * * 1-5"},
		Fake: fakeupstream.Config{Companies: 400},
		Now:  clock.Now,
	})
	s.StartScheduler()
	s.RunJob(corpcode.Name, `{}`)
	_, listed := apptest.FakeCounts(s)
	require.Positive(t, listed)

	// The backfill: a manual run held at its first provider call.
	s.Gate.Arm(0)
	manual := s.RequestJob(stockprice.Name, `{"params":{"date":"2026-03-30"}}`)["requestId"].(string)
	<-s.Gate.Blocked

	// The scheduler first sees the 18:00 due time after midnight (a
	// failover, a pause): still within the catch-up window, so it is
	// deferred behind the backfill, with the due time's day as its params.
	due := time.Date(2026, 3, 31, 18, 0, 0, 0, seoul)
	clock.Set(time.Date(2026, 4, 1, 0, 10, 0, 0, seoul))
	s.Eventually("the 18:00 tick to be deferred", func() bool { return s.TickOutcome(stockprice.Name, due) == observability.TickDeferred })
	_, job := s.Get("/v1/jobs/stockPrice")
	require.Equal(t, "deferred", job["lastDueOutcome"])
	require.Equal(t, manual, job["activeRequestId"])

	// The backfill ends.
	clock.Set(time.Date(2026, 4, 1, 0, 30, 0, 0, seoul))
	s.Gate.Open()
	s.WaitRequest(manual, "DONE")
	s.Eventually("the deferred tick to be enqueued", func() bool { return s.TickOutcome(stockprice.Name, due) == observability.TickEnqueued })

	scheduled := s.WaitRequest(s.ScheduledRequestID(stockprice.Name, due), "DONE", "FAILED")
	require.Equal(t, "DONE", scheduled["status"], "%v", scheduled)
	require.Equal(t, "schedule", scheduled["source"])
	require.JSONEq(t, `{"date":"2026-03-31"}`, mustJSON(t, scheduled["params"]))
	dueAt, err := time.Parse(time.RFC3339, scheduled["dueAt"].(string))
	require.NoError(t, err)
	require.True(t, due.Equal(dueAt), "dueAt %s", dueAt)
	_, manualView := s.Get("/v1/requests/" + manual)
	require.Contains(t, manualView, "dueAt")
	require.Nil(t, manualView["dueAt"], "a request made by hand has no due time")

	// KRX was asked for the tick's day, for every listed company, and never
	// for the day the request ran.
	var tickDay, runDay int
	for key := range s.CallsPerKey(fakeupstream.EndpointStockPrice) {
		switch {
		case strings.HasSuffix(key, ":20260331"):
			tickDay++
		case strings.HasSuffix(key, ":20260401"):
			runDay++
		}
	}
	require.Equal(t, listed, tickDay)
	require.Zero(t, runDay)

	require.InDelta(t, 1, s.Ticks(stockprice.Name, observability.TickDeferred), 0)
	require.InDelta(t, 1, s.Ticks(stockprice.Name, observability.TickEnqueued), 0)
	_, job = s.Get("/v1/jobs/stockPrice")
	require.Equal(t, "enqueued", job["lastDueOutcome"])
	require.Equal(t, s.ScheduledRequestID(stockprice.Name, due), job["lastDueRequestId"])
	next, err := time.Parse(time.RFC3339, job["next"].(string))
	require.NoError(t, err)
	require.True(t, time.Date(2026, 4, 1, 18, 0, 0, 0, seoul).Equal(next), "next %s", next)
}

// The leader stops just before a due time, leaving it unrecorded: the next
// leader, started after it, enqueues it once; a third leader after it does
// not enqueue it again.
func TestSchedule_NextLeaderEnqueuesOnce(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 31, 20, 0, 0, 0, seoul)
	clock := apptest.NewTestClock(due.Add(-time.Minute))
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "0 20 * * *"}, Now: clock.Now})
	first := s.StartScheduler()
	s.WaitLeader(first)
	s.Eventually("the first leader's pass", func() bool {
		return s.Count("SELECT count(*) FROM job_schedule WHERE job = 'metrics'") == 1
	})
	require.NoError(t, first.Stop(context.Background()))

	// The next leader starts after the due time: it catches up from the
	// newest recorded due time, not from its own start.
	clock.Set(due.Add(30 * time.Second))
	second := s.StartScheduler()
	s.WaitLeader(second)
	s.Eventually("the next leader to enqueue the due time", func() bool { return s.TickOutcome(riskmetric.Name, due) == observability.TickEnqueued })
	id := s.ScheduledRequestID(riskmetric.Name, due)
	s.WaitRequest(id, "DONE", "FAILED")

	third := s.StartScheduler()
	require.NoError(t, second.Stop(context.Background()))
	s.WaitLeader(third)
	// The third leader catches up from the newest recorded due time: the
	// next day's is its first, and the first is not enqueued again.
	nextDay := due.AddDate(0, 0, 1)
	clock.Set(nextDay.Add(30 * time.Second))
	s.Eventually("the third leader to enqueue the next due time", func() bool { return s.TickOutcome(riskmetric.Name, nextDay) == observability.TickEnqueued })
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND source = 'schedule' AND due_at = $1", due))
	require.Equal(t, 2, s.Count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND source = 'schedule'"))
	require.Equal(t, 2, s.Count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics'"))
	require.InDelta(t, 2, s.Ticks(riskmetric.Name, observability.TickEnqueued), 0)
}

// mustJSON re-encodes a decoded JSON value.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

// GET /v1/jobs shows each job's schedule and next due time.
func TestSchedule_JobList(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "30 5 * * 1"}})
	_, out := s.Get("/v1/jobs/aptTrade")
	require.Equal(t, "30 5 * * 1", out["schedule"])
	next, err := time.Parse(time.RFC3339, out["next"].(string))
	require.NoError(t, err)
	require.Equal(t, time.Monday, next.In(seoul).Weekday())
	require.Equal(t, 5, next.In(seoul).Hour())
	require.True(t, next.After(time.Now()))
	require.Contains(t, out, "lastDueAt")
	require.Nil(t, out["lastDueAt"], "nothing recorded yet")
	require.Nil(t, out["lastDueOutcome"])

	_, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "every day"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_SCHEDULE_APTTRADE")
	_, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_SCHEDULE_CATCHUP_APTTRADE": "-1h"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_SCHEDULE_CATCHUP_APTTRADE")
}

// Two workers race for leadership (the leader is asked to resign at every
// due time) while two more schedulers run a pass at the same instant, over
// 20 due times: each due time is recorded once, counted once and has
// exactly one request. Proven by counting requests per due time, not by
// timing.
func TestSchedule_RacingLeadersOneRequestPerDueTime(t *testing.T) {
	t.Parallel()
	const dueTimes = 20
	start := time.Date(2026, 3, 2, 0, 0, 30, 0, time.UTC)
	clock := apptest.NewTestClock(start)
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "@every 24h"}, Now: clock.Now})
	a := s.StartScheduler()
	b := s.StartScheduler()
	racers := []*worker.Scheduler{s.NewTestScheduler(clock, start, nil), s.NewTestScheduler(clock, start, nil)}

	ctx := context.Background()
	due := start
	var want []time.Time
	for i := range dueTimes {
		due = s.Env.Schedules[0].Next.Next(due)
		want = append(want, due)
		require.NoError(t, []*app.Worker{a, b}[i%2].River().Notify().RequestResign(ctx))
		clock.Set(due.Add(time.Second))

		release := make(chan struct{})
		errs := make(chan error, len(racers))
		for _, r := range racers {
			go func() {
				<-release
				errs <- r.Pass(ctx)
			}()
		}
		close(release)
		for range racers {
			require.NoError(t, <-errs)
		}
		require.Equal(t, observability.TickEnqueued, s.TickOutcome(riskmetric.Name, due), "due time %d", i)
		s.WaitRequest(s.ScheduledRequestID(riskmetric.Name, due), "DONE", "FAILED")
	}

	// Let the leaders' passes run over the last due time too.
	var lastDue time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, "SELECT now()").Scan(&lastDue))
	s.Eventually("a scheduler pass after the last due time", func() bool { return s.SchedulePassesSince(lastDue) > 0 })
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM (
		SELECT due_at FROM job_request WHERE source = 'schedule' GROUP BY due_at HAVING count(*) <> 1) d`), "one request per due time")
	require.Equal(t, dueTimes, s.Count("SELECT count(DISTINCT due_at) FROM job_request WHERE source = 'schedule'"))
	require.Equal(t, dueTimes, s.Count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics' AND outcome = 'enqueued'"))
	require.Equal(t, dueTimes, s.Count("SELECT count(*) FROM schedule_tick"))
	var got []time.Time
	rows, err := s.Pool.Query(ctx, "SELECT due_at FROM job_request WHERE source = 'schedule' ORDER BY due_at")
	require.NoError(t, err)
	got, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	for i := range want {
		require.True(t, want[i].Equal(got[i]), "due time %d: want %s, got %s", i, want[i], got[i])
	}
	// Counted once each, whoever recorded them.
	require.InDelta(t, dueTimes, s.Ticks(riskmetric.Name, observability.TickEnqueued), 0)
	for _, outcome := range []string{observability.TickCoalesced, observability.TickDeferred, observability.TickFailed, observability.TickMissed} {
		require.InDelta(t, 0, s.Ticks(riskmetric.Name, outcome), 0, outcome)
	}
	require.InDelta(t, dueTimes, s.Metric(observability.MetricRequests, map[string]string{"job": riskmetric.Name, "source": "schedule", "result": "accepted"}), 0)
}

// Due times older than the catch-up window when a scheduler first sees them
// (here: the clock jumps five hours, as after an outage) are recorded
// missed and counted; younger ones are still run. The window is one period
// by default and configurable per job.
func TestSchedule_MissedBeyondCatchUpWindow(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	clock := apptest.NewTestClock(start)
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_SCHEDULE_METRICS":       "@every 1h",
		"BUILDRISK_SCHEDULE_RULES":         "@every 1h",
		"BUILDRISK_SCHEDULE_CATCHUP_RULES": "3h30m",
		"BUILDRISK_SCHEDULE_FILINGPARSE":   "@every 1h",
	}, Now: clock.Now})
	// filingParse ran on another schedule ten days ago: the new schedule
	// starts with this scheduler, not with the old one's last due time.
	testfactory.ScheduleTick(context.Background(), t, s.Pool, &testfactory.ScheduleTickOpts{
		Job: filing.Name, DueAt: start.AddDate(0, 0, -10), Spec: "30 18 * * *", Outcome: observability.TickEnqueued,
	})
	w := s.StartScheduler()
	s.WaitLeader(w)

	// Due at 10:00 … 14:00; seen at 14:40.
	clock.Set(start.Add(5*time.Hour + 10*time.Minute))
	last := time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)
	s.Eventually("the newest due times to be handled", func() bool {
		return s.TickOutcome(riskmetric.Name, last) != "" && s.TickOutcome(riskrule.Name, last) != "" && s.TickOutcome(filing.Name, last) != ""
	})

	for _, tt := range []struct {
		job    string
		missed []int // hours (UTC) of the missed due times
	}{
		{riskmetric.Name, []int{10, 11, 12, 13}}, // window 1h
		{riskrule.Name, []int{10, 11}},           // window 3h30m
		{filing.Name, []int{10, 11, 12, 13}},
	} {
		for hour := 10; hour <= 14; hour++ {
			outcome := s.TickOutcome(tt.job, time.Date(2026, 3, 2, hour, 0, 0, 0, time.UTC))
			if hour <= tt.missed[len(tt.missed)-1] {
				require.Equal(t, observability.TickMissed, outcome, "%s %d:00", tt.job, hour)
			} else {
				require.Contains(t, []string{observability.TickEnqueued, observability.TickCoalesced, observability.TickDeferred}, outcome, "%s %d:00", tt.job, hour)
			}
		}
		require.InDelta(t, len(tt.missed), s.Metric(observability.MetricScheduleMissed, map[string]string{"job": tt.job}), 0, tt.job)
		require.InDelta(t, len(tt.missed), s.Ticks(tt.job, observability.TickMissed), 0, tt.job)
	}
	require.Zero(t, s.Count("SELECT count(*) FROM job_request WHERE due_at < '2026-03-02 12:00Z'"), "missed due times are never run")
}

// flakyEnqueuer fails EnqueueTx while fail is set, as an unreachable
// database or a River insert error would.
type flakyEnqueuer struct {
	worker.ScheduleEnqueuer
	mu   sync.Mutex
	fail bool
}

func (f *flakyEnqueuer) setFail(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = v
}

func (f *flakyEnqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, p *request.EnqueueParams) (*request.EnqueueResult, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return nil, errors.New("injected enqueue failure")
	}
	return f.ScheduleEnqueuer.EnqueueTx(ctx, tx, p)
}

// A failed enqueue is counted, never dropped silently: a request the
// enqueuer refuses (an estimate over the day's cap) is recorded failed and
// counted; an enqueue that errors is counted and retried by the next pass.
func TestSchedule_FailedEnqueueCounted(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 2, 4, 0, 0, 0, seoul)
	clock := apptest.NewTestClock(due.Add(-30 * time.Second))
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_SCHEDULE_APTTRADE": "0 4 * * *",
		"BUILDRISK_DAILY_CAP_MOLIT":   "3",
	}, Now: clock.Now})
	w := s.StartScheduler()
	s.WaitLeader(w)

	clock.Set(due.Add(30 * time.Second))
	s.Eventually("the refused due time to be recorded", func() bool { return s.TickOutcome(apttrade.Name, due) == observability.TickFailed })
	require.InDelta(t, 1, s.Ticks(apttrade.Name, observability.TickFailed), 0)
	require.InDelta(t, 1, s.Metric(observability.MetricRequests, map[string]string{"job": apttrade.Name, "source": "schedule", "result": "invalid"}), 0)
	require.Zero(t, s.Count("SELECT count(*) FROM job_request WHERE job = 'aptTrade'"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM schedule_tick WHERE job = 'aptTrade' AND message LIKE '%daily cap%'"))
	_, job := s.Get("/v1/jobs/aptTrade")
	require.Equal(t, "failed", job["lastDueOutcome"])
	require.Nil(t, job["lastDueRequestId"])

	// An enqueue that errors: counted, not recorded, retried.
	flaky := &flakyEnqueuer{ScheduleEnqueuer: s.Role.Owner(), fail: true}
	tt, err := worker.ParseSchedule("@every 1h", seoul)
	require.NoError(t, err)
	metricsDef := riskmetric.Spec()
	sched := s.NewTestScheduler(clock, due.Add(-time.Hour), flaky, worker.Schedule{
		Job: riskmetric.Name, Spec: "@every 1h", Next: tt, Period: time.Hour,
		Params: func(due time.Time) []byte { return metricsDef.ScheduledParams(due.In(seoul)) },
	})
	metricsDue := due.Truncate(time.Hour)
	ctx := context.Background()
	require.ErrorContains(t, sched.Pass(ctx), "injected enqueue failure")
	require.InDelta(t, 1, s.Ticks(riskmetric.Name, observability.TickFailed), 0)
	require.Empty(t, s.TickOutcome(riskmetric.Name, metricsDue), "not recorded: the next pass retries it")

	flaky.setFail(false)
	require.NoError(t, sched.Pass(ctx))
	require.Equal(t, observability.TickEnqueued, s.TickOutcome(riskmetric.Name, metricsDue))
	require.InDelta(t, 1, s.Ticks(riskmetric.Name, observability.TickFailed), 0)
	require.InDelta(t, 1, s.Ticks(riskmetric.Name, observability.TickEnqueued), 0)
}

// buildrisk_job_last_completed_timestamp_seconds is read from the database
// at scrape time, so a separate process (here a second API with its own
// telemetry) exports the same value; each scheduled job's period is
// exported too. A scheduled job that never completed counts from its first
// recorded due time.
func TestSchedule_FreshnessFromDatabase(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 5, 59, 0, 0, seoul)
	clock := apptest.NewTestClock(start)
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_SCHEDULE_STOCKPRICE": "0 18 * * 1-5",
		"BUILDRISK_SCHEDULE_APTTRADE":   "0 6 * * *",
		"BUILDRISK_DAILY_CAP_MOLIT":     "3", // aptTrade's scheduled run is refused: it never completes
	}, Now: clock.Now})
	w := s.StartScheduler()
	s.WaitLeader(w)
	s.RunJob(corpcode.Name, `{}`)

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	other := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: s.Tel.Logger}
	apptest.StartAPI(t, s.Pool, s.Env, other)

	var ended float64
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		"SELECT extract(epoch FROM max(ended_at))::float8 FROM job_execution WHERE job = 'corpCodeSync' AND status = 'COMPLETED'").Scan(&ended))
	for _, p := range []*observability.Providers{s.Tel.Providers, providers} {
		got, err := observabilitytest.MetricValue(p, observability.MetricJobLastCompleted, map[string]string{"job": corpcode.Name})
		require.NoError(t, err)
		require.InDelta(t, ended, got, 0.001)
		period, err := observabilitytest.MetricValue(p, observability.MetricSchedulePeriod, map[string]string{"job": stockprice.Name})
		require.NoError(t, err)
		require.InDelta(t, (72 * time.Hour).Seconds(), period, 0)
	}

	// aptTrade never completed: from its first due time once recorded.
	got, err := observabilitytest.MetricValue(providers, observability.MetricJobLastCompleted, map[string]string{"job": apttrade.Name})
	require.NoError(t, err)
	require.Zero(t, got, "no series before anything is recorded")
	due := time.Date(2026, 3, 2, 6, 0, 0, 0, seoul)
	clock.Set(due.Add(time.Minute))
	s.Eventually("the aptTrade due time", func() bool { return s.TickOutcome(apttrade.Name, due) == observability.TickFailed })
	for _, p := range []*observability.Providers{s.Tel.Providers, providers} {
		got, err := observabilitytest.MetricValue(p, observability.MetricJobLastCompleted, map[string]string{"job": apttrade.Name})
		require.NoError(t, err)
		require.InDelta(t, float64(due.Unix()), got, 0)
	}
}
