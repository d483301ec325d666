package apptest

import (
	"context"

	"github.com/stretchr/testify/require"
)

// SeedHistory seeds, for job, days ago of the database's today (in the
// system's zone), one execution per status given, started in that order
// (the last the newest) from 01:00 local time: in Asia/Seoul, the day
// before in UTC, so a history counted in the wrong zone puts them on
// another day.
func (s *System) SeedHistory(job string, daysAgo int, statuses ...string) {
	s.T.Helper()
	for i, status := range statuses {
		_, err := s.Pool.Exec(context.Background(), `
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
FROM i, r, day d`, job, daysAgo, status, s.Env.Location.String(), i)
		require.NoError(s.T, err)
	}
}

// SeedMissed records a missed due time of job days ago.
func (s *System) SeedMissed(job string, daysAgo int) {
	s.T.Helper()
	_, err := s.Pool.Exec(context.Background(), `
INSERT INTO schedule_tick (job, due_at, outcome)
SELECT $1, ((clock_timestamp() AT TIME ZONE $3)::date - $2::int)::timestamp AT TIME ZONE $3 + interval '5 hours', 'missed'`,
		job, daysAgo, s.Env.Location.String())
	require.NoError(s.T, err)
}
