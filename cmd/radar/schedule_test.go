package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// testClock is the schedules' clock in a test: due times come when the test
// moves it, never by waiting.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock(now time.Time) *testClock { return &testClock{now: now} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var seoul = func() *time.Location {
	loc, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		panic(err)
	}
	return loc
}()

// eventually polls cond until it holds, failing the test after a minute.
func (s *testSystem) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startScheduler starts a worker that checks its schedules every 10 ms
// (real time) and runs corpCodeSync in a temporary directory.
func (s *testSystem) startScheduler() *worker.Worker {
	s.t.Helper()
	dir := s.t.TempDir()
	w, _ := s.startWorkerWith(s.pool, func(wc *worker.Config, rc *batch.Config) {
		wc.SchedulePollInterval = 10 * time.Millisecond
		rc.Jobs[jobs.CorpCodeSync] = corpcode.Job{Dir: dir}
	})
	return w
}

// waitLeader waits until River has made w its leader (it started w's
// periodic jobs, the scheduler passes among them).
func (s *testSystem) waitLeader(w *worker.Worker) {
	s.t.Helper()
	s.eventually("worker "+w.ID()+" to lead", func() bool {
		select {
		case <-w.Leading():
			return true
		default:
			return false
		}
	})
}

// schedulePassesSince counts the scheduler passes River's periodic jobs ran
// to completion after since (by the database's clock). It reads River's
// job table, which River's public API would answer only page by page.
func (s *testSystem) schedulePassesSince(since time.Time) int {
	s.t.Helper()
	return s.count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule_pass' AND state = 'completed' AND finalized_at > $1", since)
}

