package request

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// JobCanceller cancels a River job inside the caller's transaction, through
// River's public API; *river.Client[pgx.Tx] satisfies it. A job that is not
// running ends cancelled at once; a running one is marked for cancellation,
// its worker's context is cancelled if that worker is alive, and River's
// rescuer finalizes it if it is not.
type JobCanceller interface {
	JobCancelTx(ctx context.Context, tx pgx.Tx, jobID int64) (*rivertype.JobRow, error)
}

// CancelRiverJob cancels the River job riverJobID (nil: none) in tx; a job
// River no longer holds is not an error.
func CancelRiverJob(ctx context.Context, tx pgx.Tx, river JobCanceller, riverJobID *int64) error {
	if riverJobID == nil {
		return nil
	}
	if river == nil {
		return fmt.Errorf("river job %d: no River client to cancel it with", *riverJobID)
	}
	if _, err := river.JobCancelTx(ctx, tx, *riverJobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("error cancelling river job %d: %w", *riverJobID, err)
	}
	return nil
}

// Abandon fails an active request whose worker is gone: the request becomes
// FAILED with msg, its execution (if any) ABANDONED, and its River job (if
// any) is cancelled through river. It does nothing and returns false when
// the request is no longer active, so a result recorded meanwhile is never
// overwritten.
func Abandon(ctx context.Context, tx pgx.Tx, river JobCanceller, requestID int64, executionID, riverJobID *int64, msg string) (bool, error) {
	q := queries.New()
	n, err := q.JobRequestFinish(ctx, tx, &queries.JobRequestFinishParams{ID: requestID, Status: string(radartype.RequestFailed), Message: msg})
	if err != nil {
		return false, fmt.Errorf("error failing request %d: %w", requestID, err)
	}
	if n == 0 {
		return false, nil
	}
	if executionID != nil {
		if _, err := q.JobExecutionAbandon(ctx, tx, &queries.JobExecutionAbandonParams{ID: *executionID, ExitMessage: msg}); err != nil {
			return false, fmt.Errorf("error abandoning execution %d: %w", *executionID, err)
		}
	}
	if err := CancelRiverJob(ctx, tx, river, riverJobID); err != nil {
		return false, err
	}
	return true, nil
}

// RiverCanceller returns client as a JobCanceller, or nil when client is
// nil (a process that records requests without River jobs).
func RiverCanceller(client *river.Client[pgx.Tx]) JobCanceller {
	if client == nil {
		return nil
	}
	return client
}

// Canceller returns the River client the Enqueuer inserts with, as a
// JobCanceller (nil without one).
func (e *Enqueuer) Canceller() JobCanceller { return RiverCanceller(e.river) }
