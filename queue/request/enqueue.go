package request

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// EnqueueParams is one request to run a job.
type EnqueueParams struct {
	Job          string
	Params       []byte
	MaxCalls     *int
	ConfirmPurge bool
	Source       radartype.RequestSource
	RequestedBy  string
	// WorkerID is set when the enqueuing process will run the request
	// itself (the CLI): no River job is inserted for it, and the reaper
	// frees it if that process dies.
	WorkerID string
	// NotBefore, when positive, keeps the request from starting before that
	// long after its insert, by the database's clock (an automatic resume's
	// backoff): it is stored on the request (not_before) and its River job
	// is inserted available, the worker snoozing it until then, so that no
	// River leader (whose scheduler alone moves scheduled jobs) is on the
	// path of a resume.
	NotBefore time.Duration

	// skipCleanup is set by ResumeTx, whose callers end requests (a reap
	// among them) under the job's lock already.
	skipCleanup bool
	// DueAt is the due time a scheduled request was made for (nil for
	// every other source). The database refuses a second request for the
	// same job and due time.
	DueAt *time.Time
	// Guard, when set, runs inside the enqueue's transaction around the
	// request (the api's Idempotency-Key): what it writes commits with the
	// request or not at all.
	Guard Guard
}

// Guard is the caller's own work in the enqueue's transaction.
type Guard interface {
	// Before runs first in tx, before the job's lock and the duplicate
	// check, so that it decides before anything else (a retried call is
	// answered from what the first one recorded, even while its run is the
	// job's active request). An error ends the enqueue, rolled back, and
	// Enqueue returns it as it is.
	Before(ctx context.Context, tx pgx.Tx) error
	// After runs once the request and its River job are inserted, in the
	// same transaction; an error rolls both back.
	After(ctx context.Context, tx pgx.Tx, res *EnqueueResult) error
}

// EnqueueResult is an accepted request.
type EnqueueResult struct {
	Request *queries.JobRequest
	// EstimatedCalls is the request's call estimate: the whole run's for a
	// new instance, the chunks left's for a resume (callsLeft).
	EstimatedCalls     int
	ResumesExecutionID *int64
}

// Validate decodes and checks a request, estimating its whole run's calls;
// it reads the database only through an Estimators entry, and writes
// nothing. The daily cap is checked once the request's estimate is known
// (admit): a resume's is what its instance has left, and maxCalls bounds
// either.
func (o *Owner) Validate(ctx context.Context, db queries.DBTX, p *EnqueueParams) (catalog.Definition, *catalog.Params, error) {
	def, ok := o.cfg.Catalog.Lookup(p.Job)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnknownJob, catalog.Quote(p.Job))
	}
	params, err := def.Decode(p.Params)
	if err != nil {
		return nil, nil, err
	}
	if p.MaxCalls != nil && (*p.MaxCalls < 1 || *p.MaxCalls > catalog.MaxCallsMax) {
		return nil, nil, &catalog.ParamError{Field: "maxCalls", Message: fmt.Sprintf("must be an integer from 1 to %d when given", catalog.MaxCallsMax)}
	}
	if estimate, ok := o.cfg.Estimators[p.Job]; ok {
		if params.EstimatedCalls, err = estimate(ctx, db, params); err != nil {
			return nil, nil, fmt.Errorf("error estimating calls: %w", err)
		}
	}
	return def, params, nil
}

// requestEstimate is a request's call estimate: the calls its plan has
// left (estimate: the whole run's for a new instance, what is left for a
// resume), bounded by its maxCalls when it gives one, since the run stops
// there.
func requestEstimate(estimate int, maxCalls *int) int {
	if maxCalls != nil {
		return min(estimate, *maxCalls)
	}
	return estimate
}

// admit refuses a request whose estimate (requestEstimate) exceeds its
// provider's whole daily cap: no day could serve it. The refusal names
// maxCalls, the way to run such a plan a day's budget at a time.
func (o *Owner) admit(job string, estimate int) error {
	def, ok := o.cfg.Catalog.Lookup(job)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownJob, catalog.Quote(job))
	}
	if limit, ok := o.cfg.DailyCaps[def.Provider()]; ok && estimate > limit {
		return &OverCapError{Provider: def.Provider(), Cap: limit, Estimated: estimate}
	}
	return nil
}

