package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// UnaccountedError fails a chunk whose figures do not add up: its targets
// are not exactly its written, skipped and failed items (or a figure is
// negative). The runner checks every chunk before it commits, so one
// chunk's surplus can never cancel another's loss in the instance's totals.
type UnaccountedError struct {
	Chunk                             string
	Targets, Written, Skipped, Failed int64
}

// Error implements error.
func (e *UnaccountedError) Error() string {
	return fmt.Sprintf("chunk %s: unaccounted: %d of %d targets (written %d, skipped %d, failed %d)",
		e.Chunk, e.Unaccounted(), e.Targets, e.Written, e.Skipped, e.Failed)
}

// Unaccounted is how many items the chunk's figures miss (or exceed) by.
func (e *UnaccountedError) Unaccounted() int64 {
	return max(abs(e.Targets-(e.Written+e.Skipped+e.Failed)), 1)
}

// checkChunk holds a processed chunk to targets = written + skipped +
// failed, every figure >= 0. A chunk that breaks it is counted as
// unaccounted items and returned as an *UnaccountedError; it must not
// commit.
func (r *Runner) checkChunk(ctx context.Context, job, chunk string, res *ChunkResult) error {
	if res.Targets == res.Written+res.Skipped+res.Failed && res.Targets >= 0 && res.Written >= 0 && res.Skipped >= 0 && res.Failed >= 0 {
		return nil
	}
	err := &UnaccountedError{Chunk: chunk, Targets: res.Targets, Written: res.Written, Skipped: res.Skipped, Failed: res.Failed}
	r.cfg.Instruments.ItemsCounted(ctx, job, observability.OutcomeUnaccounted, err.Unaccounted())
	return err
}

// ItemFailures is implemented by a chunk's error when items of the chunk
// failed and the chunk does not commit (a creditEval chunk over its failure
// tolerance). The runner counts them as failed items — in
// buildrisk_items_total{outcome="failed"} and the execution's items_failed —
// although no checkpoint holds them: a run that fails because of failed
// items shows them. The items stay targets of the instance, for a resume.
type ItemFailures interface {
	error
	// FailedItems is how many of the chunk's items failed.
	FailedItems() int64
}

// countItemFailures counts the failed items of a chunk that ended with an
// ItemFailures error: the execution's items_failed and, once that write has
// landed, buildrisk_items_total{outcome="failed"}, so the counter never
// says more than the database. A write error is logged: the execution's
// message names the failures anyway.
func (r *Runner) countItemFailures(ctx context.Context, st *started, err error) {
	failures, ok := errors.AsType[ItemFailures](err)
	if !ok || failures.FailedItems() <= 0 {
		return
	}
	n := failures.FailedItems()
	rows, err := r.queries.JobExecutionItemsFailed(context.WithoutCancel(ctx), r.pool, &queries.JobExecutionItemsFailedParams{
		ID: st.exec.ID, Failed: n, WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
	})
	switch {
	case err == nil && rows > 0:
		st.items.count(ctx, observability.OutcomeFailed, n)
	case err != nil:
		r.cfg.Logger.ErrorContext(ctx, "could not count the failed items on the execution",
			slog.Int64("execution_id", st.exec.ID), slog.Int64("failed", n), slog.String("error", err.Error()))
	case rows == 0:
		// Fenced: the execution is no longer this run's; the outcome
		// recording finds the same and ends the run as ownership lost.
		r.cfg.Logger.WarnContext(ctx, "failed items not counted on the execution: it is no longer this run's",
			slog.Int64("execution_id", st.exec.ID), slog.Int64("failed", n))
	}
}

// itemTally is what one run counted in buildrisk_items_total, by outcome.
// Every count follows a write that landed, but a commit can land and its
// answer be lost (the connection dropped after the server committed); the
// retry then finds the items committed and does not count them again, so
// the run settles the difference against its execution's own figures when
// it ends (settleItemCounts).
type itemTally struct {
	instruments *observability.Instruments
	job         string
	written     atomic.Int64
	skipped     atomic.Int64
	failed      atomic.Int64
}

// count adds n items of outcome to the counter and to the tally.
func (t *itemTally) count(ctx context.Context, outcome string, n int64) {
	if t == nil || n <= 0 {
		return
	}
	switch outcome {
	case observability.OutcomeWritten:
		t.written.Add(n)
	case observability.OutcomeSkipped:
		t.skipped.Add(n)
	case observability.OutcomeFailed:
		t.failed.Add(n)
	}
	t.instruments.ItemsCounted(context.WithoutCancel(ctx), t.job, outcome, n)
}

// settleItemCounts counts the items the run's execution holds and the run
// did not count: those of commits whose answer was lost. The execution's
// figures are final once its run ends (every write is fenced on it), so the
// counter ends equal to them. A read that fails is logged: the counter then
// says less than the database, never more.
func (r *Runner) settleItemCounts(ctx context.Context, rs *runState) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
	defer cancel()
	exec, err := r.queries.JobExecutionGetByID(callCtx, r.pool, rs.exec.ID)
	if err != nil {
		rs.logger.WarnContext(ctx, "could not settle the item counts against the execution", slog.String("error", err.Error()))
		return
	}
	for _, c := range []struct {
		outcome  string
		recorded int64
		counted  *atomic.Int64
	}{
		{observability.OutcomeWritten, exec.ItemsWritten, &rs.items.written},
		{observability.OutcomeSkipped, exec.ItemsSkipped, &rs.items.skipped},
		{observability.OutcomeFailed, exec.ItemsFailed, &rs.items.failed},
	} {
		missing := c.recorded - c.counted.Load()
		switch {
		case missing > 0:
			rs.logger.InfoContext(ctx, "counted items whose commit landed although its answer was lost",
				slog.String("outcome", c.outcome), slog.Int64("items", missing))
			rs.items.count(ctx, c.outcome, missing)
		case missing < 0:
			rs.logger.ErrorContext(ctx, "the run counted more items than its execution holds",
				slog.String("outcome", c.outcome), slog.Int64("counted", c.counted.Load()), slog.Int64("recorded", c.recorded))
		}
	}
}
