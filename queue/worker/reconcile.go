package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// Reconcile finalizes RUNNING requests that this worker claimed but no
// longer holds (their result recording failed past its retry window), from
// the execution's recorded result, and only while they are still RUNNING.
func (w *Worker) Reconcile(ctx context.Context) (int, error) {
	return Reconcile(ctx, w.pool, w.river, w.cfg.ID, w.runner.Held(), w.parts.Enqueuer, w.cfg.Logger)
}

// heldChecker is the part of batch.HeldSet Reconcile needs.
type heldChecker interface{ Has(id int64) bool }

// Reconcile is the reconcile loop's body for one worker id. A request it
// finishes whose execution recorded a stop cause goes to resumer (nil resumes
// nothing), in the same transaction, as the runner would have done.
func Reconcile(ctx context.Context, db pgtx.Beginner, river request.JobCanceller, workerID string, held heldChecker, resumer Resumer, logger *slog.Logger) (int, error) {
	q := queries.New()
	n := 0
	err := pgtx.InTx(ctx, db, func(tx pgx.Tx) error {
		n = 0
		rows, err := q.JobRequestListRunningByWorker(ctx, tx, &workerID)
		if err != nil {
			return fmt.Errorf("error listing running requests: %w", err)
		}
		for _, req := range rows {
			if held.Has(req.ID) || req.ExecutionID == nil {
				continue
			}
			exec, err := q.JobExecutionGetByID(ctx, tx, *req.ExecutionID)
			vanished := errors.Is(queries.Interpret(err), queries.ErrNotFound)
			if err := queries.Interpret(err); err != nil && !vanished {
				return err
			}
			var executionStatus radartype.ExecutionStatus
			var message string
			var cause radartype.StopCause
			if vanished {
				// The request names an execution the database no longer
				// holds: a failover to an asynchronous replica lost it after
				// acknowledging it. Nothing can finish it any more; the
				// request fails saying so, instead of staying RUNNING.
				executionStatus = radartype.ExecutionFailed
				message = fmt.Sprintf("the database lost execution %d after acknowledging it (a failover to an asynchronous replica); a new request resumes from the last commit that survived", *req.ExecutionID)
			} else {
				executionStatus, message, cause = radartype.ExecutionStatus(exec.Status), exec.ExitMessage, radartype.StopCause(exec.StopCause)
			}
			if executionStatus.Active() {
				// The execution itself was never finalized: it is over, since
				// nobody holds it; record it ABANDONED. Its worker is alive
				// but could not reach the database to record the end.
				executionStatus, cause = radartype.ExecutionAbandoned, radartype.CauseDatabase
				message = "the worker lost its result recording; execution abandoned; a new request resumes from the last commit"
				if _, err := q.JobExecutionAbandon(ctx, tx, &queries.JobExecutionAbandonParams{ID: exec.ID, ExitMessage: message}); err != nil {
					return err
				}
			}
			status := string(executionStatus.RequestStatus())
			done, err := q.JobRequestFinish(ctx, tx, &queries.JobRequestFinishParams{ID: req.ID, Status: status, Message: message})
			if err != nil {
				return err
			}
			if done > 0 {
				if err := request.CancelRiverJob(ctx, tx, river, req.RiverJobID); err != nil {
					return err
				}
			}
			if done > 0 && !vanished && resumer != nil && cause != "" && executionStatus != radartype.ExecutionCompleted {
				req.Status = status
				if _, err := resumer.ResumeTx(ctx, tx, &request.Stopped{Request: req, ExecutionID: exec.ID, Cause: cause}); err != nil {
					return err
				}
			}
			n += int(done)
			logger.InfoContext(ctx, "reconciled a request this worker no longer holds", slog.Int64("request_id", req.ID), slog.String("status", status))
		}
		return nil
	})
	return n, err
}
