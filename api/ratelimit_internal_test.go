package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The per-token bucket on a stub clock: a minute's budget at once, then
// one request per 60/perMinute seconds; each token's bucket is its own;
// 0 turns the limiter off.
func TestTokenLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := newTokenLimiter(60, func() time.Time { return now })
	for i := range 60 {
		ok, left, _ := l.take("viewer:v")
		require.True(t, ok, "request %d", i)
		require.Equal(t, 59-i, left)
	}
	ok, left, wait := l.take("viewer:v")
	require.False(t, ok)
	require.Zero(t, left)
	require.Equal(t, time.Second, wait.Round(time.Millisecond))

	ok, _, _ = l.take("operator:o")
	require.True(t, ok, "another token has a budget of its own")

	now = now.Add(time.Second)
	ok, _, _ = l.take("viewer:v")
	require.True(t, ok, "a second later one request is allowed")
	ok, _, _ = l.take("viewer:v")
	require.False(t, ok)

	now = now.Add(time.Minute)
	ok, left, untilWhole := l.take("viewer:v")
	require.True(t, ok)
	require.Equal(t, 59, left, "a minute refills the budget, never beyond it")
	require.Equal(t, time.Second, untilWhole.Round(time.Millisecond))

	require.Nil(t, newTokenLimiter(0, time.Now), "0 is off")
}
