package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/buildrisk/radar/radartype"
)

// An operator's stop (POST /v1/jobs/{job}/stop) marks the execution
// STOPPING in the database; nothing else tells the run. The run learns of
// it from whatever reads the execution's status back: a chunk's commit, a
// part's commit (FanOutCommit), and, while a chunk is in flight, its watch
// (Runner.watch), which reads the status every Config.StopCheckInterval and
// with each lease check. The watch is what bounds a stop whose calls stall:
// a fan-out chunk whose every call waits on a provider sending a byte a
// second reaches neither commit, and used to hand out the next item to each
// slot that freed (the stalled call failing at last) until the failures
// failed the chunk, and the execution with it.
//
// Once the run has seen STOPPING, a stop is bounded like a drain:
//
//   - no item is handed out any more: the run's fan-out halts at once with
//     ErrStopRequested, as on a drain (partCommitter.stop);
//   - the calls in flight get Config.StopTimeout (BUILDRISK_STOP_TIMEOUT,
//     by default the drain timeout) to end. The items that succeed meanwhile
//     are committed in their parts, and a chunk that ends in time commits as
//     usual, the run stopping at that boundary. A job that calls one at a
//     time (aptTrade's pages) is not interrupted between its calls: its
//     chunk has the stop timeout to end;
//   - past it the run's context is cancelled with ErrStopTimeout, like a
//     worker's jobs past the drain timeout: the calls still in flight are
//     abandoned (the provider client's requests carry the context, so they
//     end at once), nothing they return is committed (the chunk's own commit
//     never happens; a fan-out chunk keeps the parts it committed), and the
//     execution ends STOPPED with cause operator and MessageStopTimeout
//     (classify) however the calls failed. A new request resumes from the
//     last commit, redoing what was abandoned.
//
// A stop thus takes about StopCheckInterval + StopTimeout at most, and the
// time the run takes to record its end, and never ends FAILED because of
// the stop.

// ErrStopTimeout is the cause of a run's cancellation when its execution
// was asked to stop and the calls in flight outlasted Config.StopTimeout:
// they were abandoned, their results not committed.
var ErrStopTimeout = errors.New("stop requested: the calls in flight outlasted the stop timeout")

// MessageStopTimeout is recorded on an execution whose stop cancelled the
// calls still in flight at the stop timeout.
const MessageStopTimeout = "stopped on request past the stop timeout: the calls still in flight were cancelled and their results not committed; a new request resumes from the last commit"

// runStop is what a run knows of its execution's stop request. Its zero
// value is a stop not seen yet.
type runStop struct {
	mu   sync.Mutex
	seen bool
	ch   chan struct{} // closed once seen
}

// requested returns a channel that is closed once the run has seen its
// execution STOPPING.
func (s *runStop) requested() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// see records that the run has seen its execution STOPPING; it reports
// whether this is the first time.
func (s *runStop) see() (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen {
		return false
	}
	s.seen = true
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	close(s.ch)
	return true
}

// stopWatch is the stop's part of a run's watch (Runner.watch): it reads
// the execution's status every StopCheckInterval until it is STOPPING
// (the lease check's status counts too, through seen), then stops handing
// out the run's items and, past StopTimeout, cancels the run with
// ErrStopTimeout. It runs on the watch's goroutine; end stops its timer.
type stopWatch struct {
	r      *Runner
	rs     *runState
	cancel context.CancelCauseFunc
	// poll ticks every StopCheckInterval until the stop is seen (nil then).
	ticker *time.Ticker
	poll   <-chan time.Time
	timer  *time.Timer // the stop timeout, from the moment the stop is seen
}

func (r *Runner) newStopWatch(rs *runState, cancel context.CancelCauseFunc) *stopWatch {
	w := &stopWatch{r: r, rs: rs, cancel: cancel, ticker: time.NewTicker(r.cfg.StopCheckInterval)}
	w.poll = w.ticker.C
	return w
}

// check reads the execution's status. It judges nothing else: a read
// error, or an execution that is no longer the run's, is the lease
// check's and the fenced writes' to find.
func (w *stopWatch) check(ctx context.Context) {
	checkCtx, cancel := context.WithTimeout(ctx, w.r.cfg.DBTimeout)
	defer cancel()
	exec, err := w.r.queries.JobExecutionGetByID(checkCtx, w.r.pool, w.rs.exec.ID)
	if err == nil {
		w.seen(ctx, radartype.ExecutionStatus(exec.Status))
	}
}

// seen acts on a status the run read: the first STOPPING halts the run's
// fan-out and starts the stop timeout.
func (w *stopWatch) seen(ctx context.Context, status radartype.ExecutionStatus) {
	if status != radartype.ExecutionStopping || !w.rs.stop.see() {
		return
	}
	w.ticker.Stop()
	w.poll = nil
	w.timer = time.AfterFunc(w.r.cfg.StopTimeout, func() { w.cancel(ErrStopTimeout) })
	w.rs.logger.InfoContext(ctx, "stop requested: no more items handed out, the calls in flight get the stop timeout",
		slog.Duration("stop_timeout", w.r.cfg.StopTimeout))
}

// end stops the poll and the stop timeout: the run's work has ended.
func (w *stopWatch) end() {
	w.ticker.Stop()
	if w.timer != nil {
		w.timer.Stop()
	}
}
