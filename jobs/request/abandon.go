package request

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
)

// Abandon fails an active request whose worker is gone: the request becomes
// FAILED with msg, its execution (if any) ABANDONED, and its River job (if
// any) is finalized so the job's unique slot is free at once. It does
// nothing and returns false when the request is no longer active, so a
// result recorded meanwhile is never overwritten.
func Abandon(ctx context.Context, tx pgx.Tx, requestID int64, executionID, riverJobID *int64, msg string) (bool, error) {
	q := queries.New()
	n, err := q.JobRequestFinish(ctx, tx, &queries.JobRequestFinishParams{ID: requestID, Status: StatusFailed, Message: msg})
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
	if riverJobID != nil {
		if _, err := q.RiverJobFinalize(ctx, tx, *riverJobID); err != nil {
			return false, fmt.Errorf("error finalizing river job %d: %w", *riverJobID, err)
		}
	}
	return true, nil
}
