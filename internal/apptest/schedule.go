package apptest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// TestClock is the schedules' clock in a test: due times come when the test
// moves it, never by waiting.
type TestClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewTestClock returns a TestClock that reads now until the test moves it.
func NewTestClock(now time.Time) *TestClock { return &TestClock{now: now} }

func (c *TestClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *TestClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Eventually polls cond until it holds, failing the test after a minute.
func (s *System) Eventually(what string, cond func() bool) {
	s.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.T.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartScheduler starts a worker that checks its schedules every 10 ms
// (real time) and runs corpCodeSync in a temporary directory.
func (s *System) StartScheduler() *app.Worker {
	s.T.Helper()
	dir := s.T.TempDir()
	w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) {
		wc.SchedulePollInterval = 10 * time.Millisecond
		rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir}
	})
	return w
}

// WaitLeader waits until River has made w its leader (it started w's
// periodic jobs, the scheduler passes among them).
func (s *System) WaitLeader(w *app.Worker) {
	s.T.Helper()
	s.Eventually("worker "+w.ID()+" to lead", func() bool {
		select {
		case <-w.Leading():
			return true
		default:
			return false
		}
	})
}

// SchedulePassesSince counts the scheduler passes River's periodic jobs ran
// to completion after since (by the database's clock). It reads River's
// job table, which River's public API would answer only page by page.
func (s *System) SchedulePassesSince(since time.Time) int {
	s.T.Helper()
	return s.Count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule_pass' AND state = 'completed' AND finalized_at > $1", since)
}

// TickOutcome returns the recorded outcome of job's due time ("" if none).
func (s *System) TickOutcome(job string, due time.Time) string {
	s.T.Helper()
	var outcome string
	err := s.Pool.QueryRow(context.Background(), "SELECT outcome FROM schedule_tick WHERE job = $1 AND due_at = $2", job, due).Scan(&outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(s.T, err)
	return outcome
}

// ScheduledRequestID returns the id of the request made for job's due time.
func (s *System) ScheduledRequestID(job string, due time.Time) string {
	s.T.Helper()
	var id string
	require.NoError(s.T, s.Pool.QueryRow(context.Background(),
		"SELECT id::text FROM job_request WHERE job = $1 AND due_at = $2 AND source = 'schedule'", job, due).Scan(&id))
	return id
}

func (s *System) Ticks(job, outcome string) float64 {
	s.T.Helper()
	return s.Metric(observability.MetricScheduleTicks, map[string]string{"job": job, "outcome": outcome})
}

// NewTestScheduler returns a scheduler outside any worker, on the system's
// database, enqueuing through enq (the API's path when nil), as another
// process believing it leads would run it.
func (s *System) NewTestScheduler(clock *TestClock, start time.Time, enq worker.ScheduleEnqueuer, schedules ...worker.Schedule) *worker.Scheduler {
	s.T.Helper()
	if enq == nil {
		enq = s.Role.Owner()
	}
	if schedules == nil {
		schedules = s.Env.Schedules
	}
	sched, err := worker.NewScheduler(s.Pool, worker.SchedulerConfig{
		Schedules: schedules, Enqueuer: enq, Now: clock.Now, Start: start, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger,
	})
	require.NoError(s.T, err)
	return sched
}
