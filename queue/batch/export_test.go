package batch

import "context"

// The tests observe a pool and fan items out without checkpoint parts
// through these; the jobs use FanOutCommit.

// InFlight returns how many items hold a slot now; never more than Size.
func (p *FanOut) InFlight() int { return int(p.inflight.Load()) }

// Peak returns the most items that held a slot at once.
func (p *FanOut) Peak() int { return int(p.peak.Load()) }

// Waiting returns how many producers are blocked in Submit waiting for a
// slot (backpressure at work).
func (p *FanOut) Waiting() int { return int(p.waiting.Load()) }

// FanOutEach runs fn for every item on a bounded pool of run.FanOut slots
// and returns one result per item, in the items' order. Items are handed
// over one at a time, each only when a slot is free.
//
// It stops handing over when ctx ends (stop, drain past its timeout) or when
// an item returns a Halt error; either way it waits for the items in flight
// before it returns, and it returns ctx's error or the halting error. Items
// never handed over have Done false: the caller must treat them as not
// processed (a chunk should then write nothing and return the error, so its
// targets stay in the database for the resume).
func FanOutEach[T, R any](ctx context.Context, run *Run, items []T, fn func(context.Context, T) (R, error)) ([]ItemResult[R], error) {
	pool, err := NewFanOut(FanOutConfig{Job: run.Job, Size: run.FanOut, Instruments: run.Instruments, Logger: run.Logger})
	if err != nil {
		return nil, err
	}
	return fanOutEach(ctx, pool, items, fn)
}

// fanOutEach is FanOutEach on a given pool, which it closes.
func fanOutEach[T, R any](ctx context.Context, pool *FanOut, items []T, fn func(context.Context, T) (R, error)) ([]ItemResult[R], error) {
	h := newHandout(ctx)
	defer h.stop()
	return fanOutWith(ctx, h, pool, items, fn, nil)
}

// TestSignals are the runner's test signals (testsignals.go) as this
// package's external tests set them; a nil field is a signal not set.
type TestSignals struct {
	// Transient is called with each transient database error a run retries.
	Transient func(err error)
	// AnswerLost is called after each part or chunk commit that landed,
	// with which it was (CommitPart, CommitChunk); an error it returns
	// stands for the commit's answer, lost.
	AnswerLost func(commit string) error
}

// The commits TestSignals.AnswerLost is told of.
const (
	CommitPart  = commitPart
	CommitChunk = commitChunk
)

// SetTestSignals sets r's test signals. Call it before r's first run.
func (r *Runner) SetTestSignals(s TestSignals) {
	r.testSignals = testSignals{transient: s.Transient, answerLost: s.AnswerLost}
}