// Enqueue validates p and, in one transaction under the job's advisory lock
// (taken once; not at all for a duplicate of an active request the cleanup
// could not free, see settledStaleSeconds), runs the stale cleanup, refuses a duplicate, inserts the request's River
// job (when the Owner has a River client) and the request. A conflict
// (serialization failure, deadlock) runs the transaction again (pgtx.InTx).
// Errors: ErrUnknownJob, *jobs.ParamError (an *OverCapError among them),
// *DuplicateError, p.Guard's own, or an internal error.
func (o *Owner) Enqueue(ctx context.Context, p *EnqueueParams) (*EnqueueResult, error) {
	_, params, err := o.Validate(ctx, o.pool, p)
	if err != nil {
		if catalog.IsParamError(err) {
			o.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultInvalid)
		}
		return nil, err
	}
	var result *EnqueueResult
	err = pgtx.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		result, err = o.enqueueTx(ctx, tx, p, params)
		return err
	})
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		o.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultDuplicate)
		return nil, err
	case catalog.IsParamError(err):
		// Refused once its estimate was known (over the daily cap).
		o.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultInvalid)
		return nil, err
	case errors.Is(err, queries.ErrUniqueViolation):
		// The partial unique index caught what the lock should have: still a
		// duplicate, decided by the database.
		o.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultDuplicate)
		active, getErr := o.queries.JobRequestGetActiveByJob(ctx, o.pool, p.Job)
		if getErr != nil {
			return nil, &DuplicateError{Job: p.Job}
		}
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: active.ID}
	case err != nil:
		return nil, err
	}
	o.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultAccepted)
	return result, nil
}

// settledStaleSeconds is the stale window enqueueTx hands to
// JobLockUnlessSettled for p: an active request held by a worker that
// heartbeat within it, and that its River job will still run, is one the
// reap cannot free, so its duplicate is answered without the job's
// advisory lock and never queues on the lock the run's start takes. The
// answer is the one the locked path would give: the reap would find
// nothing to finalize and the state read after it would show the same
// active request. For a request a reap itself makes (its resume), 0: the
// lock is always taken, once.
func (o *Owner) settledStaleSeconds(p *EnqueueParams) float64 {
	if p.skipCleanup {
		return 0
	}
	return o.cfg.StaleAfter.Seconds()
}

