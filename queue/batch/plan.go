package batch

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// newRun is the Run a job's Plan and Process see for rs's execution.
func (r *Runner) newRun(rs *runState) *Run {
	st := rs.started
	run := &Run{
		Job:         st.request.Job,
		RequestID:   st.request.ID,
		ExecutionID: st.exec.ID,
		InstanceID:  st.exec.InstanceID,
		Params:      st.request.Params,
		Calls:       r.cfg.Upstream.NewCaller(st.request.Job, st.maxCalls),
		DB:          NewReader(r.pool),
		Logger:      rs.logger,
		FanOut:      r.cfg.FanOut,
		Instruments: r.cfg.Instruments,
		fence:       r.runFence(rs),
	}
	run.parts = r.partCommitter(rs)
	run.parts.stop = rs.stop.requested()
	return run
}

// execution is the state of one execute call that its steps share: the
// run, and the calls recorded so far (a chunk's commit records its own; a
// failed chunk's are recorded by flushCalls).
type execution struct {
	r             *Runner
	ctx           context.Context
	rs            *runState
	run           *Run
	job           Job
	callsRecorded int64
}

// ending is how a step ends the run: the status and message execute
// returns, or an error wrapping ErrOwnershipLost (and no status).
type ending struct {
	status  radartype.ExecutionStatus
	message string
	err     error
}

// values are execute's results for e (no domain rows: an early end counts
// none).
func (e *ending) values() (radartype.ExecutionStatus, string, *int64, error) {
	return e.status, e.message, nil, e.err
}

// flushCalls records the calls made outside a committed chunk (a failed
// chunk's): fenced like every write, retried through an outage.
func (e *execution) flushCalls() error {
	r, rs, st := e.r, e.rs, e.rs.started
	n := e.run.Calls.Calls() - e.callsRecorded
	if n <= 0 {
		return nil
	}
	err := r.retryTransient(context.WithoutCancel(e.ctx), rs.fenced, rs, func(callCtx context.Context) error {
		rows, err := r.queries.JobExecutionAddCalls(callCtx, r.pool, &queries.JobExecutionAddCallsParams{
			ID: st.exec.ID, ExternalCalls: int32(n), WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
		})
		if err == nil && rows == 0 {
			return rs.lost()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("error recording %d external calls: %w", n, err)
	}
	e.callsRecorded += n
	return nil
}

// fail ends the run on err: the calls made so far are recorded first,
// and a failure to record them is kept in the message. err is where a
// job's errors, a provider's refusal among them, enter the run's
// outcome: its text is scrubbed of the provider keys.
func (e *execution) fail(err error, where string) *ending {
	err = e.r.cfg.Upstream.RedactError(err)
	if flushErr := e.flushCalls(); flushErr != nil {
		if errors.Is(flushErr, ErrOwnershipLost) {
			return &ending{err: flushErr}
		}
		err = errors.Join(err, flushErr)
	}
	status, message, lostErr := e.r.classify(e.ctx, e.rs, err, where)
	return &ending{status: status, message: message, err: lostErr}
}

// start plans the run and starts its execution: the chunks to do are the
// planned chunks with no checkpoint (the same read checks the plan against
// the database at the end). It returns the execution's status after the
// start.
func (e *execution) start() (*Plan, []string, radartype.ExecutionStatus, *ending) {
	r, ctx, rs, st := e.r, e.ctx, e.rs, e.rs.started
	// Plan reads the database like a chunk does: a transient error there
	// costs a pause, never the run.
	var plan *Plan
	if err := r.retryTransient(ctx, rs.fenced, rs, func(context.Context) error {
		var err error
		plan, err = e.job.Plan(ctx, e.run)
		return err
	}); err != nil {
		return nil, nil, "", e.fail(err, "plan")
	}
	pending, err := r.uncommittedChunks(ctx, rs, plan, nil)
	if err != nil {
		return nil, nil, "", e.fail(err, "start")
	}
	var execStatus radartype.ExecutionStatus
	err = r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		status, err := r.queries.JobExecutionStart(callCtx, r.pool, &queries.JobExecutionStartParams{
			ID: st.exec.ID, ChunksTotal: int32(len(plan.Chunks)), ChunksDone: int32(len(plan.Chunks) - len(pending)), Targets: plan.Targets,
			WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return rs.lost()
		}
		execStatus = radartype.ExecutionStatus(status)
		return err
	})
	if err != nil {
		return nil, nil, "", e.fail(err, "start")
	}
	return plan, pending, execStatus, nil
}
