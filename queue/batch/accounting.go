package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
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

// itemTally is what one run holds committed, by outcome, and what it
// counted in buildrisk_items_total. Every count follows a write that
// landed, but a commit can land and its answer be lost (the connection
// dropped after the server committed); the retry then finds the items
// committed and does not count them again, so the run settles the
// difference against its execution's own figures when it ends
// (settleItemCounts). A commit can also be acknowledged and then vanish (a
// failover to an asynchronous replica that never received it): lose takes
// its items out of the tally, and the counter, which only grows, does not
// count them again when the run commits them once more.
type itemTally struct {
	instruments *observability.Instruments
	job         string
	written     outcomeTally
	skipped     outcomeTally
	failed      outcomeTally
}

// outcomeTally is one outcome's items: committed is what the run holds
// committed now; counted is what it has added to the counter, which is
// never less.
type outcomeTally struct {
	committed atomic.Int64
	counted   atomic.Int64
}

// of returns the outcome's tally, nil for an outcome not tallied.
func (t *itemTally) of(outcome string) *outcomeTally {
	switch outcome {
	case observability.OutcomeWritten:
		return &t.written
	case observability.OutcomeSkipped:
		return &t.skipped
	case observability.OutcomeFailed:
		return &t.failed
	}
	return nil
}

// committedTotal is every item the run holds committed, whatever its
// outcome.
func (t *itemTally) committedTotal() int64 {
	return t.written.committed.Load() + t.skipped.committed.Load() + t.failed.committed.Load()
}

// count adds n committed items of outcome to the tally, and to the counter
// those it has not counted before (the items of a lost commit, done again).
func (t *itemTally) count(ctx context.Context, outcome string, n int64) {
	if t == nil || n <= 0 {
		return
	}
	o := t.of(outcome)
	if o == nil {
		t.instruments.ItemsCounted(context.WithoutCancel(ctx), t.job, outcome, n)
		return
	}
	committed := o.committed.Add(n)
	for {
		counted := o.counted.Load()
		if committed <= counted {
			return
		}
		if o.counted.CompareAndSwap(counted, committed) {
			t.instruments.ItemsCounted(context.WithoutCancel(ctx), t.job, outcome, committed-counted)
			return
		}
	}
}

// lose takes n items of outcome out of the tally: their commit was
// acknowledged and is not in the database. The counter keeps them; the
// items count there again only past what it already holds.
func (t *itemTally) lose(outcome string, n int64) {
	if o := t.of(outcome); o != nil && n > 0 {
		o.committed.Add(-n)
	}
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
		{observability.OutcomeWritten, exec.ItemsWritten, &rs.items.written.committed},
		{observability.OutcomeSkipped, exec.ItemsSkipped, &rs.items.skipped.committed},
		{observability.OutcomeFailed, exec.ItemsFailed, &rs.items.failed.committed},
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

// countDomainRows is the second count of an execution that ended with a
// status: the domain rows its instance wrote, counted by the job's query
// (nil for a job without one, or when the count fails, which is logged:
// the execution is recorded without it).
func (r *Runner) countDomainRows(ctx context.Context, rs *runState, job Job) *int64 {
	counter, ok := job.(DomainRowCounter)
	if !ok {
		return nil
	}
	n, err := r.domainRows(context.WithoutCancel(ctx), counter, rs.started.exec.InstanceID)
	if err != nil {
		rs.logger.WarnContext(ctx, "could not count the domain rows", slog.String("error", err.Error()))
		return nil
	}
	return &n
}

// domainRows counts the rows the instance's executions wrote.
func (r *Runner) domainRows(ctx context.Context, counter DomainRowCounter, instanceID int64) (int64, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	ids, err := r.queries.JobExecutionIDsByInstance(callCtx, r.pool, instanceID)
	if err != nil {
		return 0, fmt.Errorf("error listing the instance's executions: %w", err)
	}
	return counter.DomainRows(callCtx, r.pool, ids)
}

// account refuses a silent success: every declared target must be written,
// skipped or failed, or the execution ends FAILED.
func (r *Runner) account(ctx context.Context, rs *runState, plan *Plan, job string) (radartype.ExecutionStatus, string, error) {
	var totals *queries.JobCheckpointTotalsRow
	var reasons []*queries.JobCheckpointSkipReasonsRow
	err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		if totals, err = r.queries.JobCheckpointTotals(callCtx, r.pool, rs.exec.InstanceID); err != nil {
			return err
		}
		reasons, err = r.queries.JobCheckpointSkipReasons(callCtx, r.pool, rs.exec.InstanceID)
		return err
	})
	if err != nil {
		return "", "", err
	}
	targets := totals.Targets
	if plan.Targets != TargetsUnknown {
		targets = plan.Targets
	}
	accounted := totals.Written + totals.Skipped + totals.Failed
	if unaccounted := abs(targets - accounted); unaccounted != 0 {
		// Every committed chunk added up (checkChunk), so the gap is
		// between the declared targets and what the chunks took on.
		r.cfg.Instruments.ItemsCounted(ctx, job, observability.OutcomeUnaccounted, unaccounted)
		return radartype.ExecutionFailed, fmt.Sprintf("unaccounted: %d of %d targets (written %d, skipped %d, failed %d)",
			unaccounted, targets, totals.Written, totals.Skipped, totals.Failed), nil
	}
	// The plan adds up; so must the run's own tally: an execution holding
	// fewer items than the run committed lost a commit somewhere the plan
	// check cannot see, and that is never a success.
	if short, err := r.shortOfTally(ctx, rs); err != nil {
		return "", "", err
	} else if short > 0 {
		r.cfg.Instruments.CommitsLost(ctx, job, 1)
		r.cfg.Instruments.ItemsCounted(ctx, job, observability.OutcomeUnaccounted, short)
		return radartype.ExecutionFailed, fmt.Sprintf("unaccounted: the run committed %d items that its execution does not hold (a commit the database acknowledged was lost)", short), nil
	}
	return radartype.ExecutionCompleted, fmt.Sprintf("completed: %d targets (written %d, skipped %d%s, failed %d)",
		targets, totals.Written, totals.Skipped, skipReasons(reasons), totals.Failed), nil
}

// shortOfTally returns how many items the run holds committed (its tally)
// that its execution's figures lack, summed over the outcomes.
func (r *Runner) shortOfTally(ctx context.Context, rs *runState) (int64, error) {
	var exec *queries.JobExecution
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		exec, err = r.queries.JobExecutionGetByID(callCtx, r.pool, rs.exec.ID)
		return err
	}); err != nil {
		return 0, fmt.Errorf("error reading the execution's figures: %w", err)
	}
	var short int64
	for _, c := range []struct{ recorded, committed int64 }{
		{exec.ItemsWritten, rs.items.written.committed.Load()},
		{exec.ItemsSkipped, rs.items.skipped.committed.Load()},
		{exec.ItemsFailed, rs.items.failed.committed.Load()},
	} {
		short += max(c.committed-c.recorded, 0)
	}
	return short, nil
}

// skipReasons renders skipped items by reason: " (holiday: 100)".
func skipReasons(rows []*queries.JobCheckpointSkipReasonsRow) string {
	if len(rows) == 0 {
		return ""
	}
	parts := make([]string, 0, len(rows))
	for _, row := range rows {
		reason := row.SkipReason
		if reason == "" {
			reason = "unspecified"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", reason, row.Skipped))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
