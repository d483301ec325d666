package batch

import (
	"context"
	"sync"
	"time"
)

// partMaxWait is how long a finished item waits for others to share its
// part: past it, the part commits with what it has. It bounds how stale a
// slow chunk's progress and its view of a stop request get, and matters
// only when calls are slow or few (at FANOUT 64 and 20 ms calls, half the
// slots finish in about 10 ms).
const partMaxWait = 20 * time.Millisecond

// minPart is how many finished items a part waits for (up to partMaxWait):
// half the slots. With at most paidWindow = 2 × size items paid for and
// uncommitted, a part of half the slots committing and as many waiting for
// the next still leave every slot calling. Waiting for company is what
// makes parts big when calls are cheap: taking whatever was pending made
// parts of about 15 items at FANOUT 64 and 0 ms calls, where PostgreSQL
// then spent 4 to 5 times the CPU per item of upserts of 1,000
// (BENCHMARKS.md).
func minPart(size int) int { return max(1, size/2) }

// paidWindow is how many items of a fan-out chunk may be paid for (handed
// over to a provider call) and not yet committed: the size calls in flight
// and as many finished ones whose part is committing. It bounds what a kill
// repeats. Twice the slots is what lets a slot start its next call while the
// previous one's part commits: at FANOUT slots' worth of finished items, a
// whole wave of completions can wait for its commit while the next wave's
// calls are in flight, so the commit no longer adds to every call's time.
func paidWindow(size int) int { return 2 * size }

// groupCommit commits the values handed to it in parts, on one committer
// goroutine: a part is every value pending when the committer takes them,
// which it does once minPart values are pending, the oldest of them has
// waited maxWait, or the group is closed. add does not wait for the commit:
// done reports it.
type groupCommit[R any] struct {
	commit  func(keys []string, values []R) error
	minPart int
	maxWait time.Duration

	mu      sync.Mutex
	wake    *sync.Cond // signalled when a part is due or the group closes
	pending []pendingValue[R]
	closed  bool
	// due is set when the oldest pending value has waited maxWait; timer
	// sets it, for the part of generation gen.
	due   bool
	gen   uint64
	timer *time.Timer
	done  chan struct{} // closed when the committer has returned

	queued func() // test hook: runs once a value is pending
}

type pendingValue[R any] struct {
	key   string
	value R
	done  func(error)
}

// newGroupCommit starts the committer of a group; close it to wait for it.
func newGroupCommit[R any](minPart int, maxWait time.Duration, commit func(keys []string, values []R) error) *groupCommit[R] {
	g := &groupCommit[R]{commit: commit, minPart: max(1, minPart), maxWait: maxWait, done: make(chan struct{})}
	g.wake = sync.NewCond(&g.mu)
	go g.committer()
	return g
}

// add hands value over; done is called with its part's result once the part
// has committed (nil) or failed to. add does not wait for that.
func (g *groupCommit[R]) add(key string, value R, done func(error)) {
	g.mu.Lock()
	g.pending = append(g.pending, pendingValue[R]{key: key, value: value, done: done})
	switch {
	case len(g.pending) >= g.minPart:
		g.wake.Signal()
	case len(g.pending) == 1:
		// The first value of a part: it waits at most maxWait for company.
		g.gen++
		gen := g.gen
		g.timer = time.AfterFunc(g.maxWait, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.gen == gen {
				g.due = true
				g.wake.Signal()
			}
		})
	}
	g.mu.Unlock()
	if g.queued != nil {
		g.queued()
	}
}

// close commits what is pending and waits for every part to end. Nothing may
// be added after it.
func (g *groupCommit[R]) close() {
	g.mu.Lock()
	g.closed = true
	g.wake.Broadcast()
	g.mu.Unlock()
	<-g.done
}

// committer commits parts until the group is closed and nothing is pending.
func (g *groupCommit[R]) committer() {
	defer close(g.done)
	for {
		g.mu.Lock()
		for !g.closed && (len(g.pending) == 0 || (len(g.pending) < g.minPart && !g.due)) {
			g.wake.Wait()
		}
		part := g.pending
		g.pending, g.due = nil, false
		if g.timer != nil {
			g.timer.Stop()
			g.timer = nil
		}
		g.gen++ // a timer that fires now belongs to no part
		g.mu.Unlock()
		if len(part) == 0 {
			return // closed, nothing left
		}
		keys := make([]string, len(part))
		values := make([]R, len(part))
		for i, p := range part {
			keys[i], values[i] = p.key, p.value
		}
		err := g.commit(keys, values)
		for _, p := range part {
			p.done(err)
		}
	}
}

// paidItems holds a token for every item handed over and not yet committed
// (or ended without a value to commit): at most paidWindow of them.
type paidItems struct {
	tokens chan struct{}
	full   func() // test hook: runs when an item has to wait for a token
}

// take waits for a token, or until ctx ends.
func (w *paidItems) take(ctx context.Context) error {
	select {
	case w.tokens <- struct{}{}:
		return nil
	default:
	}
	if w.full != nil {
		w.full()
	}
	select {
	case w.tokens <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// give returns a token.
func (w *paidItems) give() { <-w.tokens }
