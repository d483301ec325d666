package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// ErrOwnershipLost is returned (wrapped) by Run when a write of the run
// found its execution no longer active under this worker and lease epoch:
// it was abandoned (the reaper took this worker for dead) or a newer
// execution of its instance took over. The run stopped at once, rolled back
// what it was writing and wrote nothing more; the execution's record is
// whoever took it over's.
var ErrOwnershipLost = errors.New("ownership of the execution lost")

// ErrFenced is the cause of a run's cancellation when its process went
// without a successful heartbeat for its fencing threshold (see Fence).
var ErrFenced = errors.New("no successful heartbeat within the fencing threshold")

// ErrDatabaseStalled ends a run whose database calls kept failing
// transiently for Config.RecordRetryWindow while the process kept its
// window (heartbeats succeed): a lock held for minutes, a table a
// migration waits on. The run stops with cause database and resumes; the
// answers it paid for and could not commit are the only ones it pays for
// again.
var ErrDatabaseStalled = errors.New("database stalled")

// Fence is a process's self-fencing signal. The worker's presence (and the
// CLI's) implements it: when its last successful heartbeat is older than a
// threshold safely below the reaper's stale window, it fires, so that the
// process stops its work before anyone can take that work over.
type Fence interface {
	// Fenced returns a channel that is closed while the process is fenced.
	// A run takes it when it starts: once closed, the run has lost its
	// window, even if the process re-registers later.
	Fenced() <-chan struct{}
}

// runState is one run's ownership and outage state.
type runState struct {
	*started
	fenced <-chan struct{}
	logger *slog.Logger

	mu        sync.Mutex
	lastDBErr error // the newest transient database error, for the message
	warned    bool

	// stop is what the run knows of its execution's stop request.
	stop runStop
}

func (rs *runState) noteDBError(err error) (first bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lastDBErr = err
	first = !rs.warned
	rs.warned = true
	return first
}

func (rs *runState) dbError() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.lastDBErr
}

// lost wraps ErrOwnershipLost with the execution's identity.
func (rs *runState) lost() error {
	return fmt.Errorf("execution %d (worker %s, lease epoch %d): %w", rs.exec.ID, rs.exec.WorkerID, rs.exec.LeaseEpoch, ErrOwnershipLost)
}

// fenced returns the fence's channel, or nil (never closed) without one.
func (r *Runner) fenced() <-chan struct{} {
	if r.cfg.Fence == nil {
		return nil
	}
	return r.cfg.Fence.Fenced()
}

