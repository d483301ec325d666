package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/jobs/request"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// A fan-out chunk pays for each item with provider calls. FanOutCommit keeps
// what was paid for: every item whose function succeeds is committed — its
// result written and its key listed in a checkpoint part
// (job_checkpoint_part) — before its slot is released, so at any moment at
// most Size items are paid for and not yet committed. Items that finish
// while a part is committing wait and commit together in the next part
// (group commit), so the parts grow when the database is the slower side.
//
// The chunk can therefore end at any item: on a drain (the runner's Drain),
// a stop request (learned at each part commit), a daily cap, maxCalls or a
// rejected key (Halt), or a failed part commit, FanOutCommit stops handing
// items over, waits for the calls in flight, commits those that succeeded
// and returns the reason. A drain thus takes at most one provider call plus
// one commit, not a chunk. A resume processes only the items that no part
// lists (JobCheckpointPartItems). When the chunk itself commits, its
// checkpoint counts only the items not committed in a part.

// ErrDrained ends a fan-out chunk whose worker is shutting down: it stopped
// handing out items and committed the finished ones.
var ErrDrained = errors.New("worker shutting down: stopped handing out the chunk's items")

// ErrStopRequested ends a fan-out chunk whose execution was asked to stop.
var ErrStopRequested = errors.New("stop requested: stopped handing out the chunk's items")

// Messages recorded on executions that stopped inside a fan-out chunk.
const (
	MessageStopRequestedInChunk = "stopped on request inside a chunk: its finished items were committed; a new request resumes with the rest"
	MessageDrainedInChunk       = "worker shut down: stopped inside a chunk, its finished items committed; a new request resumes with the rest"
)

// partCommitter commits parts of one execution's chunks. The runner gives
// one to each Run.
type partCommitter struct {
	pool        *pgxpool.Pool
	queries     *queries.Queries
	instruments *observability.Instruments
	job         string
	executionID int64
	instanceID  int64
	// workerID and leaseEpoch fence every part commit (see commitChunk).
	workerID   string
	leaseEpoch int64
	// drain is closed when the worker drains.
	drain <-chan struct{}
}

// commit writes one part: the items' results (queue) and the part's whole
// bookkeeping (JobExecutionPartCommit: its keys and the execution's written
// count) in one implicit transaction, one round trip (queries.InImplicitTx).
// It returns the execution's status, STOPPING when a stop was requested.
//
// Every item's slot stays taken until its part commits (what bounds the
// calls a kill can repeat), so this latency is paid by every call of a
// fan-out chunk.
func (c *partCommitter) commit(ctx context.Context, chunk string, keys []string, queue func(b *pgx.Batch)) (string, error) {
	var status string
	err := queries.InImplicitTx(ctx, c.pool, func(b *pgx.Batch) {
		queue(b)
		if c.executionID == 0 {
			return // no execution (see FanOutCommit): the values are only written
		}
		// The fenced statement raises (the whole batch rolls back) unless
		// the execution is still this run's. It comes last because it locks
		// the execution's row until the batch commits: a part committing
		// beside this one writes its items meanwhile and waits only for
		// that lock.
		params := &queries.JobExecutionPartCommitParams{
			ID: c.executionID, WorkerID: c.workerID, LeaseEpoch: c.leaseEpoch, Chunk: chunk, Items: keys,
		}
		queries.Queue(b, func(db queries.DBTX) { _, _ = c.queries.JobExecutionPartCommit(ctx, db, params) }).
			QueryRow(func(row pgx.Row) error { return row.Scan(&status) })
	})
	if queries.IsNotOwned(err) {
		err = fmt.Errorf("execution %d (worker %s, lease epoch %d): %w", c.executionID, c.workerID, c.leaseEpoch, ErrOwnershipLost)
	}
	if err != nil {
		return "", fmt.Errorf("commit of %d finished items of chunk %s: %w", len(keys), chunk, err)
	}
	if c.instruments != nil {
		c.instruments.ItemsCounted(context.WithoutCancel(ctx), c.job, observability.OutcomeWritten, int64(len(keys)))
	}
	return status, nil
}

// partCommitsAtOnce is how many parts of a chunk commit at the same time.
// A finished item holds its slot until its part commits, so the commit's
// latency is paid by every call: with two, an item finishing while a part
// commits starts its own part at once instead of waiting for that one to end
// (the two then serialize only on the execution row's lock, for a COMMIT).
// More did not help when measured (the fan-out rows of make bench at 4 and
// 8): items no longer waited for a turn, but each commit took as much longer,
// queued on that row lock and on the pool's connections.
const partCommitsAtOnce = 2

// groupCommit commits the values handed to it in parts, at most
// partCommitsAtOnce at a time, each with every value that arrived meanwhile.
type groupCommit[R any] struct {
	commit func(keys []string, values []R) error
	turn   chan struct{} // a token per part being committed

	mu      sync.Mutex
	pending []pendingValue[R]

	queued func() // test hook: runs once a value is pending, before its add waits for a turn
}

type pendingValue[R any] struct {
	key   string
	value R
	done  chan error
}

