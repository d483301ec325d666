package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two workers running: only River's leader inserts schedule ticks, and each
// tick yields exactly one request, or one duplicate when the job is still
// active (counted, not an error), over 20 ticks.
func TestSchedule_OneRequestPerTick(t *testing.T) {
	t.Parallel()
	const interval = 250 * time.Millisecond
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "@every " + interval.String()}})
	first, _ := s.startWorker()
	second, _ := s.startWorker()

	deadline := time.Now().Add(60 * time.Second)
	for s.count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule' AND state = 'completed'") < 20 {
		require.True(t, time.Now().Before(deadline), "fewer than 20 ticks")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, first.Drain(context.Background()))
	require.NoError(t, second.Drain(context.Background()))

	ticks := s.count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule'")
	completedTicks := s.count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule' AND state = 'completed'")
	requests := s.count("SELECT count(*) FROM job_request WHERE source = 'schedule'")
	accepted := s.metric("buildrisk_requests_total", map[string]string{"job": "aptTrade", "source": "schedule", "result": "accepted"})
	duplicates := s.metric("buildrisk_requests_total", map[string]string{"job": "aptTrade", "source": "schedule", "result": "duplicate"})
	require.Equal(t, requests, int(accepted))
	require.Equal(t, completedTicks, requests+int(duplicates), "every worked tick made exactly one request or one duplicate")
	require.GreaterOrEqual(t, ticks, 20)
	// A tick's scheduled_at is its run time on the schedule (the previous
	// one plus the interval), not when it happened to be inserted: one
	// leader gives one chain with gaps of at least the interval; a second
	// scheduler would interleave a second chain (or repeat a time).
	require.Equal(t, 0, s.count(`SELECT count(*) FROM (
		SELECT scheduled_at - lag(scheduled_at) OVER (ORDER BY scheduled_at, id) AS gap FROM river_job WHERE kind = 'buildrisk_schedule'
	) g WHERE gap < make_interval(secs => $1)`, interval.Seconds()), "no doubled ticks: only the leader schedules")
	require.Equal(t, 0, s.count("SELECT count(*) FROM river_job WHERE kind = 'buildrisk_schedule' AND state NOT IN ('completed', 'available')"))
	require.Equal(t, 0, s.count("SELECT count(*) FROM job_request WHERE source = 'schedule' AND status = 'FAILED'"))
}

// GET /v1/jobs shows each job's schedule and next run.
func TestSchedule_JobList(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "30 5 * * 1"}})
	_, out := s.get("/v1/jobs/aptTrade")
	require.Equal(t, "30 5 * * 1", out["schedule"])
	next, err := time.Parse(time.RFC3339, out["next"].(string))
	require.NoError(t, err)
	seoul, _ := time.LoadLocation("Asia/Seoul")
	require.Equal(t, time.Monday, next.In(seoul).Weekday())
	require.Equal(t, 5, next.In(seoul).Hour())
	require.True(t, next.After(time.Now()))

	_, err = loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_SCHEDULE_APTTRADE": "every day"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_SCHEDULE_APTTRADE")
}

// A schedule tick's River job has a finite timeout, so River's rescuer
// frees one whose worker died while it was running (with the client's -1
// it would stay running forever).
func TestSchedule_StuckTickIsRescued(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	var id int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `INSERT INTO river_job
		(state, attempt, max_attempts, attempted_at, attempted_by, kind, args, queue, priority, scheduled_at)
		VALUES ('running', 1, 1, now() - interval '2 hours', '{9@dead-host#b00t}', 'buildrisk_schedule', '{"job":"aptTrade"}', 'default', 1, now() - interval '2 hours')
		RETURNING id`).Scan(&id))
	s.startWorker() // the only worker: River's leader, which runs the rescuer
	waitUntil(t, 2*time.Minute, "River's rescuer to free the stuck tick", func() bool {
		return s.count(`SELECT count(*) FROM river_job WHERE id = $1 AND state <> 'running'`, id) == 1
	})
	require.Equal(t, 1, s.count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'discarded'`, id))
}