// watch cancels the run's work when the process fences itself or, checked
// every LeaseCheckInterval, when the execution is no longer the run's: so a
// lost execution is noticed while a chunk is in flight, not only at its
// commit. Transient errors of the check are left to the fence. It also
// learns of a stop while a chunk is in flight (stopWatch, see stop.go):
// from its status, read every StopCheckInterval and with each lease
// check, it halts the run's fan-out and, past StopTimeout, cancels the
// run with ErrStopTimeout.
func (r *Runner) watch(ctx context.Context, cancel context.CancelCauseFunc, rs *runState) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(r.cfg.LeaseCheckInterval)
		defer ticker.Stop()
		stopping := r.newStopWatch(rs, cancel)
		defer stopping.end()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-rs.fenced:
				cancel(ErrFenced)
				return
			case <-stopping.poll:
				stopping.check(ctx)
			case <-ticker.C:
				checkCtx, cancelCheck := context.WithTimeout(ctx, r.cfg.DBTimeout)
				status, err := r.queries.JobExecutionOwned(checkCtx, r.pool, &queries.JobExecutionOwnedParams{
					ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
				})
				cancelCheck()
				if errors.Is(err, pgx.ErrNoRows) {
					cancel(rs.lost())
					return
				}
				if err == nil {
					stopping.seen(ctx, radartype.ExecutionStatus(status))
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// retryTransient calls fn, each attempt bounded by DBTimeout, until it
// succeeds or fails with an error that is not a transient database error
// (pgtx.IsTransient). Transient errors are retried with a capped
// backoff while the run keeps its window: until fenced closes (the process
// fenced itself: the error then wraps ErrFenced). RecordRetryWindow bounds
// the retries too: without a fence it is the window, and with one it stops
// a statement that times out every time while the database is otherwise
// up (heartbeats succeed, the fence never fires) from being retried
// forever. rs, when set, keeps the last error for the run's message and
// logs the outage once.
func (r *Runner) retryTransient(ctx context.Context, fenced <-chan struct{}, rs *runState, fn func(ctx context.Context) error) error {
	var window <-chan time.Time // from the first transient error on
	backoff := 50 * time.Millisecond
	for {
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
		err := fn(callCtx)
		cancel()
		if err == nil || ctx.Err() != nil || !pgtx.IsTransient(err) || errors.Is(err, ErrDatabaseStalled) || errors.Is(err, ErrFenced) {
			return err // an inner retry gave up already: not again
		}
		if rs != nil && rs.noteDBError(err) {
			rs.logger.WarnContext(ctx, "database unavailable; retrying inside the fencing window", slog.String("error", err.Error()))
		}
		r.testSignals.transientRetried(err)
		if window == nil {
			timer := time.NewTimer(r.cfg.RecordRetryWindow)
			defer timer.Stop()
			window = timer.C
		}
		select {
		case <-ctx.Done():
			return err
		case <-fenced:
			return fmt.Errorf("%w: %w", ErrFenced, err)
		case <-window:
			return fmt.Errorf("%w: database errors for %s, retried in vain: %w", ErrDatabaseStalled, r.cfg.RecordRetryWindow, err)
		case <-time.After(backoff):
			backoff = min(backoff*2, time.Second)
		}
	}
}

// retryUntilDone calls fn until it succeeds, ctx ends, or retry (when set)
// says an error is final, backing off.
func retryUntilDone(ctx context.Context, fn func() error, retry func(error) bool) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || retry != nil && !retry(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// runFence is what Run.Fenced fences a job's writes on: the run's
// execution under its worker and lease epoch.
type runFence struct {
	queries *queries.Queries
	params  *queries.JobExecutionFenceParams
	lost    func() error
}

// runFence returns the fence of rs's execution.
func (r *Runner) runFence(rs *runState) *runFence {
	return &runFence{
		queries: r.queries,
		params:  &queries.JobExecutionFenceParams{ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch},
		lost:    rs.lost,
	}
}

// Fenced runs fn in a transaction fenced on the run's execution and
// commits it: the transaction's first statement (JobExecutionFence, sent
// with its BEGIN in one round trip) raises unless the execution is still
// active under the run's worker and lease epoch (the SQL function
// execution_owned, like every fenced statement of the runner's), and locks
// the execution row until the commit, so a reaper abandoning it waits or
// finds the write rolled back. It is how a job writes outside its chunks'
// commits: the plan it freezes in the database, the record of a download.
// Once the run has lost its execution it writes nothing and returns an
// error wrapping ErrOwnershipLost. Like a chunk's commit it is not retried
// here: fn runs once, and an error of it rolls the transaction back.
func (run *Run) Fenced(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	pool := run.pool()
	if pool == nil {
		return errors.New("batch: this Run has no database to write to (a runner's Run, or a Run with DB set, has)")
	}
	body := func(tx pgx.Tx) error { return fn(ctx, tx) }
	if run.fence == nil {
		return pgtx.InTx(ctx, pool, body) // a detached run: no execution to fence on
	}
	f := run.fence
	err := pgtx.InTxBatch(ctx, pool, func(b *pgx.Batch) {
		queries.Queue(b, func(db queries.DBTX) { _, _ = f.queries.JobExecutionFence(ctx, db, f.params) })
	}, body)
	if pgtx.IsNotOwned(err) {
		return f.lost()
	}
	return err
}
