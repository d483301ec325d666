package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildrisk/radar/observability"
)

// This file is the bounded fan-out: the fix for the lost-events incident
// (docs/architecture.md, "Zero-loss fan-out") made a framework guarantee. Per-item external work inside a chunk runs on
// at most Size goroutines. A slot is acquired *before* an item is handed
// over; when every slot is busy the producer waits, and the items not yet
// handed over stay where they are (in the chunk's list, read from the
// database) — there is no queue in front of the workers, so there is nothing
// that can overflow and drop. Pool size sets speed, never safety.

// ErrFanOutClosed is returned by FanOut.Submit once the pool is closed: the
// item was not handed over (and is counted as a rejection, because a caller
// that submits to a closed pool has lost track of its items).
var ErrFanOutClosed = errors.New("fan-out pool is closed")

// PanicError is a handed-over function that panicked. The pool recovers it
// so that one bad item neither kills the worker process nor leaks its slot;
// the item counts as failed. The stack is deliberately not kept: a failure
// per item is counted, not logged with a trace (a stack trace per refused
// item once buried a real loss under 18 million log lines).
type PanicError struct {
	// Value is what the function panicked with.
	Value any
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Keys of the fan-out's summary line (observability.Summary): how many items
// were handed over and how they ended, how often the producer had to wait
// for a slot (backpressure at work, not a problem), and refusals by reason.
const (
	summarySubmitted       = "submitted"
	summarySucceeded       = "succeeded"
	summaryFailed          = "failed"
	summaryPanicked        = "panicked"
	summaryWaitedForSlot   = "waited_for_slot"
	summaryNotHandedOver   = "not_handed_over"
	summaryRejectedClosed  = "rejected_" + observability.ReasonClosed
	summaryRejectedSubmitF = "rejected_" + observability.ReasonSubmitFailed
)

// FanOutConfig configures a FanOut.
type FanOutConfig struct {
	// Job names the job in metrics and logs. Required.
	Job string
	// Size is the number of slots (BUILDRISK_FANOUT); below 1 means
	// FanOutDefault.
	Size int
	// Instruments records the pool's gauges and rejections. Required.
	Instruments *observability.Instruments
	// Logger receives the summary line; defaults to slog.Default(). It
	// should carry the job and execution (a Run's Logger does).
	Logger *slog.Logger
	// SummaryInterval is how often a long-lived pool logs its summary
	// line; defaults to observability.SummaryIntervalDefault. A pool also
	// logs one when it is closed.
	SummaryInterval time.Duration
}

func (c FanOutConfig) withDefaults() FanOutConfig {
	if c.Size < 1 {
		c.Size = FanOutDefault
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.SummaryInterval = cmp.Or(c.SummaryInterval, observability.SummaryIntervalDefault)
	return c
}

func (c FanOutConfig) validate() error {
	switch {
	case c.Job == "":
		return errors.New("batch: FanOutConfig.Job is required")
	case c.Instruments == nil:
		return errors.New("batch: FanOutConfig.Instruments is required")
	}
	return nil
}

// FanOut is a bounded pool of goroutines for per-item work. Submit acquires
// a slot first and blocks while none is free; the slot is released in a
// defer when the item's function returns (or panics), and on the path where
// handing over fails. Close stops accepting items and waits for the ones in
// flight. The gauges buildrisk_fanout_inflight and buildrisk_fanout_capacity
// show its state; refusals count buildrisk_fanout_rejections_total.
//
// A FanOut holds no database connection: the functions it runs must not
// either while they wait on the network (a chunk's external calls run with
// no transaction open, so a slow provider never pins a pool connection).
type FanOut struct {
	cfg   FanOutConfig
	slots chan struct{} // a token per busy slot; never more than Size

	mu     sync.Mutex // guards closed and the WaitGroup's Add against Close's Wait
	closed bool
	wg     sync.WaitGroup

	// tasks hands items to the runners: goroutines that live until Close
	// and run item after item, so an item does not start on a fresh
	// goroutine whose stack must grow again through the provider call's
	// deep path (HTTP, telemetry, the part commit); that regrowth was about
	// 5 % of the CPU of a fan-out at 64 slots. There are at most Size
	// runners (runners, guarded by mu): a Submit that holds a slot while
	// Size runners exist knows at most Size-1 of them hold items, so one is
	// idle or about to be, and its send is taken at once.
	tasks   chan task
	runners int

	inflight atomic.Int64
	peak     atomic.Int64
	waiting  atomic.Int64

	firstPanic atomic.Pointer[PanicError]

	summary       *observability.Summary
	stopSummary   context.CancelFunc
	summaryDone   chan struct{}
	closeOnce     sync.Once
	beforeHandout func() // test hook: runs after a slot is acquired, before the hand-over
	runnerStarted func() // test hook: runs when Submit starts a runner goroutine
}

// NewFanOut returns a pool with cfg.Size slots and records its capacity.
// Close it when done: that waits for the items in flight and logs the
// summary line.
func NewFanOut(cfg FanOutConfig) (*FanOut, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger.With(slog.Int("capacity", cfg.Size))
	p := &FanOut{
		cfg:         cfg,
		slots:       make(chan struct{}, cfg.Size),
		tasks:       make(chan task),
		summary:     observability.NewSummary(logger, cfg.SummaryInterval, "fan-out summary"),
		summaryDone: make(chan struct{}),
	}
	var ctx context.Context
	ctx, p.stopSummary = context.WithCancel(context.Background())
	go func() {
		defer close(p.summaryDone)
		p.summary.Run(ctx)
	}()
	cfg.Instruments.FanoutCapacitySet(context.Background(), cfg.Job, int64(cfg.Size))
	return p, nil
}

// Size returns the number of slots.
func (p *FanOut) Size() int { return p.cfg.Size }

// Submit hands fn over to a free slot, waiting for one while all are busy.
// fn runs on its own goroutine with ctx. Submit returns nil once fn is
// handed over; ctx's error when ctx ended before a slot was free (the item
// was not handed over and stays with the caller); ErrFanOutClosed when the
// pool is closed. An error fn returns only feeds the summary line: callers
// that need results collect them in fn (see FanOutEach).
func (p *FanOut) Submit(ctx context.Context, fn func(context.Context) error) error {
	if p.isClosed() {
		p.reject(ctx, observability.ReasonClosed, summaryRejectedClosed)
		return ErrFanOutClosed
	}
	if err := p.acquire(ctx); err != nil {
		return err
	}
	if p.beforeHandout != nil {
		p.beforeHandout()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		// Handing over failed after the slot was taken: give it back.
		p.release(ctx)
		p.reject(ctx, observability.ReasonSubmitFailed, summaryRejectedSubmitF)
		return ErrFanOutClosed
	}
	p.wg.Add(1)
	spawn := p.runners < p.cfg.Size
	if spawn {
		p.runners++
	}
	p.mu.Unlock()
	p.summary.Add(summarySubmitted, 1)
	t := task{ctx: ctx, fn: fn}
	if spawn {
		if p.runnerStarted != nil {
			p.runnerStarted()
		}
		go p.runner(t)
	} else {
		p.tasks <- t
	}
	return nil
}

// task is one handed-over item.
type task struct {
	ctx context.Context
	fn  func(context.Context) error
}

// runner runs first, then every task it receives until Close closes tasks.
func (p *FanOut) runner(first task) {
	p.run(first.ctx, first.fn)
	for t := range p.tasks {
		p.run(t.ctx, t.fn)
	}
}

// acquire takes a slot, waiting while all are busy or until ctx is done.
func (p *FanOut) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	default:
		p.summary.Add(summaryWaitedForSlot, 1)
		p.waiting.Add(1)
		select {
		case p.slots <- struct{}{}:
			p.waiting.Add(-1)
		case <-ctx.Done():
			p.waiting.Add(-1)
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		// ctx ended while the slot came free (select picks at random when
		// both are ready): do not hand over after a stop.
		<-p.slots
		return err
	}
	n := p.inflight.Add(1)
	for {
		peak := p.peak.Load()
		if n <= peak || p.peak.CompareAndSwap(peak, n) {
			break
		}
	}
	p.cfg.Instruments.FanoutInflightAdd(context.WithoutCancel(ctx), p.cfg.Job, 1)
	return nil
}

// release gives a slot back.
func (p *FanOut) release(ctx context.Context) {
	p.inflight.Add(-1)
	p.cfg.Instruments.FanoutInflightAdd(context.WithoutCancel(ctx), p.cfg.Job, -1)
	<-p.slots
}

// run runs one handed-over item; the slot is released whatever happens.
func (p *FanOut) run(ctx context.Context, fn func(context.Context) error) {
	defer p.wg.Done()
	defer p.release(ctx)
	err := callRecovering(ctx, fn)
	var panicErr *PanicError
	switch {
	case errors.As(err, &panicErr):
		p.summary.Add(summaryPanicked, 1)
		p.firstPanic.CompareAndSwap(nil, panicErr)
	case err != nil:
		p.summary.Add(summaryFailed, 1)
	default:
		p.summary.Add(summarySucceeded, 1)
	}
}

// callRecovering calls fn, turning a panic into a *PanicError.
func callRecovering(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return fn(ctx)
}

func (p *FanOut) reject(ctx context.Context, reason, key string) {
	p.cfg.Instruments.FanoutRejected(context.WithoutCancel(ctx), p.cfg.Job, reason)
	p.summary.Add(key, 1)
}

func (p *FanOut) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops accepting items, waits for every item in flight, logs the
// summary line and returns the first *PanicError of a handed-over function,
// if any. It is safe to call more than once.
func (p *FanOut) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.wg.Wait()
		// Every hand-over happened before its item's wg.Done: no Submit
		// sends anymore, and the runners exit.
		close(p.tasks)
		p.stopSummary()
		<-p.summaryDone
	})
	if pe := p.firstPanic.Load(); pe != nil {
		return pe
	}
	return nil
}

