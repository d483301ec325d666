package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
)

// Messages recorded on stopped executions; each tells the operator what a
// new request will do.
const (
	MessageStopRequested = "stopped on request at a chunk boundary; a new request resumes from the last commit"
	MessageDrained       = "worker shut down: stopped at a chunk boundary; a new request resumes from the last commit"
	MessageDrainTimeout  = "worker shut down past the drain timeout: the chunk in flight rolled back; a new request resumes from the last commit"
)

// Outcome is how a Run ended.
type Outcome struct {
	ExecutionID int64
	// Status is the execution's, "" when the request was not runnable or
	// the run lost its ownership.
	Status radartype.ExecutionStatus
	// RequestStatus is the request's: Status.RequestStatus().
	RequestStatus radartype.RequestStatus
	Message       string
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

// classify turns a chunk's error into the execution's final status, or
// returns an error wrapping ErrOwnershipLost when the run lost its
// execution (then there is no status to record).
func (r *Runner) classify(ctx context.Context, rs *runState, err error, where string) (radartype.ExecutionStatus, string, error) {
	var capErr *upstream.CapError
	var rateErr *upstream.RateLimitedError
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, ErrOwnershipLost):
		return "", "", err
	case errors.Is(cause, ErrOwnershipLost):
		return "", "", cause
	case errors.Is(cause, ErrFenced), errors.Is(err, ErrFenced):
		// An outage is infrastructure's doing, like a drain or a reap: the
		// run stops (it does not fail) with cause database, and the resume
		// policy resumes it, so the same outage ends the same way whether it
		// outlasts the stale window (reaped) or not (fenced).
		msg := "database outage: the worker went without a successful heartbeat past its fencing threshold, so it cancelled the work in flight uncommitted; resumes from the last commit"
		if dbErr := rs.dbError(); dbErr != nil {
			msg += fmt.Sprintf(" (last database error: %v)", dbErr)
		}
		rs.cause = radartype.CauseDatabase
		return radartype.ExecutionStopped, msg, nil
	case errors.Is(cause, ErrStopTimeout):
		// An operator's stop whose calls in flight outlasted the stop
		// timeout: whatever they failed with is the stop's doing.
		rs.cause = radartype.CauseOperator
		return radartype.ExecutionStopped, MessageStopTimeout, nil
	case errors.Is(err, ErrDatabaseStalled), errors.Is(err, ErrCommitsLost):
		// Infrastructure's doing too: the run stops and resumes from what
		// the database holds.
		rs.cause = radartype.CauseDatabase
		return radartype.ExecutionStopped, fmt.Sprintf("%s: %v; stopped, resumes from the last commit", where, err), nil
	case ctx.Err() != nil:
		rs.cause = radartype.CauseDrain
		return radartype.ExecutionStopped, MessageDrainTimeout, nil
	case errors.Is(err, ErrDrained):
		rs.cause = radartype.CauseDrain
		return radartype.ExecutionStopped, MessageDrainedInChunk, nil
	case errors.Is(err, ErrStopRequested):
		rs.cause = radartype.CauseOperator
		return radartype.ExecutionStopped, MessageStopRequestedInChunk, nil
	case errors.As(err, &rateErr):
		// The provider said when to come back: a stop, not a failure, and
		// its resume is due then.
		rs.cause, rs.resumeAt = radartype.CauseProviderRate, rateErr.Until
		return radartype.ExecutionStopped, providerRateMessage(rateErr), nil
	case errors.As(err, &capErr):
		rs.cause = radartype.CauseCap
		return radartype.ExecutionStopped, fmt.Sprintf("daily cap of %s reached; resumes from the last commit", capErr.Provider), nil
	case errors.Is(err, upstream.ErrMaxCalls):
		rs.cause = radartype.CauseMaxCalls
		return radartype.ExecutionStopped, fmt.Sprintf("%v; a new request resumes from the last commit", err), nil
	default:
		return radartype.ExecutionFailed, fmt.Sprintf("%s: %v", where, err), nil
	}
}

// providerRateMessage is the exit message of a run stopped by a provider's
// Retry-After: the provider, the wait it asked for and when the run resumes.
func providerRateMessage(e *upstream.RateLimitedError) string {
	capped := ""
	if e.Wait < e.RetryAfter {
		capped = fmt.Sprintf(" (the wait capped at %s)", e.Wait)
	}
	return fmt.Sprintf("rate limited by %s: it asked to wait %s (Retry-After), longer than a call waits; stopped, resumes from the last commit at %s%s",
		e.Provider, e.RetryAfter, e.Until.UTC().Format(time.RFC3339), capped)
}

