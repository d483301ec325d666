package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

type executionAbandonInput struct {
	IdempotencyKeyInput
	ID string `path:"id" doc:"execution id"`
}

// ExecutionAbandonOutput is the 200 of POST /v1/executions/{id}/abandon.
type ExecutionAbandonOutput struct {
	ReplayedOutput
	Body struct {
		ID     string `json:"id"`
		Status string `json:"status" enum:"ABANDONED"`
	}
}

func (s *Server) registerExecutions(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "execution-abandon",
		Method:      http.MethodPost,
		Path:        "/v1/executions/{id}/abandon",
		Summary:     "Abandon an execution whose worker stopped heartbeating",
		Description: "Only for executions whose worker's heartbeat is stale: abandoning a live run would let a resume overlap it (409). Safe to retry with an Idempotency-Key.",
		Tags:        []string{"executions"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, s.abandonExecution)
}

func (s *Server) abandonExecution(ctx context.Context, in *executionAbandonInput) (*ExecutionAbandonOutput, error) {
	id, ok := parseID(in.ID)
	if !ok {
		return nil, badID("id", in.ID)
	}
	key, err := s.idempotency(ctx, &in.IdempotencyKeyInput, "POST /v1/executions/"+formatID(id)+"/abandon", nil)
	if err != nil {
		return nil, err
	}
	out := &ExecutionAbandonOutput{}
	out.Body.ID = formatID(id)
	out.Body.Status = string(radartype.ExecutionAbandoned)
	var conflict error
	var replay *replayError
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		conflict, replay = nil, nil
		if key != nil {
			if err := key.begin(ctx, tx); errors.As(err, &replay) {
				return nil
			} else if err != nil {
				return err
			}
		}
		exec, err := s.queries.JobExecutionGetByID(ctx, tx, id)
		if err := queries.Interpret(err); err != nil {
			return err
		}
		if err := s.queries.AdvisoryXactLockJob(ctx, tx, exec.Job); err != nil {
			return err
		}
		if !radartype.ExecutionStatus(exec.Status).Active() {
			conflict = newConflict(ProblemExecutionNotActive, fmt.Sprintf("execution %d is already %s", id, exec.Status), 0)
			return nil
		}
		w, err := s.queries.WorkerGetByID(ctx, tx, exec.WorkerID)
		if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
			return err
		} else if err == nil && s.alive(w) {
			age := time.Since(w.HeartbeatAt).Round(time.Second)
			conflict = newConflict(ProblemWorkerAlive, fmt.Sprintf("worker %s is alive (last heartbeat %s ago); abandoning its run would let a resume overlap it", w.ID, age), 0)
			return nil
		}
		msg := fmt.Sprintf("abandoned by an operator: worker %s stopped heartbeating; a new request resumes from the last commit", exec.WorkerID)
		if ok, err := s.cfg.Requests.Abandon(ctx, tx, &request.Abandonment{RequestID: exec.RequestID, ExecutionID: &exec.ID, Message: msg}); err != nil {
			return err
		} else if !ok {
			if _, err := s.queries.JobExecutionAbandon(ctx, tx, &queries.JobExecutionAbandonParams{ID: exec.ID, ExitMessage: msg}); err != nil {
				return err
			}
		}
		if key != nil {
			return key.record(ctx, tx, http.StatusOK, out.Body)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, queries.ErrNotFound) {
			return nil, huma.Error404NotFound(fmt.Sprintf("execution %s not found", in.ID))
		}
		return nil, s.problemFrom(ctx, err)
	}
	if conflict != nil {
		return nil, conflict
	}
	if replay != nil {
		out = &ExecutionAbandonOutput{ReplayedOutput: ReplayedOutput{Replayed: "true"}}
		if err := replayed(replay, &out.Body); err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		return out, nil
	}
	s.audit(ctx, "", AuditAbandon, "execution "+formatID(id), "")
	return out, nil
}