// tickOutcome returns the recorded outcome of job's due time ("" if none).
func (s *testSystem) tickOutcome(job string, due time.Time) string {
	s.t.Helper()
	var outcome string
	err := s.pool.QueryRow(context.Background(), "SELECT outcome FROM schedule_tick WHERE job = $1 AND due_at = $2", job, due).Scan(&outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(s.t, err)
	return outcome
}

// scheduledRequestID returns the id of the request made for job's due time.
func (s *testSystem) scheduledRequestID(job string, due time.Time) string {
	s.t.Helper()
	var id string
	require.NoError(s.t, s.pool.QueryRow(context.Background(),
		"SELECT id::text FROM job_request WHERE job = $1 AND due_at = $2 AND source = 'schedule'", job, due).Scan(&id))
	return id
}

func (s *testSystem) ticks(job, outcome string) float64 {
	s.t.Helper()
	return s.metric(observability.MetricScheduleTicks, map[string]string{"job": job, "outcome": outcome})
}

// A tick that meets an active request is kept, not dropped: it is enqueued
// when that request ends, with its own day. A long manual stockPrice run
// holds the job from before 18:00 until after midnight, and the scheduler
// only gets to the 18:00 due time after midnight; the due time of
// 2026-03-31 still fetches 2026-03-31, not the day it ran.
func TestSchedule_DeferredTickKeepsItsDate(t *testing.T) {
	t.Parallel()
	clock := newTestClock(time.Date(2026, 3, 31, 17, 0, 0, 0, seoul))
	s := newTestSystem(t, &testSystemOpts{
		env:  map[string]string{"BUILDRISK_SCHEDULE_STOCKPRICE": "0 18 * * 1-5"},
		fake: fakeupstream.Config{Companies: 400},
		now:  clock.Now,
	})
	s.startScheduler()
	s.runJob(jobs.CorpCodeSync, `{}`)
	_, listed := fakeCounts(s)
	require.Positive(t, listed)

	// The backfill: a manual run held at its first provider call.
	s.gate.arm(0)
	manual := s.requestJob(jobs.StockPrice, `{"params":{"date":"2026-03-30"}}`)["requestId"].(string)
	<-s.gate.blocked

	// The scheduler first sees the 18:00 due time after midnight (a
	// failover, a pause): still within the catch-up window, so it is
	// deferred behind the backfill, with the due time's day as its params.
	due := time.Date(2026, 3, 31, 18, 0, 0, 0, seoul)
	clock.Set(time.Date(2026, 4, 1, 0, 10, 0, 0, seoul))
	s.eventually("the 18:00 tick to be deferred", func() bool { return s.tickOutcome(jobs.StockPrice, due) == observability.TickDeferred })
	_, job := s.get("/v1/jobs/stockPrice")
	require.Equal(t, "deferred", job["lastDueOutcome"])
	require.Equal(t, manual, job["activeRequestId"])

	// The backfill ends.
	clock.Set(time.Date(2026, 4, 1, 0, 30, 0, 0, seoul))
	s.gate.open()
	s.waitRequest(manual, "DONE")
	s.eventually("the deferred tick to be enqueued", func() bool { return s.tickOutcome(jobs.StockPrice, due) == observability.TickEnqueued })

	scheduled := s.waitRequest(s.scheduledRequestID(jobs.StockPrice, due), "DONE", "FAILED")
	require.Equal(t, "DONE", scheduled["status"], "%v", scheduled)
	require.Equal(t, "schedule", scheduled["source"])
	require.JSONEq(t, `{"date":"2026-03-31"}`, mustJSON(t, scheduled["params"]))
	dueAt, err := time.Parse(time.RFC3339, scheduled["dueAt"].(string))
	require.NoError(t, err)
	require.True(t, due.Equal(dueAt), "dueAt %s", dueAt)
	_, manualView := s.get("/v1/requests/" + manual)
	require.Contains(t, manualView, "dueAt")
	require.Nil(t, manualView["dueAt"], "a request made by hand has no due time")

	// KRX was asked for the tick's day, for every listed company, and never
	// for the day the request ran.
	var tickDay, runDay int
	for key := range s.callsPerKey(fakeupstream.EndpointStockPrice) {
		switch {
		case strings.HasSuffix(key, ":20260331"):
			tickDay++
		case strings.HasSuffix(key, ":20260401"):
			runDay++
		}
	}
	require.Equal(t, listed, tickDay)
	require.Zero(t, runDay)

	require.InDelta(t, 1, s.ticks(jobs.StockPrice, observability.TickDeferred), 0)
	require.InDelta(t, 1, s.ticks(jobs.StockPrice, observability.TickEnqueued), 0)
	_, job = s.get("/v1/jobs/stockPrice")
	require.Equal(t, "enqueued", job["lastDueOutcome"])
	require.Equal(t, s.scheduledRequestID(jobs.StockPrice, due), job["lastDueRequestId"])
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
	clock := newTestClock(due.Add(-time.Minute))
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "0 20 * * *"}, now: clock.Now})
	first := s.startScheduler()
	s.waitLeader(first)
	s.eventually("the first leader's pass", func() bool {
		return s.count("SELECT count(*) FROM job_schedule WHERE job = 'metrics'") == 1
	})
	require.NoError(t, first.Drain(context.Background()))

	// The next leader starts after the due time: it catches up from the
	// newest recorded due time, not from its own start.
	clock.Set(due.Add(30 * time.Second))
	second := s.startScheduler()
	s.waitLeader(second)
	s.eventually("the next leader to enqueue the due time", func() bool { return s.tickOutcome(jobs.Metrics, due) == observability.TickEnqueued })
	id := s.scheduledRequestID(jobs.Metrics, due)
	s.waitRequest(id, "DONE", "FAILED")

	third := s.startScheduler()
	require.NoError(t, second.Drain(context.Background()))
	s.waitLeader(third)
	// The third leader catches up from the newest recorded due time: the
	// next day's is its first, and the first is not enqueued again.
	nextDay := due.AddDate(0, 0, 1)
	clock.Set(nextDay.Add(30 * time.Second))
	s.eventually("the third leader to enqueue the next due time", func() bool { return s.tickOutcome(jobs.Metrics, nextDay) == observability.TickEnqueued })
	require.Equal(t, 1, s.count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND source = 'schedule' AND due_at = $1", due))
	require.Equal(t, 2, s.count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND source = 'schedule'"))
	require.Equal(t, 2, s.count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics'"))
	require.InDelta(t, 2, s.ticks(jobs.Metrics, observability.TickEnqueued), 0)
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
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "30 5 * * 1"}})
	_, out := s.get("/v1/jobs/aptTrade")
	require.Equal(t, "30 5 * * 1", out["schedule"])
	next, err := time.Parse(time.RFC3339, out["next"].(string))
	require.NoError(t, err)
	require.Equal(t, time.Monday, next.In(seoul).Weekday())
	require.Equal(t, 5, next.In(seoul).Hour())
	require.True(t, next.After(time.Now()))
	require.Contains(t, out, "lastDueAt")
	require.Nil(t, out["lastDueAt"], "nothing recorded yet")
	require.Nil(t, out["lastDueOutcome"])

	_, err = loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "every day"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_SCHEDULE_APTTRADE")
	_, err = loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_SCHEDULE_CATCHUP_APTTRADE": "-1h"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_SCHEDULE_CATCHUP_APTTRADE")
}

