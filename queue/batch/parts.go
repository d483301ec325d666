package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// A fan-out chunk pays for each item with provider calls. FanOutCommit keeps
// what was paid for: every item whose function succeeds is committed — its
// result written and its key listed in a checkpoint part
// (job_checkpoint_part). An item's slot is free for the next call once its
// value is handed to the part commits, but at any moment at most
// paidWindow(Size) = 2 × Size items are paid for and not yet committed (Size
// calls in flight and Size finished items waiting for their part); beyond
// that, the producer waits for a commit. One committer commits the parts
// (group commit): a part is every item finished when it begins, and it
// waits for half the slots' worth of items (or partMaxWait) before it
// begins, so a part's fixed cost (its transaction, its fenced bookkeeping)
// is shared by many items even when calls are cheap.
//
// The chunk can therefore end at any item: on a drain (the runner's Drain),
// a stop request (learned at each part commit, or by the run's watch while
// the calls stall: stop.go), a daily cap, maxCalls or a rejected key
// (Halt), or a failed part commit, FanOutCommit stops handing items over,
// waits for the calls in flight, commits those that succeeded and returns
// the reason. A drain thus takes at most one provider call plus one commit,
// not a chunk. A resume processes only the items that no part
// lists (JobCheckpointPartItems). When the chunk itself commits, its parts
// fold into its checkpoint in the same statement (JobExecutionChunkCommit
// deletes them and adds their items to the checkpoint's targets and
// written): a committed chunk is skipped whole by a resume, so nothing reads
// its parts again, and job_checkpoint_part holds only the parts of chunks
// not yet committed instead of growing with every run.

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
	pool    *pgxpool.Pool
	queries *queries.Queries
	// items counts the committed items (nil: a Run the runner did not give).
	items       *itemTally
	executionID int64
	instanceID  int64
	// workerID and leaseEpoch fence every part commit (see commitChunk).
	workerID   string
	leaseEpoch int64
	// drain is closed when the worker drains.
	drain <-chan struct{}
	// stop is closed when the run has seen its execution STOPPING (nil: a
	// Run the runner did not give); see stop.go.
	stop <-chan struct{}
	// answered is the runner's test signal of a part commit that landed
	// (testSignals.committed; nil: a Run the runner did not give).
	answered func() error
	// retry retries a transient database error of a part commit with the
	// values in hand (the runner's retryTransient; nil: one attempt).
	retry func(ctx context.Context, fn func(ctx context.Context) error) error

	mu sync.Mutex
	// committed lists the items this run committed in parts, by chunk, so
	// the runner can check they are still there before the chunk commits.
	committed map[string][]string
}

// committedIn returns the items the run committed in parts of chunk and
// has not checked yet.
func (c *partCommitter) committedIn(chunk string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.committed[chunk])
}

// forget drops chunk's items from the committed list once checked: all of
// them when none is missing, the missing ones otherwise (their new parts
// list them again).
func (c *partCommitter) forget(chunk string, missing []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(missing) == 0 {
		delete(c.committed, chunk)
		return
	}
	gone := make(map[string]bool, len(missing))
	for _, k := range missing {
		gone[k] = true
	}
	c.committed[chunk] = slices.DeleteFunc(c.committed[chunk], func(k string) bool { return gone[k] })
}

