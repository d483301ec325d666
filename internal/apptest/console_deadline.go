package apptest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// DeadlineFromNow returns the time of day HH:MM in zone (an IANA name, as
// BUILDRISK_TIMEZONE) ahead from now, the minute cut off: a
// BUILDRISK_DEADLINE_<JOB> whose next occurrence is between ahead less a
// minute and ahead away, whatever the hour the test runs.
func DeadlineFromNow(t testing.TB, zone string, ahead time.Duration) string {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	return time.Now().Add(ahead).In(loc).Format("15:04")
}

// SetForecast records at as the execution's forecast end, as a running
// execution does every BUILDRISK_FORECAST_INTERVAL.
func (s *System) SetForecast(executionID int64, at time.Time) {
	s.T.Helper()
	tag, err := s.Pool.Exec(context.Background(), `UPDATE job_execution SET forecast_done_at = $1 WHERE id = $2`, at, executionID)
	require.NoError(s.T, err)
	require.Equal(s.T, int64(1), tag.RowsAffected(), "execution %d", executionID)
}
