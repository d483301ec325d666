package request_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/request"
)

// A process's link to the database: never cut, it makes a reaper wait
// nothing; a transient error cuts it (the whole window while cut); the
// first success after a cut starts the window, whose rest is what remains;
// an error that says nothing about the link (a constraint, a bad query)
// changes nothing; a nil Reachability never makes anyone wait.
func TestReachability(t *testing.T) {
	t.Parallel()
	link := request.NewReachability()
	require.Zero(t, link.Wait(time.Hour), "never cut")

	link.Observe(errors.New("duplicate key value violates unique constraint"))
	require.Zero(t, link.Wait(time.Hour), "not a transient error")

	link.Observe(syscall.ECONNREFUSED)
	require.Equal(t, time.Hour, link.Wait(time.Hour), "cut: the whole window")
	link.Observe(syscall.ECONNRESET)
	require.Equal(t, time.Hour, link.Wait(time.Hour), "still cut")

	before := time.Now()
	link.Observe(nil)
	wait := link.Wait(time.Hour)
	require.Greater(t, wait, time.Hour-time.Since(before)-time.Millisecond, "back: the rest of the window since it came back")
	require.LessOrEqual(t, wait, time.Hour)
	require.Zero(t, link.Wait(0), "a window already over")

	link.Observe(nil)
	require.LessOrEqual(t, link.Wait(time.Hour), wait, "a success while up does not restart the window")

	var none *request.Reachability
	none.Observe(syscall.ECONNREFUSED)
	require.Zero(t, none.Wait(time.Hour))
}
