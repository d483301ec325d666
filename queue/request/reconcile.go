package request

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// Holder tells which requests a process's runs hold: batch.HeldSet.
type Holder interface{ Has(id int64) bool }

// Reconcile ends the RUNNING requests that workerID claimed but no longer
// holds (held does not list them: their run ended and its recording
// failed past its retry window, or the process lost it), from what their
// executions recorded, through Finish, as the run would have: the River
// job, the chain and the resume policy alike. An execution never
// finalized is ABANDONED with cause database; one the database no longer
// holds (a failover to an asynchronous replica lost it) fails its request
// saying so. It returns how many requests it ended.
func (o *Owner) Reconcile(ctx context.Context, workerID string, held Holder) (int, error) {
	n := 0
	err := pgtx.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := o.queries.JobRequestListRunningByWorker(ctx, tx, &workerID)
		if err != nil {
			return fmt.Errorf("error listing running requests: %w", err)
		}
		for _, req := range rows {
			if held.Has(req.ID) || req.ExecutionID == nil {
				continue
			}
			end, err := o.reconciledEnd(ctx, tx, req)
			if err != nil {
				return err
			}
			ended, err := o.Finish(ctx, tx, end)
			if err != nil {
				return err
			}
			if ended {
				n++
				o.cfg.Logger.InfoContext(ctx, "reconciled a request this worker no longer holds",
					slog.Int64("request_id", req.ID), slog.String("status", string(end.requestStatus())))
			}
		}
		return nil
	})
	return n, err
}

// reconciledEnd is the end of a request its worker no longer holds, from
// its execution's record: the recorded outcome, ABANDONED (recorded here)
// for an execution never finalized, FAILED for one the database lost.
func (o *Owner) reconciledEnd(ctx context.Context, tx pgx.Tx, req *queries.JobRequest) (*End, error) {
	exec, err := o.queries.JobExecutionGetByID(ctx, tx, *req.ExecutionID)
	if err := queries.Interpret(err); errors.Is(err, queries.ErrNotFound) {
		// Nothing can finish it any more; the request fails saying so,
		// instead of staying RUNNING.
		return &End{Request: req, Status: radartype.ExecutionFailed, Message: fmt.Sprintf(
			"the database lost execution %d after acknowledging it (a failover to an asynchronous replica); a new request resumes from the last commit that survived", *req.ExecutionID)}, nil
	} else if err != nil {
		return nil, err
	}
	end := &End{Request: req, ExecutionID: exec.ID, Status: radartype.ExecutionStatus(exec.Status), Message: exec.ExitMessage, Cause: radartype.StopCause(exec.StopCause)}
	if end.Status.Active() {
		// Nobody holds it, so it is over; its worker is alive but could
		// not reach the database to record the end.
		end.Status, end.Cause = radartype.ExecutionAbandoned, radartype.CauseDatabase
		end.Message = "the worker lost its result recording; execution abandoned; a new request resumes from the last commit"
		if _, err := o.queries.JobExecutionAbandon(ctx, tx, &queries.JobExecutionAbandonParams{ID: exec.ID, ExitMessage: end.Message}); err != nil {
			return nil, err
		}
	}
	return end, nil
}
