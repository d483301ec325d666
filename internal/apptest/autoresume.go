package apptest

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// AutoResumeEnv turns automatic resume on, as it is by default outside tests.
var AutoResumeEnv = map[string]string{
	"BUILDRISK_AUTO_RESUME":         "drain,reap",
	"BUILDRISK_AUTO_RESUME_BACKOFF": "10ms",
}

// ResumeOf returns the id of the automatic resume of execution execID, or ""
// when there is none.
func (s *System) ResumeOf(execID string) string {
	s.T.Helper()
	var ids []string
	rows, err := s.Pool.Query(context.Background(), `SELECT id::text FROM job_request WHERE source = 'resume' AND resumes_execution_id = $1::bigint`, execID)
	require.NoError(s.T, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(s.T, err)
	require.LessOrEqual(s.T, len(ids), 1, "one automatic resume per stopped execution")
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

func (s *System) StopCause(execID string) string {
	s.T.Helper()
	var cause string
	require.NoError(s.T, s.Pool.QueryRow(context.Background(), `SELECT stop_cause FROM job_execution WHERE id = $1::bigint`, execID).Scan(&cause))
	return cause
}
