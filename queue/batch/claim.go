package batch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

type started struct {
	request  *queries.JobRequest
	exec     *queries.JobExecution
	resumed  bool
	maxCalls int
	// cause says why a run that did not complete ended (radartype.StopCause);
	// it is recorded with the end, and the resume policy reads it.
	cause radartype.StopCause
	// resumeAt, when set, is the earliest moment the run may resume, by
	// this process's clock (cause provider-rate: the provider's
	// Retry-After); it is recorded with the cause, and the resume waits
	// for it.
	resumeAt time.Time
	// items is what the run counted in buildrisk_items_total.
	items *itemTally
}

// start claims the request and creates the execution in one transaction
// under the job's advisory lock, so a CLI run and a worker can never start
// the same job at once. The execution takes the instance's next lease
// epoch, which fences off every earlier execution of the instance.
func (r *Runner) start(ctx context.Context, requestID int64, delivery *request.Delivery) (*started, error) {
	var st *started
	notQueued := false
	err := pgtx.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		st, notQueued = nil, false
		pending, err := r.queries.JobRequestGetByID(ctx, tx, requestID)
		if err := queries.Interpret(err); err != nil {
			return fmt.Errorf("error reading request %d: %w", requestID, err)
		}
		if err := r.queries.AdvisoryXactLockJob(ctx, tx, pending.Job); err != nil {
			return fmt.Errorf("error taking job lock: %w", err)
		}
		req, err := r.cfg.Owner.Claim(ctx, tx, requestID, r.cfg.WorkerID, delivery)
		if errors.Is(err, request.ErrNotQueued) {
			notQueued = true
			return nil // commit: the claim ended the delivery
		} else if err != nil {
			return err
		}
		if _, ok := r.cfg.Jobs[req.Job]; !ok {
			return fmt.Errorf("%w: job %q is not registered in this process", ErrNotRunnable, req.Job)
		}
		running, err := r.queries.JobExecutionRunningByJob(ctx, tx, req.Job)
		if err := queries.Interpret(err); err == nil {
			// Not a reason to fail the request: the execution ends (its run
			// records it, or the reaper abandons it) and the request runs
			// then. The claim rolls back with this transaction.
			return fmt.Errorf("%w: job %s: execution %d is still %s", ErrExecutionActive, req.Job, running.ID, running.Status)
		} else if !errors.Is(err, queries.ErrNotFound) {
			return fmt.Errorf("error checking running executions: %w", err)
		}
		resume, err := request.ResumeCandidate(ctx, tx, req.Job, req.ParamsHash, req.ConfirmPurge)
		if err != nil {
			return err
		}
		st = &started{request: req}
		var instanceID int64
		if resume != nil {
			instanceID = resume.JobExecution.InstanceID
			st.resumed = true
		} else {
			inst, err := r.queries.JobInstanceInsert(ctx, tx, &queries.JobInstanceInsertParams{
				Job: req.Job, Params: req.Params, ParamsHash: req.ParamsHash, ConfirmPurge: req.ConfirmPurge,
			})
			if err != nil {
				return fmt.Errorf("error creating instance: %w", err)
			}
			instanceID = inst.ID
		}
		epoch, err := r.queries.JobInstanceTakeLease(ctx, tx, instanceID)
		if err != nil {
			return fmt.Errorf("error taking the instance's lease: %w", err)
		}
		st.exec, err = r.queries.JobExecutionInsert(ctx, tx, &queries.JobExecutionInsertParams{
			InstanceID: instanceID, Job: req.Job, RequestID: req.ID, WorkerID: r.cfg.WorkerID, LeaseEpoch: epoch,
		})
		if err != nil {
			return fmt.Errorf("error creating execution: %w", err)
		}
		if req.MaxCalls != nil {
			st.maxCalls = int(*req.MaxCalls)
		}
		return r.cfg.Owner.Started(ctx, tx, req, st.exec.ID, delivery)
	})
	switch {
	case err != nil:
		return nil, err
	case notQueued:
		return nil, ErrNotQueued
	}
	return st, nil
}

// ErrNotRunnable is returned (wrapped) by Run when the claimed request
// cannot run in this process: its job is not registered here (a rolling
// deploy).
var ErrNotRunnable = errors.New("request cannot run")

// ErrExecutionActive is returned (wrapped) by Run when another execution of
// the request's job is still active (STARTING, STARTED or STOPPING): the
// request stays QUEUED, unclaimed, and its caller tries again later (the
// worker snoozes its River job). It never fails the request.
var ErrExecutionActive = errors.New("request waits: another execution of the job is still active")