// haltError marks an item's error as one that must stop the fan-out.
type haltError struct{ err error }

func (e *haltError) Error() string { return e.err.Error() }
func (e *haltError) Unwrap() error { return e.err }

// Halt wraps err so that FanOutEach stops handing over items when an item
// returns it: the items in flight finish, the rest are not processed, and
// FanOutEach returns err. Use it for errors that make every further item
// pointless (a provider's daily cap, the execution's maxCalls, a missing
// key). Halt(nil) is nil.
func Halt(err error) error {
	if err == nil {
		return nil
	}
	return &haltError{err: err}
}

// ItemResult is what became of one item given to FanOutEach.
type ItemResult[R any] struct {
	// Value is what the item's function returned.
	Value R
	// Err is the item's error (a *PanicError when its function panicked);
	// a Halt wrapper is removed.
	Err error
	// Done reports that the item was handed over and its function returned.
	// False means the fan-out stopped before the item's turn: it was not
	// processed at all and stays where it came from.
	Done bool
	// Committed reports that FanOutCommit committed the item's value in a
	// checkpoint part. FanOutEach never sets it.
	Committed bool
}

// handout decides when a fan-out stops handing over items: when its parent
// context ends, or when something halts it (an item's Halt error, a drain,
// a stop request). The items in flight run on regardless.
type handout struct {
	ctx    context.Context // ends when handing over must stop
	stop   context.CancelFunc
	halted atomic.Pointer[haltError]
}