// add hands value over and returns when it is committed (nil) or its part
// failed to commit.
func (g *groupCommit[R]) add(key string, value R) error {
	done := make(chan error, 1)
	g.mu.Lock()
	g.pending = append(g.pending, pendingValue[R]{key: key, value: value, done: done})
	g.mu.Unlock()
	if g.queued != nil {
		g.queued()
	}

	g.turn <- struct{}{}
	g.mu.Lock()
	part := g.pending
	g.pending = nil
	g.mu.Unlock()
	if len(part) == 0 {
		// A part before ours, or one committing beside it, took it along:
		// wait for that one without holding a turn.
		<-g.turn
		return <-done
	}
	keys := make([]string, len(part))
	values := make([]R, len(part))
	for i, p := range part {
		keys[i], values[i] = p.key, p.value
	}
	err := g.commit(keys, values)
	<-g.turn
	for _, p := range part {
		p.done <- err
	}
	return <-done
}

// Committer says how FanOutCommit commits the items' values.
type Committer[T, R any] struct {
	// Key names an item in a checkpoint part (a resume skips the items
	// named there); unique within the instance. Required.
	Key func(T) string
	// Queue adds the statements that store the values of one part to the
	// part's batch (queries.Queue), which commits them with the part's
	// bookkeeping in one implicit transaction: a statement that fails rolls
	// the part back. Their callbacks run once the batch has committed, so a
	// callback's error fails the chunk but undoes nothing. Required.
	Queue func(b *pgx.Batch, values []R)
	// Keep reports whether a value is committed in a part. Values it
	// refuses (an item skipped, or with an unusable answer) are left to the
	// chunk's own commit, which accounts for them. Nil keeps every value.
	Keep func(R) bool
}

// FanOutCommit runs fn for every item on a bounded pool of run.FanOut slots,
// like FanOutEach, and commits each item whose fn succeeds (and that
// c.Keep keeps) before its slot is released, in a checkpoint part written
// by c.Queue. ItemResult.Committed tells which items were committed.
//
// It stops handing over items when ctx ends, an item returns a Halt error,
// the worker drains (ErrDrained), a part commit finds the execution
// STOPPING (ErrStopRequested) or a part fails to commit (that error); it
// returns that error after the items in flight have finished and the
// successful ones are committed. A chunk that gets an error should write
// nothing more and return it: its committed items are kept, the others stay
// targets for the resume.
func FanOutCommit[T, R any](ctx context.Context, run *Run, chunk string, items []T, fn func(context.Context, T) (R, error), c Committer[T, R]) ([]ItemResult[R], error) {
	if c.Key == nil || c.Queue == nil {
		return nil, errors.New("batch: Committer.Key and Committer.Queue are required")
	}
	parts := run.parts
	if parts == nil {
		// A Run the runner did not give (a test running a job's Process on
		// its own) has no execution to account parts to: the values are
		// only written.
		parts = &partCommitter{pool: run.DB}
	}
	pool, err := NewFanOut(FanOutConfig{Job: run.Job, Size: run.FanOut, Instruments: run.Instruments, Logger: run.Logger})
	if err != nil {
		return nil, err
	}
	h := newHandout(ctx)
	defer h.stop()
	go func() {
		select {
		case <-parts.drain:
			h.halt(ErrDrained)
		case <-h.ctx.Done():
		}
	}()

	// Parts commit even when ctx has ended: their calls were paid for.
	commitCtx := context.WithoutCancel(ctx)
	group := &groupCommit[R]{turn: make(chan struct{}, partCommitsAtOnce), commit: func(keys []string, values []R) error {
		status, err := parts.commit(commitCtx, chunk, keys, func(b *pgx.Batch) { c.Queue(b, values) })
		switch {
		case err != nil:
			h.halt(err)
		case status == request.ExecutionStopping:
			h.halt(ErrStopRequested)
		}
		return err
	}}
	type committed struct {
		value R
		ok    bool
	}
	results, err := fanOutWith(ctx, h, pool, items, func(ctx context.Context, item T) (committed, error) {
		value, err := fn(ctx, item)
		if err != nil || (c.Keep != nil && !c.Keep(value)) {
			return committed{value: value}, err
		}
		if err := group.add(c.Key(item), value); err != nil {
			return committed{value: value}, nil // succeeded, not committed: the halt says why
		}
		return committed{value: value, ok: true}, nil
	})
	out := make([]ItemResult[R], len(results))
	for i, r := range results {
		out[i] = ItemResult[R]{Value: r.Value.value, Err: r.Err, Done: r.Done, Committed: r.Value.ok}
	}
	return out, err
}

// partCommitter returns the committer of st's parts.
func (r *Runner) partCommitter(st *started) *partCommitter {
	return &partCommitter{
		pool: r.pool, queries: r.queries, instruments: r.cfg.Instruments, job: st.request.Job,
		executionID: st.exec.ID, instanceID: st.exec.InstanceID, drain: r.drain,
		workerID: st.exec.WorkerID, leaseEpoch: st.exec.LeaseEpoch,
	}
}

// CommittedItems returns the keys of the items of run's instance committed
// in checkpoint parts: a job's Plan or Process leaves them out, so a resume
// processes only items with no committed result.
func CommittedItems(ctx context.Context, run *Run) (map[string]bool, error) {
	keys, err := queries.New().JobCheckpointPartItems(ctx, run.DB, run.InstanceID)
	if err != nil {
		return nil, fmt.Errorf("error reading checkpoint parts: %w", err)
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set, nil
}
