package request

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// Abandonment is a request whose run nobody will finish.
type Abandonment struct {
	RequestID int64
	// ExecutionID is the run's execution, nil when none started.
	ExecutionID *int64
	// Message is recorded on the request and the execution.
	Message string
	// Cause, when set, hands the abandoned run to the resume policy (a
	// reap's CauseReap); "" resumes nothing (an operator's abandon leaves the
	// resume to the operator, a run that never started has nothing to
	// resume).
	Cause radartype.StopCause
}

// Abandon ends, inside tx, an active request whose run nobody will finish
// (its worker is gone): its execution becomes ABANDONED and the request
// FAILED, its River job ended with it, and the resume policy applied
// (Finish's steps, with the execution abandoned before the policy reads
// it). It does nothing and returns false when the request is no longer
// active, so a result recorded meanwhile is never overwritten.
func (o *Owner) Abandon(ctx context.Context, tx pgx.Tx, a *Abandonment) (bool, error) {
	req, err := o.queries.JobRequestGetByID(ctx, tx, a.RequestID)
	if err != nil {
		return false, fmt.Errorf("error reading request %d: %w", a.RequestID, err)
	}
	end := &End{Request: req, Status: abandonedStatus(a.ExecutionID), Message: a.Message, Cause: a.Cause}
	if a.ExecutionID != nil {
		end.ExecutionID = *a.ExecutionID
	}
	if ended, err := o.endRequest(ctx, tx, end); err != nil || !ended {
		return false, err
	}
	if a.ExecutionID != nil {
		if _, err := o.queries.JobExecutionAbandon(ctx, tx, &queries.JobExecutionAbandonParams{ID: *a.ExecutionID, ExitMessage: a.Message}); err != nil {
			return false, fmt.Errorf("error abandoning execution %d: %w", *a.ExecutionID, err)
		}
	}
	return true, o.applyPolicies(ctx, tx, end)
}

// abandonedStatus is the execution status an abandoned request ends with:
// ABANDONED when an execution started, none ("": the request fails) when
// none did.
func abandonedStatus(executionID *int64) radartype.ExecutionStatus {
	if executionID == nil {
		return ""
	}
	return radartype.ExecutionAbandoned
}

// FailStart ends request requestID, whose run could not start on workerID,
// as FAILED with the start's error, in a transaction of its own that also
// ends its delivery (the River job that brought it, nil for none), as a
// claim would have. It counts the failure and logs one line.
func (o *Owner) FailStart(ctx context.Context, requestID int64, workerID string, delivery *Delivery, startErr error) {
	ctx = context.WithoutCancel(ctx)
	msg := fmt.Sprintf("the run could not start on worker %s: %v", workerID, startErr)
	var job string
	err := pgtx.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		req, err := o.queries.JobRequestGetByID(ctx, tx, requestID)
		if err != nil {
			return fmt.Errorf("error reading request: %w", err)
		}
		job = req.Job
		if err := o.endDelivery(ctx, tx, delivery, deliveryOutput{RequestID: requestID, WorkerID: workerID, Note: "the run could not start: see its request"}); err != nil {
			return err
		}
		_, err = o.Abandon(ctx, tx, &Abandonment{RequestID: requestID, Message: msg})
		return err
	})
	logger := o.cfg.Logger.With(slog.Int64("request_id", requestID), slog.String("job", job))
	if err != nil {
		logger.ErrorContext(ctx, "run could not start, nor could its request be failed; the reaper will fail it", slog.String("error", startErr.Error()), slog.String("record_error", err.Error()))
		return
	}
	o.cfg.Instruments.RequestFailed(ctx, job, observability.ReasonStartFailed)
	logger.ErrorContext(ctx, "run could not start; request failed", slog.String("error", startErr.Error()))
}
