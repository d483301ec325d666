package request

import (
	"sync"
	"time"

	"github.com/buildrisk/radar/sql/pgtx"
)

// Reachability is what a process knows of its own link to the database:
// whether its last call reached it and since when it has reached it again
// after being cut off. A reaper judges staleness by heartbeats, and a
// heartbeat can only land while its worker reaches the database: a reaper
// that was cut off itself (a partition of its node, an outage) may have
// been cut off with the workers it would judge, so it waits one stale
// window after reconnecting before it reaps anyone, giving every live
// worker the chance to beat again. A process that was never cut off
// reaps at once. Durations come from the process's monotonic clock; no
// day or time of day is read from it.
//
// The zero value and a nil *Reachability are usable (a nil one never
// makes a reaper wait).
type Reachability struct {
	mu     sync.Mutex
	down   bool
	backAt time.Time // when the link came back after its last cut; zero: never cut
}

// NewReachability returns the Reachability of a process never cut off.
func NewReachability() *Reachability { return &Reachability{} }

// Observe records the result of a call to the database: a transient error
// (pgtx.IsTransient: a refused or broken connection, a timeout) is a
// cut; a success after a cut starts the wait. Other errors say nothing
// about the link.
func (r *Reachability) Observe(err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil && r.down:
		r.down, r.backAt = false, time.Now()
	case err != nil && pgtx.IsTransient(err):
		r.down = true
	}
}

// Wait returns how much longer a reaper must wait before judging
// staleness over window: window while the link is down, the rest of the
// window since it came back, 0 when it was never cut or came back at least
// window ago.
func (r *Reachability) Wait(window time.Duration) time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.down:
		return window
	case r.backAt.IsZero():
		return 0
	default:
		return max(0, window-time.Since(r.backAt))
	}
}