// commit writes one part: the items' results (queue) and the part's whole
// bookkeeping (JobExecutionPartCommit: its keys and the execution's written
// count) in one implicit transaction, one round trip (pgtx.InImplicitTx).
// It returns the execution's status, STOPPING when a stop was requested.
//
// The items of a part stay paid for and uncommitted until it returns, and
// at most paidWindow of them may be, so a commit slower than the calls
// makes the calls wait for it. A transient database error (a lock held
// past the statement timeout, a restart, a failover) is retried with the
// values in hand, for as long as the run keeps its window: the provider is
// never paid again for an answer the run holds. The writes are upserts, so
// an attempt after one whose commit landed unseen first checks for the
// part (JobCheckpointPartHas) and does not count it twice.
func (c *partCommitter) commit(ctx context.Context, chunk string, keys []string, queue func(b *pgx.Batch)) (radartype.ExecutionStatus, error) {
	var status string
	attempt := 0
	landed := false
	once := func(ctx context.Context) error {
		attempt++
		if attempt > 1 && c.executionID != 0 {
			has, err := c.queries.JobCheckpointPartHas(ctx, c.pool, &queries.JobCheckpointPartHasParams{
				InstanceID: c.instanceID, Chunk: chunk, ExecutionID: c.executionID, Item: keys[0],
			})
			if err != nil {
				return err
			}
			if has {
				landed = true
				return nil
			}
		}
		err := pgtx.InImplicitTx(ctx, c.pool, func(b *pgx.Batch) {
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
		if err == nil && c.answered != nil {
			err = c.answered()
		}
		if pgtx.IsNotOwned(err) {
			return fmt.Errorf("execution %d (worker %s, lease epoch %d): %w", c.executionID, c.workerID, c.leaseEpoch, ErrOwnershipLost)
		}
		return err
	}
	var err error
	if c.retry != nil {
		err = c.retry(ctx, once)
	} else {
		err = once(ctx)
	}
	if err != nil {
		return "", fmt.Errorf("commit of %d finished items of chunk %s: %w", len(keys), chunk, err)
	}
	if landed {
		// An earlier attempt committed and its answer was lost: the items
		// are committed (and counted now); the status is learned at the
		// next part or chunk commit.
		status = ""
	}
	if c.executionID != 0 {
		c.mu.Lock()
		if c.committed == nil {
			c.committed = map[string][]string{}
		}
		c.committed[chunk] = append(c.committed[chunk], keys...)
		c.mu.Unlock()
	}
	c.items.count(ctx, observability.OutcomeWritten, int64(len(keys)))
	return radartype.ExecutionStatus(status), nil
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
	// Failed, when set, is told of every item whose function failed (a
	// panic included, a Halt error not), with how many items of this call
	// have failed so far; calls are serialized. An error it returns stops
	// handing over items at once, like an item's Halt error, and is what
	// FanOutCommit returns: a failure tolerance is checked as items fail,
	// not after the chunk has made every call.
	Failed func(failed int64, err error) error
}

// FanOutCommit runs fn for every item on a bounded pool of run.FanOut slots,
// like FanOutEach, and commits each item whose fn succeeds (and that
// c.Keep keeps) in a checkpoint part written by c.Queue. An item's slot is
// free for the next call as soon as its value is handed to the part
// commits, but at most paidWindow(run.FanOut) items are ever paid for and
// not yet committed: the producer waits for a commit before handing over
// more. ItemResult.Committed tells which items were committed.
//
// It stops handing over items when ctx ends, an item returns a Halt error,
// the worker drains (ErrDrained), a part commit or the run's watch finds
// the execution STOPPING (ErrStopRequested) or a part fails to commit (that
// error); it returns that error after the items in flight have finished and
// the successful ones are committed. A chunk that gets an error should
// write nothing more and return it: its committed items are kept, the
// others stay targets for the resume.
func FanOutCommit[T, R any](ctx context.Context, run *Run, chunk string, items []T, fn func(context.Context, T) (R, error), c Committer[T, R]) ([]ItemResult[R], error) {
	return fanOutCommit(ctx, run, chunk, items, fn, c, nil)
}

// fanOutCommit is FanOutCommit; windowFull, when set, runs each time the
// producer waits because paidWindow items are paid for and uncommitted.
func fanOutCommit[T, R any](ctx context.Context, run *Run, chunk string, items []T, fn func(context.Context, T) (R, error), c Committer[T, R], windowFull func()) ([]ItemResult[R], error) {
	if c.Key == nil || c.Queue == nil {
		return nil, errors.New("batch: Committer.Key and Committer.Queue are required")
	}
	parts := run.parts
	if parts == nil {
		// A Run the runner did not give (a test running a job's Process on
		// its own) has no execution to account parts to: the values are
		// only written.
		parts = &partCommitter{pool: run.pool()}
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
		case <-parts.stop:
			h.halt(ErrStopRequested)
		case <-h.ctx.Done():
		}
	}()

	// Parts commit even when ctx has ended: their calls were paid for.
	commitCtx := context.WithoutCancel(ctx)
	group := newGroupCommit(minPart(pool.Size()), partMaxWait, func(keys []string, values []R) error {
		status, err := parts.commit(commitCtx, chunk, keys, func(b *pgx.Batch) { c.Queue(b, values) })
		switch {
		case err != nil:
			h.halt(err)
		case status == radartype.ExecutionStopping:
			h.halt(ErrStopRequested)
		}
		return err
	})
	paid := &paidItems{tokens: make(chan struct{}, paidWindow(pool.Size())), full: windowFull}
	committed := make([]bool, len(items)) // written by the committers, read after group.close
	indexes := make([]int, len(items))
	for i := range indexes {
		indexes[i] = i
	}
	var failMu sync.Mutex
	var failed int64
	noteFailure := func(err error) {
		if c.Failed == nil || err == nil {
			return
		}
		if _, halting := errors.AsType[*haltError](err); halting {
			return
		}
		failMu.Lock()
		defer failMu.Unlock()
		failed++
		if stop := c.Failed(failed, err); stop != nil {
			h.halt(stop)
		}
	}
	results, err := fanOutWith(ctx, h, pool, indexes, func(ctx context.Context, i int) (value R, err error) {
		handedToGroup := false
		defer func() {
			if r := recover(); r != nil {
				err = &PanicError{Value: r}
			}
			noteFailure(err)
			if !handedToGroup {
				paid.give() // failed, skipped or panicked: nothing to commit
			}
		}()
		value, err = fn(ctx, items[i])
		if err != nil || (c.Keep != nil && !c.Keep(value)) {
			return value, err
		}
		handedToGroup = true
		group.add(c.Key(items[i]), value, func(err error) {
			committed[i] = err == nil // not committed: the halt says why
			paid.give()
		})
		return value, nil
	}, paid)
	// Every finished item's part commits, even after a halt or a stop.
	group.close()
	if halted := h.halted.Load(); halted != nil {
		err = halted.err // a part that failed after the last item ended
	}
	out := make([]ItemResult[R], len(results))
	for i, r := range results {
		out[i] = ItemResult[R]{Value: r.Value, Err: r.Err, Done: r.Done, Committed: committed[i]}
	}
	return out, err
}

// partCommitter returns the committer of rs's parts.
func (r *Runner) partCommitter(rs *runState) *partCommitter {
	return &partCommitter{
		pool: r.pool, queries: r.queries, items: rs.items,
		executionID: rs.exec.ID, instanceID: rs.exec.InstanceID, drain: r.drained(),
		workerID: rs.exec.WorkerID, leaseEpoch: rs.exec.LeaseEpoch, answered: func() error { return r.testSignals.committed(commitPart) },
		retry: func(ctx context.Context, fn func(ctx context.Context) error) error {
			return r.retryTransient(ctx, rs.fenced, rs, fn)
		},
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

// AllPagesLimit is the page size of [AllPages].
const AllPagesLimit = 1000

// AllPages collects every key a keyset-paged query returns: page(after,
// limit) returns up to limit keys after after ("" first), in key order.
// Plans use it to list coverage's missing targets.
func AllPages(page func(after string, limit int32) ([]string, error)) ([]string, error) {
	var all []string
	after := ""
	for {
		keys, err := page(after, AllPagesLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, keys...)
		if len(keys) < AllPagesLimit {
			return all, nil
		}
		after = keys[len(keys)-1]
	}
}