// EnqueueTx is Enqueue inside the caller's transaction (chains insert the
// next job's request in the transaction that records a completion). The
// params must already be valid; a duplicate returns *DuplicateError and
// leaves tx usable only for rollback.
func (o *Owner) EnqueueTx(ctx context.Context, tx pgx.Tx, p *EnqueueParams) (*EnqueueResult, error) {
	_, params, err := o.Validate(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	return o.enqueueTx(ctx, tx, p, params)
}

// enqueueTx is the one enqueue: in tx, the job's advisory lock (unless its
// active request is settled: a duplicate without the lock) and its state
// (one round trip), the stale cleanup when the job has an active
// request, the duplicate check, the restart rule, River's InsertTx of a job
// that carries the request's id, and the request row, linked to that job.
// A duplicate draws no request id: the state reads one only for a job
// without an active request.
func (o *Owner) enqueueTx(ctx context.Context, tx pgx.Tx, p *EnqueueParams, params *catalog.Params) (*EnqueueResult, error) {
	if p.Guard != nil {
		if err := p.Guard.Before(ctx, tx); err != nil {
			return nil, err
		}
	}
	state, settled, err := o.queries.EnqueueStateTx(ctx, tx, p.Job, o.settledStaleSeconds(p))
	if err != nil {
		return nil, fmt.Errorf("error taking job lock and reading its requests: %w", err)
	}
	if settled != 0 {
		// A duplicate of a request the cleanup cannot free: no lock taken.
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: settled}
	}
	if state.ActiveRequestID != 0 && !p.skipCleanup {
		// A dead worker never blocks a job: its request is reaped here,
		// under the job's lock, before the duplicate check.
		if _, err := o.ReapTx(ctx, tx, p.Job); err != nil {
			return nil, fmt.Errorf("error cleaning up stale requests: %w", err)
		}
		// The cleanup may have finalized the active request (and inserted
		// its automatic resume): read again, still under the lock.
		if state, err = o.queries.JobRequestEnqueueState(ctx, tx, p.Job); err != nil {
			return nil, fmt.Errorf("error reading the job's requests: %w", err)
		}
	}
	if state.ActiveRequestID != 0 {
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: state.ActiveRequestID}
	}

	paramsHash := catalog.ParamsHash(params.Canonical)
	var resumesID *int64
	if !p.ConfirmPurge && state.LastExecutionID != 0 && resumes(state.LastStatus, state.LastParamsHash, state.LastConfirmPurge, paramsHash) {
		resumesID = &state.LastExecutionID
	}
	estimated := params.EstimatedCalls
	if resumesID != nil {
		if estimated, err = o.resumeEstimate(ctx, tx, state.LastInstanceID, estimated); err != nil {
			return nil, err
		}
	}
	estimated = requestEstimate(estimated, p.MaxCalls)
	if err := o.admit(p.Job, estimated); err != nil {
		return nil, err
	}
	var riverJobID *int64
	if o.river != nil && p.WorkerID == "" {
		res, err := o.insertRun(ctx, tx, p, state.NextRequestID)
		if err != nil {
			return nil, err
		}
		riverJobID = &res.Job.ID
	}
	request, err := o.queries.JobRequestInsert(ctx, tx, &queries.JobRequestInsertParams{
		ID:                 state.NextRequestID,
		Job:                p.Job,
		Params:             params.Canonical,
		ParamsHash:         paramsHash,
		MaxCalls:           maxCallsOrNil(p.MaxCalls),
		ConfirmPurge:       p.ConfirmPurge,
		Source:             string(p.Source),
		RequestedBy:        p.RequestedBy,
		EstimatedCalls:     int32(estimated),
		ResumesExecutionID: resumesID,
		WorkerID:           workerIDOrNil(p.WorkerID),
		DueAt:              p.DueAt,
		RiverJobID:         riverJobID,
		NotBeforeSeconds:   notBeforeSeconds(p.NotBefore),
	})
	if err != nil {
		return nil, fmt.Errorf("error inserting request: %w", queries.Interpret(err))
	}
	res := &EnqueueResult{Request: request, EstimatedCalls: estimated, ResumesExecutionID: resumesID}
	if p.Guard != nil {
		if err := p.Guard.After(ctx, tx, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Estimate is a request's call estimate as an enqueue would record it now.
type Estimate struct {
	// Calls is the whole run's estimate for a new instance, the chunks
	// left's for a resume.
	Calls int
	// ResumesExecutionID is the execution the request would resume, nil
	// when it would start a new instance.
	ResumesExecutionID *int64
}

// Estimate is the dry run of Enqueue: p validated as Enqueue validates it
// (errors as Validate's), and the estimate its request would get, by the
// restart rules applied to the job's newest execution as db reads it
// (without the job's lock: an enqueue meanwhile may decide otherwise).
// It writes nothing.
func (o *Owner) Estimate(ctx context.Context, db queries.DBTX, p *EnqueueParams) (*Estimate, error) {
	_, params, err := o.Validate(ctx, db, p)
	if err != nil {
		return nil, err
	}
	out := &Estimate{Calls: params.EstimatedCalls}
	last, err := ResumeCandidate(ctx, db, p.Job, catalog.ParamsHash(params.Canonical), p.ConfirmPurge)
	if err != nil {
		return nil, err
	}
	if last != nil {
		if out.Calls, err = o.resumeEstimate(ctx, db, last.JobExecution.InstanceID, out.Calls); err != nil {
			return nil, err
		}
		out.ResumesExecutionID = &last.JobExecution.ID
	}
	out.Calls = requestEstimate(out.Calls, p.MaxCalls)
	if err := o.admit(p.Job, out.Calls); err != nil {
		return nil, err
	}
	return out, nil
}

// resumeEstimate is the estimate of a request that resumes instanceID,
// whose whole run was estimated at full calls: the share of the chunks its
// instance has left (callsLeft), and never more than full less the calls
// its executions already made (a run that calls item by item within big
// chunks, creditEval's, commits its items in parts before its chunk).
func (o *Owner) resumeEstimate(ctx context.Context, db queries.DBTX, instanceID int64, full int) (int, error) {
	plan, err := o.queries.JobInstanceChunksLeft(ctx, db, instanceID)
	if err != nil {
		return 0, fmt.Errorf("error reading the chunks the resumed instance has left: %w", err)
	}
	return min(callsLeft(full, plan.Planned, plan.Committed), max(full-int(plan.Calls), 0)), nil
}

// callsLeft is the part of a run's estimate (full calls over planned
// chunks) that its chunks not yet committed account for, rounded up:
// the calls a resume still makes, at the whole run's calls per chunk. An
// instance none of whose executions planned (planned 0) has all of it left.
func callsLeft(full int, planned, committed int64) int {
	if planned <= 0 || full <= 0 {
		return full
	}
	left := max(planned-committed, 0)
	return int((int64(full)*left + planned - 1) / planned)
}

// insertRun inserts, through River's InsertTx, the River job that runs
// p's request requestID in tx.
func (o *Owner) insertRun(ctx context.Context, tx pgx.Tx, p *EnqueueParams, requestID int64) (*rivertype.JobInsertResult, error) {
	res, err := o.river.InsertTx(ctx, tx, catalog.RequestArgs{Job: p.Job, RequestID: requestID}, nil)
	if err != nil {
		return nil, fmt.Errorf("error inserting river job: %w", err)
	}
	return res, nil
}

// notBeforeSeconds is d as a delay in seconds for the database to add to
// its now(): NULL (no delay) unless d is positive.
func notBeforeSeconds(d time.Duration) pgtype.Float8 {
	return pgtype.Float8{Float64: d.Seconds(), Valid: d > 0}
}

func maxCallsOrNil(maxCalls *int) *int32 {
	if maxCalls == nil {
		return nil
	}
	v := int32(*maxCalls)
	return &v
}

func workerIDOrNil(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}