// newTestScheduler returns a scheduler outside any worker, on the system's
// database, enqueuing through enq (the API's path when nil), as another
// process believing it leads would run it.
func (s *testSystem) newTestScheduler(clock *testClock, start time.Time, enq worker.ScheduleEnqueuer, schedules ...worker.Schedule) *worker.Scheduler {
	s.t.Helper()
	if enq == nil {
		insertOnly, err := newInsertOnlyRiver(s.pool, s.tel)
		require.NoError(s.t, err)
		e, err := newEnqueuer(s.pool, insertOnly, s.env, s.tel)
		require.NoError(s.t, err)
		enq = e
	}
	if schedules == nil {
		schedules = s.env.Schedules
	}
	sched, err := worker.NewScheduler(s.pool, worker.SchedulerConfig{
		Schedules: schedules, Enqueuer: enq, Now: clock.Now, Start: start, Instruments: s.tel.instruments, Logger: s.tel.logger,
	})
	require.NoError(s.t, err)
	return sched
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
	clock := newTestClock(start)
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "@every 24h"}, now: clock.Now})
	a := s.startScheduler()
	b := s.startScheduler()
	racers := []*worker.Scheduler{s.newTestScheduler(clock, start, nil), s.newTestScheduler(clock, start, nil)}

	ctx := context.Background()
	due := start
	var want []time.Time
	for i := range dueTimes {
		due = s.env.Schedules[0].Next.Next(due)
		want = append(want, due)
		require.NoError(t, []*worker.Worker{a, b}[i%2].River().Notify().RequestResign(ctx))
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
		require.Equal(t, observability.TickEnqueued, s.tickOutcome(jobs.Metrics, due), "due time %d", i)
		s.waitRequest(s.scheduledRequestID(jobs.Metrics, due), "DONE", "FAILED")
	}

	// Let the leaders' passes run over the last due time too.
	var lastDue time.Time
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT now()").Scan(&lastDue))
	s.eventually("a scheduler pass after the last due time", func() bool { return s.schedulePassesSince(lastDue) > 0 })
	require.Equal(t, 0, s.count(`SELECT count(*) FROM (
		SELECT due_at FROM job_request WHERE source = 'schedule' GROUP BY due_at HAVING count(*) <> 1) d`), "one request per due time")
	require.Equal(t, dueTimes, s.count("SELECT count(DISTINCT due_at) FROM job_request WHERE source = 'schedule'"))
	require.Equal(t, dueTimes, s.count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics' AND outcome = 'enqueued'"))
	require.Equal(t, dueTimes, s.count("SELECT count(*) FROM schedule_tick"))
	var got []time.Time
	rows, err := s.pool.Query(ctx, "SELECT due_at FROM job_request WHERE source = 'schedule' ORDER BY due_at")
	require.NoError(t, err)
	got, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	for i := range want {
		require.True(t, want[i].Equal(got[i]), "due time %d: want %s, got %s", i, want[i], got[i])
	}
	// Counted once each, whoever recorded them.
	require.InDelta(t, dueTimes, s.ticks(jobs.Metrics, observability.TickEnqueued), 0)
	for _, outcome := range []string{observability.TickCoalesced, observability.TickDeferred, observability.TickFailed, observability.TickMissed} {
		require.InDelta(t, 0, s.ticks(jobs.Metrics, outcome), 0, outcome)
	}
	require.InDelta(t, dueTimes, s.metric(observability.MetricRequests, map[string]string{"job": jobs.Metrics, "source": "schedule", "result": "accepted"}), 0)
}

