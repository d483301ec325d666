package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)

	// Cron in the configured zone: the next 18:00 Seoul weekday.
	tt, err := ParseSchedule("0 18 * * 1-5", seoul)
	require.NoError(t, err)
	friday := time.Date(2026, 4, 3, 18, 0, 0, 0, seoul)
	require.True(t, friday.Equal(tt.Next(friday.Add(-time.Second))))
	require.True(t, time.Date(2026, 4, 6, 18, 0, 0, 0, seoul).Equal(tt.Next(friday)), "Friday's next is Monday")

	// @every: the multiples of the interval, whoever asks and when.
	tt, err = ParseSchedule("@every 15s", seoul)
	require.NoError(t, err)
	at := time.Date(2026, 4, 3, 10, 0, 7, 0, time.UTC)
	require.True(t, time.Date(2026, 4, 3, 10, 0, 15, 0, time.UTC).Equal(tt.Next(at)))
	require.True(t, tt.Next(at).Equal(tt.Next(at.Add(5*time.Second))), "the same due time from any instant before it")
	require.True(t, time.Date(2026, 4, 3, 10, 0, 30, 0, time.UTC).Equal(tt.Next(tt.Next(at))))

	for _, bad := range []string{"every day", "@every 0s", "@every -1m", "61 * * * *"} {
		_, err := ParseSchedule(bad, seoul)
		require.Error(t, err, bad)
	}
}

// The period is the longest gap between due times, so a weekday schedule
// is allowed its weekend and a weekly one its week.
func TestSchedulePeriod(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	from := time.Date(2026, 4, 1, 0, 0, 0, 0, seoul)
	for spec, want := range map[string]time.Duration{
		"0 18 * * 1-5": 72 * time.Hour,
		"0 4 * * *":    24 * time.Hour,
		"30 5 * * 1":   7 * 24 * time.Hour,
		"0 3 1 * *":    31 * 24 * time.Hour,
		"*/5 * * * *":  5 * time.Minute,
		"@every 15s":   15 * time.Second,
	} {
		tt, err := ParseSchedule(spec, seoul)
		require.NoError(t, err)
		require.Equal(t, want, SchedulePeriod(tt, from), spec)
	}
}