func newHandout(parent context.Context) *handout {
	h := &handout{}
	h.ctx, h.stop = context.WithCancel(parent)
	return h
}

// halt stops handing over; the first halting error is what the fan-out
// returns.
func (h *handout) halt(err error) {
	h.halted.CompareAndSwap(nil, &haltError{err: err})
	h.stop()
}

// fanOutWith is fanOutEach with its handout given; it closes the pool. With
// paid set, an item is handed over only once it holds one of paid's tokens,
// which fn gives back (see FanOutCommit).
func fanOutWith[T, R any](ctx context.Context, h *handout, pool *FanOut, items []T, fn func(context.Context, T) (R, error), paid *paidItems) ([]ItemResult[R], error) {
	results := make([]ItemResult[R], len(items))
	// h.ctx ends handing over; the items themselves run with ctx, so a
	// halt does not cancel the ones already in flight.
	handedOver := 0
	for i, item := range items {
		if h.ctx.Err() != nil {
			break
		}
		if paid != nil && paid.take(h.ctx) != nil {
			break // halted or ctx ended while waiting for a commit
		}
		err := pool.Submit(h.ctx, func(context.Context) error {
			value, err := callItem(ctx, item, fn)
			if he, ok := errors.AsType[*haltError](err); ok {
				h.halt(he.err)
				err = he.err
			}
			results[i] = ItemResult[R]{Value: value, Err: err, Done: true}
			return err
		})
		if err != nil {
			if paid != nil {
				paid.give() // not handed over
			}
			break // ctx ended or an item halted while waiting for a slot
		}
		handedOver++
	}
	pool.summary.Add(summaryNotHandedOver, int64(len(items)-handedOver))
	_ = pool.Close() // waits for the items in flight; panics are in results
	switch halted := h.halted.Load(); {
	case halted != nil:
		return results, halted.err
	case ctx.Err() != nil:
		return results, ctx.Err()
	case handedOver < len(items):
		return results, fmt.Errorf("fan-out: %d of %d items not handed over", len(items)-handedOver, len(items))
	}
	return results, nil
}

// callItem calls fn for item, turning a panic into a *PanicError so that
// the result records it.
func callItem[T, R any](ctx context.Context, item T, fn func(context.Context, T) (R, error)) (value R, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return fn(ctx, item)
}