// Due times older than the catch-up window when a scheduler first sees them
// (here: the clock jumps five hours, as after an outage) are recorded
// missed and counted; younger ones are still run. The window is one period
// by default and configurable per job.
func TestSchedule_MissedBeyondCatchUpWindow(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	clock := newTestClock(start)
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{
		"BUILDRISK_SCHEDULE_METRICS":       "@every 1h",
		"BUILDRISK_SCHEDULE_RULES":         "@every 1h",
		"BUILDRISK_SCHEDULE_CATCHUP_RULES": "3h30m",
		"BUILDRISK_SCHEDULE_FILINGPARSE":   "@every 1h",
	}, now: clock.Now})
	// filingParse ran on another schedule ten days ago: the new schedule
	// starts with this scheduler, not with the old one's last due time.
	_, err := s.pool.Exec(context.Background(), `INSERT INTO schedule_tick (job, due_at, spec, outcome) VALUES ('filingParse', $1, '30 18 * * *', 'enqueued')`, start.AddDate(0, 0, -10))
	require.NoError(t, err)
	w := s.startScheduler()
	s.waitLeader(w)

	// Due at 10:00 … 14:00; seen at 14:40.
	clock.Set(start.Add(5*time.Hour + 10*time.Minute))
	last := time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)
	s.eventually("the newest due times to be handled", func() bool {
		return s.tickOutcome(jobs.Metrics, last) != "" && s.tickOutcome(jobs.Rules, last) != "" && s.tickOutcome(jobs.FilingParse, last) != ""
	})

	for _, tt := range []struct {
		job    string
		missed []int // hours (UTC) of the missed due times
	}{
		{jobs.Metrics, []int{10, 11, 12, 13}}, // window 1h
		{jobs.Rules, []int{10, 11}},           // window 3h30m
		{jobs.FilingParse, []int{10, 11, 12, 13}},
	} {
		for hour := 10; hour <= 14; hour++ {
			outcome := s.tickOutcome(tt.job, time.Date(2026, 3, 2, hour, 0, 0, 0, time.UTC))
			if hour <= tt.missed[len(tt.missed)-1] {
				require.Equal(t, observability.TickMissed, outcome, "%s %d:00", tt.job, hour)
			} else {
				require.Contains(t, []string{observability.TickEnqueued, observability.TickCoalesced, observability.TickDeferred}, outcome, "%s %d:00", tt.job, hour)
			}
		}
		require.InDelta(t, len(tt.missed), s.metric(observability.MetricScheduleMissed, map[string]string{"job": tt.job}), 0, tt.job)
		require.InDelta(t, len(tt.missed), s.ticks(tt.job, observability.TickMissed), 0, tt.job)
	}
	require.Zero(t, s.count("SELECT count(*) FROM job_request WHERE due_at < '2026-03-02 12:00Z'"), "missed due times are never run")
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
	clock := newTestClock(due.Add(-30 * time.Second))
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{
		"BUILDRISK_SCHEDULE_APTTRADE": "0 4 * * *",
		"BUILDRISK_DAILY_CAP_MOLIT":   "3",
	}, now: clock.Now})
	w := s.startScheduler()
	s.waitLeader(w)

	clock.Set(due.Add(30 * time.Second))
	s.eventually("the refused due time to be recorded", func() bool { return s.tickOutcome(jobs.AptTrade, due) == observability.TickFailed })
	require.InDelta(t, 1, s.ticks(jobs.AptTrade, observability.TickFailed), 0)
	require.InDelta(t, 1, s.metric(observability.MetricRequests, map[string]string{"job": jobs.AptTrade, "source": "schedule", "result": "invalid"}), 0)
	require.Zero(t, s.count("SELECT count(*) FROM job_request WHERE job = 'aptTrade'"))
	require.Equal(t, 1, s.count("SELECT count(*) FROM schedule_tick WHERE job = 'aptTrade' AND message LIKE '%daily cap%'"))
	_, job := s.get("/v1/jobs/aptTrade")
	require.Equal(t, "failed", job["lastDueOutcome"])
	require.Nil(t, job["lastDueRequestId"])

	// An enqueue that errors: counted, not recorded, retried.
	inner, err := newEnqueuer(s.pool, w.River(), s.env, s.tel)
	require.NoError(t, err)
	flaky := &flakyEnqueuer{ScheduleEnqueuer: inner, fail: true}
	tt, err := worker.ParseSchedule("@every 1h", seoul)
	require.NoError(t, err)
	metricsDef, _ := jobs.Default().Lookup(jobs.Metrics)
	sched := s.newTestScheduler(clock, due.Add(-time.Hour), flaky, worker.Schedule{
		Job: jobs.Metrics, Spec: "@every 1h", Next: tt, Period: time.Hour,
		Params: func(due time.Time) []byte { return metricsDef.ScheduledParams(due.In(seoul)) },
	})
	metricsDue := due.Truncate(time.Hour)
	ctx := context.Background()
	require.ErrorContains(t, sched.Pass(ctx), "injected enqueue failure")
	require.InDelta(t, 1, s.ticks(jobs.Metrics, observability.TickFailed), 0)
	require.Empty(t, s.tickOutcome(jobs.Metrics, metricsDue), "not recorded: the next pass retries it")

	flaky.setFail(false)
	require.NoError(t, sched.Pass(ctx))
	require.Equal(t, observability.TickEnqueued, s.tickOutcome(jobs.Metrics, metricsDue))
	require.InDelta(t, 1, s.ticks(jobs.Metrics, observability.TickFailed), 0)
	require.InDelta(t, 1, s.ticks(jobs.Metrics, observability.TickEnqueued), 0)
}