// record writes the outcome in two steps, each retried until
// RecordRetryWindow has passed, so a short database outage does not leave
// the request RUNNING: first the execution's result (with the chained
// request, so a completion and its successor commit together), then the
// request and, through finishTx, its River job. If the second step cannot be
// recorded, the reconcile loop finalizes the request from the first.
//
// The first step is fenced: when the execution is no longer the run's, it
// records nothing (neither the result, nor the chained request, nor the
// request's end) and returns an error wrapping ErrOwnershipLost.
func (r *Runner) record(ctx context.Context, rs *runState, outcome *Outcome, domainRows *int64, finishTx func(context.Context, pgx.Tx, *Outcome) error) error {
	st := rs.started
	// The last guard before the message is stored (and answered by the
	// API): no provider key in it, in any form.
	outcome.Message = r.cfg.Upstream.Secrets().Redact(outcome.Message)
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RecordRetryWindow)
	defer cancel()
	attempt := 0
	err := retryUntilDone(recordCtx, func() error {
		attempt++
		callCtx, cancel := context.WithTimeout(recordCtx, r.cfg.DBTimeout)
		defer cancel()
		return pgtx.InTx(callCtx, r.pool, func(tx pgx.Tx) error {
			n, err := r.queries.JobExecutionFinish(callCtx, tx, &queries.JobExecutionFinishParams{
				ID: st.exec.ID, Status: string(outcome.Status), ExitMessage: outcome.Message, DomainRows: domainRows,
				WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
			})
			if err != nil {
				return fmt.Errorf("error finishing execution: %w", err)
			}
			if n == 0 {
				if attempt > 1 && r.recorded(callCtx, tx, st, outcome) {
					return nil // an earlier attempt committed
				}
				return rs.lost()
			}
			if st.cause != "" {
				// Recorded with the end, so the reconcile loop applies the
				// resume policy if the request's own recording is lost.
				if _, err := r.queries.JobExecutionSetStopCause(callCtx, tx, &queries.JobExecutionSetStopCauseParams{
					ID: st.exec.ID, StopCause: string(st.cause), ResumeInSeconds: secondsFromNow(st.resumeAt),
				}); err != nil {
					return fmt.Errorf("error recording stop cause: %w", err)
				}
			}
			if outcome.Status == radartype.ExecutionCompleted && r.cfg.Chain != nil {
				if err := r.cfg.Chain(callCtx, tx, &Finished{
					Job: st.request.Job, RequestID: st.request.ID, ExecutionID: st.exec.ID, Params: st.request.Params,
				}); err != nil {
					return fmt.Errorf("error chaining the next job: %w", err)
				}
			}
			return nil
		})
	}, func(err error) bool { return !errors.Is(err, ErrOwnershipLost) })
	if err != nil {
		if errors.Is(err, ErrOwnershipLost) {
			return err
		}
		return fmt.Errorf("error recording the execution's outcome: %w", err)
	}
	err = retryUntilDone(recordCtx, func() error {
		callCtx, cancel := context.WithTimeout(recordCtx, r.cfg.DBTimeout)
		defer cancel()
		return pgtx.InTx(callCtx, r.pool, func(tx pgx.Tx) error {
			finished, err := r.queries.JobRequestFinish(callCtx, tx, &queries.JobRequestFinishParams{
				ID: st.request.ID, Status: string(outcome.RequestStatus), Message: outcome.Message,
			})
			if err != nil {
				return fmt.Errorf("error finishing request: %w", err)
			}
			if finishTx != nil {
				if err := finishTx(callCtx, tx, outcome); err != nil {
					return err
				}
			}
			if finished > 0 && outcome.Status != radartype.ExecutionCompleted && r.cfg.Resume != nil {
				// The resume (when the policy allows it) commits with the
				// stop: never a stopped run without its resume.
				stopped := &request.Stopped{Request: st.request, ExecutionID: st.exec.ID, Cause: st.cause}
				if !st.resumeAt.IsZero() {
					stopped.Wait = time.Until(st.resumeAt)
				}
				if err := r.cfg.Resume(callCtx, tx, stopped); err != nil {
					return fmt.Errorf("error applying the resume policy: %w", err)
				}
			}
			return nil
		})
	}, nil)
	if err != nil {
		return fmt.Errorf("error recording the request's outcome: %w", err)
	}
	return nil
}

// recorded reports whether the execution already holds this run's outcome
// (an attempt whose commit landed although its answer was lost).
func (r *Runner) recorded(ctx context.Context, tx pgx.Tx, st *started, outcome *Outcome) bool {
	exec, err := r.queries.JobExecutionGetByID(ctx, tx, st.exec.ID)
	return err == nil && exec.WorkerID == st.exec.WorkerID && exec.LeaseEpoch == st.exec.LeaseEpoch &&
		exec.Status == string(outcome.Status) && exec.ExitMessage == outcome.Message
}

// secondsFromNow is how long from now t is, as the resume_in_seconds of
// JobExecutionSetStopCause: NULL for a zero t or one already past.
func secondsFromNow(t time.Time) pgtype.Float8 {
	if t.IsZero() {
		return pgtype.Float8{}
	}
	d := time.Until(t)
	return pgtype.Float8{Float64: d.Seconds(), Valid: d > 0}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
