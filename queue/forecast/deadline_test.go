package forecast_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/forecast"
)

func TestParseDeadline(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	d, err := forecast.ParseDeadline("07:30", seoul)
	require.NoError(t, err)
	require.Equal(t, "07:30", d.String())
	for _, bad := range []string{"7:30", "24:00", "07:60", "0730", "07:30:00", "", "noon"} {
		_, err := forecast.ParseDeadline(bad, seoul)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "HH:MM")
	}
}

func TestDeadline_Occurrences(t *testing.T) {
	seoul, _ := time.LoadLocation("Asia/Seoul")
	d := forecast.Deadline{Hour: 7, Location: seoul}
	at := func(day, hour, minute int) time.Time { return time.Date(2026, 12, day, hour, minute, 0, 0, seoul) }
	require.Equal(t, at(7, 7, 0), d.After(at(7, 6, 59)))
	require.Equal(t, at(8, 7, 0), d.After(at(7, 7, 0)), "strictly after")
	require.Equal(t, at(7, 7, 0), d.AtOrBefore(at(7, 7, 0)))
	require.Equal(t, at(6, 7, 0), d.AtOrBefore(at(7, 6, 59)))
	// In UTC the same instants: the zone decides the calendar day.
	require.Equal(t, at(8, 7, 0), d.After(time.Date(2026, 12, 7, 21, 30, 0, 0, time.UTC)))
}

func TestJudge(t *testing.T) {
	seoul, _ := time.LoadLocation("Asia/Seoul")
	d := forecast.Deadline{Hour: 7, Location: seoul}
	at := func(day, hour, minute int) *time.Time {
		t := time.Date(2026, 12, day, hour, minute, 0, 0, seoul)
		return &t
	}
	for _, tc := range []struct {
		name     string
		figures  forecast.Figures
		now      *time.Time
		deadline *time.Time
		lateBy   *time.Duration
		missed   bool
		status   forecast.Status
	}{
		{name: "idle, done yesterday after the day before's deadline", now: at(7, 8, 0),
			figures: forecast.Figures{LastCompletedAt: at(7, 6, 0)}, deadline: at(8, 7, 0), status: forecast.OnTrack},
		{name: "idle, the deadline passed with no run since the one before", now: at(7, 8, 0),
			figures: forecast.Figures{LastCompletedAt: at(6, 6, 59)}, deadline: at(8, 7, 0), missed: true, status: forecast.Late},
		{name: "idle, never completed", now: at(7, 8, 0), deadline: at(8, 7, 0), missed: true, status: forecast.Late},
		{name: "running, forecast before the deadline", now: at(7, 5, 10),
			figures:  forecast.Figures{ActiveSince: at(7, 5, 0), ForecastDoneAt: at(7, 6, 0), LastCompletedAt: at(6, 6, 0)},
			deadline: at(7, 7, 0), lateBy: new(-time.Hour), status: forecast.OnTrack},
		{name: "running, forecast after the deadline", now: at(7, 5, 10),
			figures:  forecast.Figures{ActiveSince: at(7, 5, 0), ForecastDoneAt: at(7, 7, 30), LastCompletedAt: at(6, 6, 0)},
			deadline: at(7, 7, 0), lateBy: new(30 * time.Minute), status: forecast.AtRisk},
		{name: "running past its deadline: the missed deadline stays shown", now: at(7, 7, 10),
			figures:  forecast.Figures{ActiveSince: at(7, 5, 0), ForecastDoneAt: at(7, 7, 30), LastCompletedAt: at(6, 6, 0)},
			deadline: at(7, 7, 0), lateBy: new(30 * time.Minute), missed: true, status: forecast.Late},
		{name: "queued, no forecast yet", now: at(7, 5, 10),
			figures: forecast.Figures{ActiveSince: at(7, 5, 0), LastCompletedAt: at(6, 6, 0)}, deadline: at(7, 7, 0), status: forecast.OnTrack},
		{name: "done late: no longer missed", now: at(7, 8, 0),
			figures: forecast.Figures{LastCompletedAt: at(7, 7, 40)}, deadline: at(8, 7, 0), status: forecast.OnTrack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := forecast.Judge(d, tc.figures, *tc.now)
			require.Equal(t, *tc.deadline, j.Deadline)
			require.Equal(t, tc.lateBy, j.ForecastLateBy())
			require.Equal(t, tc.missed, j.Missed)
			require.Equal(t, tc.status, j.Status)
		})
	}
}