// buildrisk_job_last_completed_timestamp_seconds is read from the database
// at scrape time, so a separate process (here a second API with its own
// telemetry) exports the same value; each scheduled job's period is
// exported too. A scheduled job that never completed counts from its first
// recorded due time.
func TestSchedule_FreshnessFromDatabase(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 5, 59, 0, 0, seoul)
	clock := newTestClock(start)
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{
		"BUILDRISK_SCHEDULE_STOCKPRICE": "0 18 * * 1-5",
		"BUILDRISK_SCHEDULE_APTTRADE":   "0 6 * * *",
		"BUILDRISK_DAILY_CAP_MOLIT":     "3", // aptTrade's scheduled run is refused: it never completes
	}, now: clock.Now})
	w := s.startScheduler()
	s.waitLeader(w)
	s.runJob(jobs.CorpCodeSync, `{}`)

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	other := &telemetry{providers: providers, instruments: instruments, logger: s.tel.logger}
	_, err = newAPIServer(t.Context(), s.pool, s.env, other)
	require.NoError(t, err)

	var ended float64
	require.NoError(t, s.pool.QueryRow(context.Background(),
		"SELECT extract(epoch FROM max(ended_at))::float8 FROM job_execution WHERE job = 'corpCodeSync' AND status = 'COMPLETED'").Scan(&ended))
	for _, p := range []*observability.Providers{s.tel.providers, providers} {
		got, err := observabilitytest.MetricValue(p, observability.MetricJobLastCompleted, map[string]string{"job": jobs.CorpCodeSync})
		require.NoError(t, err)
		require.InDelta(t, ended, got, 0.001)
		period, err := observabilitytest.MetricValue(p, observability.MetricSchedulePeriod, map[string]string{"job": jobs.StockPrice})
		require.NoError(t, err)
		require.InDelta(t, (72 * time.Hour).Seconds(), period, 0)
	}

	// aptTrade never completed: from its first due time once recorded.
	got, err := observabilitytest.MetricValue(providers, observability.MetricJobLastCompleted, map[string]string{"job": jobs.AptTrade})
	require.NoError(t, err)
	require.Zero(t, got, "no series before anything is recorded")
	due := time.Date(2026, 3, 2, 6, 0, 0, 0, seoul)
	clock.Set(due.Add(time.Minute))
	s.eventually("the aptTrade due time", func() bool { return s.tickOutcome(jobs.AptTrade, due) == observability.TickFailed })
	for _, p := range []*observability.Providers{s.tel.providers, providers} {
		got, err := observabilitytest.MetricValue(p, observability.MetricJobLastCompleted, map[string]string{"job": jobs.AptTrade})
		require.NoError(t, err)
		require.InDelta(t, float64(due.Unix()), got, 0)
	}
}

