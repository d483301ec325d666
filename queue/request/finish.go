package request

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// End is how a request ends, as whoever ends it knows it: its run, the
// reaper, the reconcile loop or an operator.
type End struct {
	// Request is the request to end.
	Request *queries.JobRequest
	// ExecutionID is the execution the request ran as; 0 when none started.
	ExecutionID int64
	// Status is that execution's final status; "" when none started (the
	// request then ends FAILED).
	Status radartype.ExecutionStatus
	// Message is the request's message: what happened, and what a new
	// request will do.
	Message string
	// Cause says why a run that did not complete ended; the resume policy
	// reads it. "" resumes nothing.
	Cause radartype.StopCause
	// Wait, when positive, is how long from now its resume must wait at
	// least (a provider's Retry-After).
	Wait time.Duration
}

// requestStatus is the request status an End records.
func (e *End) requestStatus() radartype.RequestStatus {
	if e.Status == "" {
		return radartype.RequestFailed
	}
	return e.Status.RequestStatus()
}

// Finish ends a request inside tx, the same way on every path: it records
// the request's end (only while the request is still active, so a result
// recorded meanwhile is never overwritten), ends its River job if River
// still holds it live, and applies the policies of the end in the same
// transaction: a COMPLETED run chains to the next job of the catalog, and a
// run that stopped with a cause goes to the resume policy. There is never
// a moment where a request has ended and its River job still runs, its
// successor is missing, or its resume is. It reports whether it ended the
// request (false: it had ended already, and nothing was done).
func (o *Owner) Finish(ctx context.Context, tx pgx.Tx, end *End) (bool, error) {
	ended, err := o.endRequest(ctx, tx, end)
	if err != nil || !ended {
		return false, err
	}
	return true, o.applyPolicies(ctx, tx, end)
}

// endRequest records the request's end and ends its River job; it reports
// whether the request was still active.
func (o *Owner) endRequest(ctx context.Context, tx pgx.Tx, end *End) (bool, error) {
	req := end.Request
	n, err := o.queries.JobRequestFinish(ctx, tx, &queries.JobRequestFinishParams{ID: req.ID, Status: string(end.requestStatus()), Message: end.Message})
	if err != nil {
		return false, fmt.Errorf("error finishing request %d: %w", req.ID, err)
	}
	if n == 0 {
		return false, nil
	}
	if err := o.cancelRiverJob(ctx, tx, req.RiverJobID); err != nil {
		return false, err
	}
	return true, o.recordEnd(ctx, tx, end)
}

// endOutput is the output a request's River job shows once the request
// ended (River UI's Metadata → output): how the run ended and why.
type endOutput struct {
	RequestID     int64                     `json:"request_id"`
	ExecutionID   int64                     `json:"execution_id,omitempty"`
	RequestStatus radartype.RequestStatus   `json:"request_status"`
	Status        radartype.ExecutionStatus `json:"status,omitempty"`
	Cause         radartype.StopCause       `json:"cause,omitempty"`
	Message       string                    `json:"message,omitempty"`
}

// recordEnd writes the request's end as its River job's output, through
// River's public API, so River UI says how the run it delivered ended (a
// stop and its cause, a failure and its message) where it shows the job.
func (o *Owner) recordEnd(ctx context.Context, tx pgx.Tx, end *End) error {
	if end.Request.RiverJobID == nil || o.river == nil {
		return nil
	}
	out := &endOutput{
		RequestID: end.Request.ID, ExecutionID: end.ExecutionID, RequestStatus: end.requestStatus(),
		Status: end.Status, Cause: end.Cause, Message: end.Message,
	}
	if _, err := o.river.JobUpdateTx(ctx, tx, *end.Request.RiverJobID, &river.JobUpdateParams{Output: out}); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("error recording the end on river job %d: %w", *end.Request.RiverJobID, err)
	}
	return nil
}

// applyPolicies applies the policies of a request's end: a COMPLETED run
// chains to the next job, a run that stopped with a cause goes to the
// resume policy.
func (o *Owner) applyPolicies(ctx context.Context, tx pgx.Tx, end *End) error {
	req := end.Request
	switch {
	case end.Status == radartype.ExecutionCompleted:
		if _, err := o.enqueueNext(ctx, tx, req.Job, req.Params); err != nil {
			return fmt.Errorf("error chaining the next job: %w", err)
		}
	case end.ExecutionID != 0 && end.Cause != "":
		req.Status = string(end.requestStatus())
		if _, err := o.ResumeTx(ctx, tx, &Stopped{Request: req, ExecutionID: end.ExecutionID, Cause: end.Cause, Wait: end.Wait}); err != nil {
			return fmt.Errorf("error applying the resume policy: %w", err)
		}
	}
	return nil
}
