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
	"github.com/buildrisk/radar/jobs/batch"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/upstream/fakeupstream"
	"github.com/buildrisk/radar/jobs/worker"
	"github.com/buildrisk/radar/observability"
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

// waitLeader waits until w is River's leader.
func (s *testSystem) waitLeader(w *worker.Worker) {
	s.t.Helper()
	s.eventually("worker "+w.ID()+" to lead", func() bool {
		return s.count("SELECT count(*) FROM river_leader WHERE leader_id = $1 AND expires_at > now()", w.ID()) == 1
	})
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
// leader enqueues it once; a third leader after it does not enqueue it
// again.
func TestSchedule_NextLeaderEnqueuesOnce(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 31, 20, 0, 0, 0, seoul)
	clock := newTestClock(due.Add(-time.Minute))
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_METRICS": "0 20 * * *"}, now: clock.Now})
	first := s.startScheduler()
	s.waitLeader(first)
	second := s.startScheduler()
	require.NoError(t, first.Drain(context.Background()))

	clock.Set(due.Add(30 * time.Second))
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