// A leader killed (SIGKILL: no resignation, a transaction possibly cut
// short) between due times: the next leader, once River's lease expires,
// enqueues every due time the dead one did not get to exactly once, none
// missed (the catch-up window covers the lease), none twice. Real time and
// a real process: the assertions count rows per due time, never timing.
func TestSchedule_KilledLeaderNextEnqueuesOnce(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{
		"BUILDRISK_SCHEDULE_METRICS":         "@every " + every.String(),
		"BUILDRISK_SCHEDULE_CATCHUP_METRICS": "2m",
	}})
	dead := startRadar(t, bin, s.processEnv(nil), "worker")
	s.eventually("the first leader to record two due times", func() bool {
		return s.count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics'") >= 2
	})
	require.NoError(t, dead.cmd.Process.Kill())
	dead.wait(t, 30*time.Second)
	var lastByDead time.Time
	require.NoError(t, s.pool.QueryRow(context.Background(), "SELECT max(due_at) FROM schedule_tick WHERE job = 'metrics'").Scan(&lastByDead))
	firstAfter := lastByDead.Add(every)

	// The next leader starts only after two due times have passed: it
	// catches up from the newest recorded due time, not from its own start.
	s.eventually("two due times to pass", func() bool { return time.Now().After(firstAfter.Add(every)) })
	next := s.startScheduler()
	s.waitLeader(next)
	s.eventually("the next leader to catch up", func() bool { return s.tickOutcome(jobs.Metrics, firstAfter.Add(2*every)) != "" })

	outcome := s.tickOutcome(jobs.Metrics, firstAfter)
	require.Contains(t, []string{observability.TickEnqueued, observability.TickDeferred, observability.TickCoalesced}, outcome)
	require.LessOrEqual(t, s.count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND due_at = $1", firstAfter), 1)
	require.Zero(t, s.count("SELECT count(*) FROM schedule_tick WHERE outcome IN ('missed', 'failed')"))
	require.Zero(t, s.count(`SELECT count(*) FROM (
		SELECT due_at FROM job_request WHERE source = 'schedule' GROUP BY due_at HAVING count(*) > 1) d`), "one request per due time")
	// No gap: every due time from the first to the newest is recorded once.
	// One statement: the leader keeps recording due times meanwhile.
	var first, last time.Time
	var recorded int
	require.NoError(t, s.pool.QueryRow(context.Background(), "SELECT min(due_at), max(due_at), count(*) FROM schedule_tick WHERE job = 'metrics'").Scan(&first, &last, &recorded))
	require.Equal(t, int(last.Sub(first)/every)+1, recorded)
}
