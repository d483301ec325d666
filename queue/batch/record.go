package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

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

// record writes the outcome in one transaction, retried until
// RecordRetryWindow has passed so a short database outage does not leave
// the request RUNNING: the execution's end, and the request's end through
// the owner (its River job, the chained request of a completion, the
// resume of a stop), so the run's end, its successor and its resume commit
// together. If it cannot be recorded in the window, the outcome waits in
// the runner's held set, still held, and RecordPending records it once the
// database answers (the worker's reconcile loop calls it).
//
// The execution's end is fenced: when the execution is no longer the
// run's, nothing is recorded (neither the result, nor the chained request,
// nor the request's end) and record returns an error wrapping
// ErrOwnershipLost.
func (r *Runner) record(ctx context.Context, rs *runState, outcome *Outcome, domainRows *int64) error {
	// The last guard before the message is stored (and answered by the
	// API): no provider key in it, in any form.
	outcome.Message = r.cfg.Upstream.Secrets().Redact(outcome.Message)
	rec := &pendingRecord{rs: rs, outcome: outcome, domainRows: domainRows}
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RecordRetryWindow)
	defer cancel()
	err := retryUntilDone(recordCtx, func() error { return r.recordOnce(recordCtx, rec) },
		func(err error) bool { return !errors.Is(err, ErrOwnershipLost) })
	switch {
	case err == nil, errors.Is(err, ErrOwnershipLost):
		return err
	}
	r.cfg.Held.park(rs.request.ID, rec)
	return fmt.Errorf("error recording the outcome: %w", err)
}

// pendingRecord is a run's outcome not recorded yet.
type pendingRecord struct {
	rs         *runState
	outcome    *Outcome
	domainRows *int64
	attempts   int
}

// recordOnce is one attempt of rec's recording, in its own transaction.
func (r *Runner) recordOnce(ctx context.Context, rec *pendingRecord) error {
	st, outcome := rec.rs.started, rec.outcome
	rec.attempts++
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	return pgtx.InTx(callCtx, r.pool, func(tx pgx.Tx) error {
		n, err := r.queries.JobExecutionFinish(callCtx, tx, &queries.JobExecutionFinishParams{
			ID: st.exec.ID, Status: string(outcome.Status), ExitMessage: outcome.Message, DomainRows: rec.domainRows,
			WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
		})
		if err != nil {
			return fmt.Errorf("error finishing execution: %w", err)
		}
		if n == 0 {
			if rec.attempts > 1 && r.recorded(callCtx, tx, st, outcome) {
				return nil // an earlier attempt committed
			}
			return rec.rs.lost()
		}
		end := &request.End{
			Request: st.request, ExecutionID: st.exec.ID, Status: outcome.Status, Message: outcome.Message, Cause: st.cause,
		}
		if !st.resumeAt.IsZero() {
			end.Wait = time.Until(st.resumeAt)
		}
		if _, err := r.cfg.Owner.Finish(callCtx, tx, end); err != nil {
			return fmt.Errorf("error finishing the request: %w", err)
		}
		return nil
	})
}

// RecordPending records the outcomes of this runner's runs whose recording
// failed past RecordRetryWindow (a database outage outlasting it), once
// more each; an outcome recorded, or whose execution is no longer the
// run's, leaves the held set. It returns how many it recorded. The
// worker's reconcile loop calls it before it reconciles, so an outcome
// the process still knows is never replaced by an abandon.
func (r *Runner) RecordPending(ctx context.Context) (int, error) {
	recorded := 0
	var errs []error
	for id, rec := range r.cfg.Held.parked() {
		err := r.recordOnce(ctx, rec)
		switch {
		case err == nil:
			recorded++
			r.cfg.Instruments.ExecutionFinished(ctx, rec.rs.request.Job, rec.outcome.Status)
			rec.rs.logger.InfoContext(ctx, "execution finished (recorded late, after a database outage)",
				slog.String("status", string(rec.outcome.Status)), slog.String("message", rec.outcome.Message))
			r.cfg.Held.Remove(id)
		case errors.Is(err, ErrOwnershipLost):
			rec.rs.logger.WarnContext(ctx, "the outcome waiting for the database is no longer this run's to record", slog.String("error", err.Error()))
			r.cfg.Held.Remove(id)
		default:
			errs = append(errs, err)
		}
	}
	return recorded, errors.Join(errs...)
}

// recorded reports whether the execution already holds this run's outcome
// (an attempt whose commit landed although its answer was lost).
func (r *Runner) recorded(ctx context.Context, tx pgx.Tx, st *started, outcome *Outcome) bool {
	exec, err := r.queries.JobExecutionGetByID(ctx, tx, st.exec.ID)
	return err == nil && exec.WorkerID == st.exec.WorkerID && exec.LeaseEpoch == st.exec.LeaseEpoch &&
		exec.Status == string(outcome.Status) && exec.ExitMessage == outcome.Message
}
