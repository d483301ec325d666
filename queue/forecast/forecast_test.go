package forecast_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/forecast"
)

var t0 = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

// observeSteady feeds p a steady rate (units per second) every step for d.
func observeSteady(p *forecast.Pace, from time.Time, done, rate float64, step, d time.Duration) (time.Time, float64) {
	at := from
	for end := from.Add(d); at.Before(end); {
		at = at.Add(step)
		done += rate * step.Seconds()
		p.Observe(at, done)
	}
	return at, done
}

func TestPace_FollowsASlowdownWithinOneWindow(t *testing.T) {
	p := forecast.NewPace(time.Minute)
	at, done := observeSteady(p, t0, 0, 10, 5*time.Second, 2*time.Minute)
	rate, ok := p.Rate(at)
	require.True(t, ok)
	require.InDelta(t, 10, rate, 0.01)

	// The provider slows to a third: half a window later the rate is
	// between the two, one window later it is the new one.
	at, done = observeSteady(p, at, done, 10.0/3, 5*time.Second, 30*time.Second)
	rate, _ = p.Rate(at)
	require.Greater(t, rate, 10.0/3)
	require.Less(t, rate, 10.0)
	at, _ = observeSteady(p, at, done, 10.0/3, 5*time.Second, time.Minute)
	rate, _ = p.Rate(at)
	require.InDelta(t, 10.0/3, rate, 0.01)
}

func TestPace_AStallSlowsTheRateWhileItLasts(t *testing.T) {
	p := forecast.NewPace(time.Minute)
	at, done := observeSteady(p, t0, 0, 10, 5*time.Second, time.Minute)
	var last float64 = 10
	for range 6 { // no progress for three minutes
		at = at.Add(30 * time.Second)
		p.Observe(at, done)
		rate, ok := p.Rate(at)
		require.True(t, ok)
		require.Less(t, rate, last, "a stall slows the rate at every sample")
		last = rate
	}
	require.InDelta(t, 1.0/180, last, 0.0001, "one unit over the time since the last progress")
}

func TestPace_NoRateBeforeProgress(t *testing.T) {
	p := forecast.NewPace(0)
	_, ok := p.Rate(t0)
	require.False(t, ok)
	p.Observe(t0, 0)
	p.Observe(t0.Add(5*time.Second), 0)
	_, ok = p.Rate(t0.Add(5 * time.Second))
	require.False(t, ok)
}

func TestDoneAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   forecast.Input
		want time.Duration // from t0
		err  error
	}{
		{name: "at the measured pace", in: forecast.Input{Left: 600, Rate: 10, CallsPerUnit: 1}, want: time.Minute},
		{name: "never faster than the rate limit", in: forecast.Input{Left: 600, Rate: 10, CallsPerUnit: 1, RateLimit: 5}, want: 2 * time.Minute},
		{name: "the rate limit before any pace", in: forecast.Input{Left: 600, CallsPerUnit: 1, RateLimit: 5}, want: 2 * time.Minute},
		{name: "chunks ignore the rate limit", in: forecast.Input{Left: 6, Rate: 0.1, RateLimit: 5}, want: time.Minute},
		{name: "no pace", in: forecast.Input{Left: 6}, err: forecast.ErrNoPace},
		{name: "nothing left", in: forecast.Input{Left: 0}, want: 0},
		{name: "within today's budget", in: forecast.Input{Left: 600, Rate: 10, CallsPerUnit: 1,
			Budget: &forecast.Budget{Remaining: 600, Cap: 1000, UntilReset: time.Hour}}, want: time.Minute},
		{name: "over today's budget: past the reset", in: forecast.Input{Left: 600, Rate: 10, CallsPerUnit: 1,
			Budget: &forecast.Budget{Remaining: 300, Cap: 1000, UntilReset: time.Hour}}, want: time.Hour + 30*time.Second},
		{name: "over several days' budgets", in: forecast.Input{Left: 2500, Rate: 10, CallsPerUnit: 1,
			Budget: &forecast.Budget{Remaining: 0, Cap: 1000, UntilReset: time.Hour}}, want: time.Hour + 48*time.Hour + 50*time.Second},
		{name: "the reset comes before the budget is spent", in: forecast.Input{Left: 600, Rate: 0.1, CallsPerUnit: 1,
			Budget: &forecast.Budget{Remaining: 500, Cap: 1000, UntilReset: time.Hour}}, want: 100 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			got, err := forecast.DoneAt(tc.in)
			if tc.err != nil {
				require.True(t, errors.Is(err, tc.err), "got %v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got.Sub(t0))
		})
	}
}
