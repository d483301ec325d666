package request

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
)

// ErrNotQueued is returned by Claim when the request is no longer QUEUED
// (reaped or finalized meanwhile): nothing is to run. The claim's
// transaction then ends the request's delivery and must be committed.
var ErrNotQueued = errors.New("request is no longer queued")

// Delivery is the River job that delivered a request to the worker about
// to run it. It is nil for a run no River job delivered (the CLI's own
// request).
type Delivery = river.Job[catalog.RequestArgs]

// deliveryOutput is what a delivered River job records as its output
// (River UI shows it): where the run went, and where its outcome is kept.
type deliveryOutput struct {
	RequestID   int64  `json:"request_id"`
	ExecutionID int64  `json:"execution_id,omitempty"`
	WorkerID    string `json:"worker_id"`
	Note        string `json:"note"`
}

// Claim moves request requestID from QUEUED to RUNNING for workerID inside
// tx, the transaction that starts its run. It returns ErrNotQueued when the
// request is no longer QUEUED; then delivery (the River job that brought it,
// nil for none) is completed in tx, since nothing is left for it to do, and
// the caller commits tx.
func (o *Owner) Claim(ctx context.Context, tx pgx.Tx, requestID int64, workerID string, delivery *Delivery) (*queries.JobRequest, error) {
	req, err := o.queries.JobRequestClaim(ctx, tx, &queries.JobRequestClaimParams{ID: requestID, WorkerID: &workerID})
	if err := queries.Interpret(err); err != nil {
		if !errors.Is(err, queries.ErrNotFound) {
			return nil, fmt.Errorf("error claiming request %d: %w", requestID, err)
		}
		if err := o.endDelivery(ctx, tx, delivery, deliveryOutput{
			RequestID: requestID, WorkerID: workerID, Note: "the request had ended before this delivery: nothing ran",
		}); err != nil {
			return nil, err
		}
		return nil, ErrNotQueued
	}
	return req, nil
}

// Started records, inside tx (Claim's), the execution the claimed request
// runs as, and ends the request's delivery: from here on the request row
// alone tracks the run, and its River job is completed, naming the request
// and the execution.
func (o *Owner) Started(ctx context.Context, tx pgx.Tx, req *queries.JobRequest, executionID int64, delivery *Delivery) error {
	if err := o.queries.JobRequestSetExecution(ctx, tx, &queries.JobRequestSetExecutionParams{ID: req.ID, ExecutionID: &executionID}); err != nil {
		return fmt.Errorf("error recording the execution of request %d: %w", req.ID, err)
	}
	return o.endDelivery(ctx, tx, delivery, deliveryOutput{
		RequestID: req.ID, ExecutionID: executionID, WorkerID: deref(req.WorkerID),
		Note: "delivered: the run's outcome is its request's (GET /v1/requests/{id})",
	})
}

// endDelivery completes delivery inside tx with out as its output. A
// delivery River no longer shows running was ended already. The output is
// written with JobUpdateTx, not river.RecordOutput: River merges what
// RecordOutput records into the job when its worker returns, which would
// overwrite the request's end that Finish records as the output later.
func (o *Owner) endDelivery(ctx context.Context, tx pgx.Tx, delivery *Delivery, out deliveryOutput) error {
	if delivery == nil {
		return nil
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, delivery); errors.Is(err, rivertype.ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("error completing river job %d: %w", delivery.ID, err)
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	if _, err := client.JobUpdateTx(ctx, tx, delivery.ID, &river.JobUpdateParams{Output: out}); err != nil {
		return fmt.Errorf("error recording the delivery's output on river job %d: %w", delivery.ID, err)
	}
	return nil
}

// cancelRiverJob ends the River job riverJobID (nil: none) in tx, through
// River's public API: a job not handed to a worker yet ends cancelled at
// once; one already finalized (a claimed request's, completed at its claim)
// is left as it is (the call stays for a request a worker of an earlier
// version claimed, whose River job still runs); one River is handing to a worker at this instant is
// marked, and River cancels it when that worker returns.
func (o *Owner) cancelRiverJob(ctx context.Context, tx pgx.Tx, riverJobID *int64) error {
	if riverJobID == nil || o.river == nil {
		return nil
	}
	if _, err := o.river.JobCancelTx(ctx, tx, *riverJobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("error cancelling river job %d: %w", *riverJobID, err)
	}
	return nil
}
