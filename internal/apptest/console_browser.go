package apptest

import (
	"context"

	"github.com/stretchr/testify/require"
)

func (s *System) ExecutionStatus(id int64) string {
	s.T.Helper()
	var status string
	require.NoError(s.T, s.Pool.QueryRow(context.Background(), `SELECT status FROM job_execution WHERE id = $1`, id).Scan(&status))
	return status
}
