package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
)

// seedHistory seeds, for job, days ago of the database's today (in the
// system's zone), one execution per status given, started in that order
// (the last the newest) from 01:00 local time: in Asia/Seoul, the day
// before in UTC, so a history counted in the wrong zone puts them on
// another day.
func (s *testSystem) seedHistory(job string, daysAgo int, statuses ...string) {
	s.t.Helper()
	for i, status := range statuses {
		_, err := s.pool.Exec(context.Background(), `
WITH day AS (
    SELECT ((clock_timestamp() AT TIME ZONE $4)::date - $2::int)::timestamp AT TIME ZONE $4 AS start
), r AS (
    INSERT INTO job_request (job, source, status, worker_id, created_at, claimed_at, finished_at)
    SELECT $1, 'api', 'DONE', 'w@h#b', d.start, d.start, d.start FROM day d RETURNING id
), i AS (
    INSERT INTO job_instance (job, params, params_hash) VALUES ($1, '{}', md5(random()::text)) RETURNING id
)
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
SELECT i.id, $1, r.id, $3, 'w@h#b', d.start + make_interval(hours => 1 + $5::int), d.start + make_interval(hours => 2 + $5::int)
FROM i, r, day d`, job, daysAgo, status, s.env.Location.String(), i)
		require.NoError(s.t, err)
	}
}

// seedMissed records a missed due time of job days ago.
func (s *testSystem) seedMissed(job string, daysAgo int) {
	s.t.Helper()
	_, err := s.pool.Exec(context.Background(), `
INSERT INTO schedule_tick (job, due_at, outcome)
SELECT $1, ((clock_timestamp() AT TIME ZONE $3)::date - $2::int)::timestamp AT TIME ZONE $3 + interval '5 hours', 'missed'`,
		job, daysAgo, s.env.Location.String())
	require.NoError(s.t, err)
}

// GET /v1/jobs/{job}/history: per day of the database's clock in
// BUILDRISK_TIMEZONE, the newest execution's status, else missed, else
// none, and the day's coverage against today's targets.
func TestJobHistory_OutcomesAndCoveragePerDay(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	ctx := context.Background()
	tz := s.env.Location.String()
	// Four targets (outstanding > 0) and one company that repaid.
	_, err := s.pool.Exec(ctx, `INSERT INTO exposure (corp_code, outstanding_krw) VALUES
		('00000001', 1), ('00000002', 1), ('00000003', 1), ('00000004', 1), ('00000005', 0)`)
	require.NoError(t, err)
	grade := func(daysAgo int, codes ...string) {
		_, err := s.pool.Exec(ctx, `INSERT INTO credit_grade (corp_code, eval_date, grade, source, execution_id)
			SELECT c, (clock_timestamp() AT TIME ZONE $2)::date - $3::int, 'A', 'lookup', 1 FROM unnest($1::text[]) c`, codes, tz, daysAgo)
		require.NoError(t, err)
	}
	grade(0, "00000001", "00000002", "00000003", "00000004")
	grade(1, "00000001", "00000002", "00000005") // the repaid company's grade is not a target's
	grade(3, "00000001", "00000002", "00000003")
	s.seedHistory(jobs.CreditEval, 0, "FAILED", "COMPLETED") // the newest wins
	s.seedHistory(jobs.CreditEval, 1, "FAILED")
	s.seedMissed(jobs.CreditEval, 2)
	s.seedHistory(jobs.CreditEval, 3, "STOPPED")
	s.seedMissed(jobs.CreditEval, 3) // an execution that started wins over a missed due time
	s.seedHistory(jobs.CreditEval, 4, "ABANDONED")
	s.seedHistory(jobs.Metrics, 5, "COMPLETED") // another job's
	s.seedHistory(jobs.Metrics, 0, "STARTED")
	var today string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT ((clock_timestamp() AT TIME ZONE $1)::date)::text`, tz).Scan(&today))

	status, out := s.get("/v1/jobs/creditEval/history")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, jobs.CreditEval, out["job"])
	days := out["days"].([]any)
	require.Len(t, days, 14, "14 days by default")
	require.Equal(t, today, days[0].(map[string]any)["day"], "newest first, from the database's today")
	want := []struct {
		outcome string
		current float64
	}{{"completed", 4}, {"failed", 2}, {"missed", 0}, {"stopped", 3}, {"abandoned", 0}, {"none", 0}}
	for i, w := range want {
		d := days[i].(map[string]any)
		require.Equal(t, w.outcome, d["outcome"], "day %d: %v", i, d)
		require.Equal(t, float64(4), d["targets"], "day %d: today's targets: %v", i, d)
		require.Equal(t, w.current, d["current"], "day %d: %v", i, d)
		require.InDelta(t, w.current*100/4, d["percent"], 0.001, "day %d: %v", i, d)
	}
	for _, d := range days[6:] {
		require.Equal(t, "none", d.(map[string]any)["outcome"])
	}

	// days is honoured; a job without coverage has outcomes and no %.
	status, out = s.get("/v1/jobs/metrics/history?days=6")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Len(t, out["days"], 6)
	require.Equal(t, "completed", out["days"].([]any)[5].(map[string]any)["outcome"])
	require.Equal(t, "running", out["days"].([]any)[0].(map[string]any)["outcome"], "an active execution is running")

	// stockPrice's data dates are weekdays: a weekend day has no %.
	status, out = s.get("/v1/jobs/stockPrice/history?days=7")
	require.Equal(t, http.StatusOK, status, "%v", out)
	for _, d := range out["days"].([]any) {
		d := d.(map[string]any)
		day, err := time.Parse(time.DateOnly, d["day"].(string))
		require.NoError(t, err)
		if day.Weekday() == time.Saturday || day.Weekday() == time.Sunday {
			require.Nil(t, d["percent"], "%v", d)
		} else {
			require.Equal(t, float64(100), d["percent"], "no listed company: nothing missing: %v", d)
		}
	}
	status, out = s.get("/v1/jobs/corpCodeSync/history?days=31")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Len(t, out["days"], 31)
	d := out["days"].([]any)[0].(map[string]any)
	require.Nil(t, d["percent"], "%v", d)
	require.Nil(t, d["targets"], "%v", d)

	for _, bad := range []string{"0", "32", "x"} {
		status, out = s.get("/v1/jobs/creditEval/history?days=" + bad)
		require.Equal(t, http.StatusBadRequest, status, "%v", out)
		require.Contains(t, out["detail"], "days", "the 400 names the field")
	}
	status, out = s.get("/v1/jobs/nope/history")
	require.Equal(t, http.StatusNotFound, status, "%v", out)
}
