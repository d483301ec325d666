// Package request owns the job_request record: enqueueing a request under
// the job's advisory lock (stale cleanup, dedupe, River insert in the same
// transaction), the restart rule that decides whether a request resumes an
// earlier execution, and reading requests back.
//
// The api, the CLI, schedules and chains all enqueue through this package,
// so a scheduled run is recorded and deduplicated exactly like a click. It
// must not run jobs or know about HTTP.
package request

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// ErrUnknownJob is returned for a job name the catalog does not hold.
var ErrUnknownJob = errors.New("unknown job")

// DuplicateError is returned when the job already has an active (QUEUED or
// RUNNING) request.
type DuplicateError struct {
	Job             string
	ActiveRequestID int64
}

// Error implements error.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("job %s already has an active request %d", e.Job, e.ActiveRequestID)
}

// OverCapError refuses a run whose estimated calls exceed its provider's
// whole daily cap: no day could serve it, so the request must be split. It
// wraps the *jobs.ParamError that names the field (params), so it is a bad
// param to every caller that does not look for it.
type OverCapError struct {
	Provider  string
	Cap       int
	Estimated int
}

// Error implements error.
func (e *OverCapError) Error() string { return e.param().Error() }

// Unwrap returns the *jobs.ParamError that names the field.
func (e *OverCapError) Unwrap() error { return e.param() }

func (e *OverCapError) param() *jobs.ParamError {
	return &jobs.ParamError{
		Field:   "params",
		Message: fmt.Sprintf("estimated %d calls exceed the %s daily cap of %d; split the request", e.Estimated, e.Provider, e.Cap),
	}
}

// CleanupFunc finalizes, inside tx and under the job's advisory lock, the
// active request of job when the worker holding it is dead, so that a dead
// worker never blocks a job: without it, a request held by a crashed worker
// would answer every new request with 409 until the reaper's next pass.
type CleanupFunc func(ctx context.Context, tx pgx.Tx, job string) error

// EstimateFunc estimates a run's external calls when the params alone do
// not tell (creditEval's calls depend on the exposure ledger). It reads the
// database but never writes it.
type EstimateFunc func(ctx context.Context, db queries.DBTX, params *jobs.Params) (int, error)

// Config configures an Enqueuer.
type Config struct {
	// Estimators override the catalog's estimate for the named jobs.
	Estimators map[string]EstimateFunc
	// Catalog is the set of known jobs. Required.
	Catalog *jobs.Catalog
	// DailyCaps is each provider's daily call cap; an estimate above a whole
	// day's cap is refused. A provider missing here has no cap.
	DailyCaps map[string]int
	// Instruments counts requests. Required.
	Instruments *observability.Instruments
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Cleanup runs before the duplicate check; nil skips it.
	Cleanup CleanupFunc
	// StaleAfter is the cleanup's stale window (the reaper's): an active
	// request held by a worker that heartbeat within it, and that its River
	// job will still run, is one Cleanup cannot free, so a duplicate of it
	// is answered without the job's advisory lock. Zero with a Cleanup set
	// takes the lock for every enqueue.
	StaleAfter time.Duration
	// Resume is the policy of ResumeTx; its zero value resumes nothing.
	Resume ResumePolicy
}

// Enqueuer inserts job requests.
type Enqueuer struct {
	cfg     Config
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	queries *queries.Queries
}

// NewEnqueuer returns an Enqueuer. riverClient inserts each request's River
// job; nil records requests without one (and resumes nothing), for tests.
func NewEnqueuer(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], cfg Config) (*Enqueuer, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("request: Catalog is required")
	}
	if cfg.Instruments == nil {
		return nil, errors.New("request: Instruments is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Enqueuer{cfg: cfg, pool: pool, river: riverClient, queries: queries.New()}, nil
}

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

	// skipCleanup is set by ResumeTx, whose callers are the cleanup.
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

// Validate decodes and checks a request, estimating its calls; it reads the
// database only through an Estimators entry, and writes nothing.
func (e *Enqueuer) Validate(ctx context.Context, db queries.DBTX, p *EnqueueParams) (jobs.Definition, *jobs.Params, error) {
	def, ok := e.cfg.Catalog.Lookup(p.Job)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnknownJob, jobs.Quote(p.Job))
	}
	params, err := def.Decode(p.Params)
	if err != nil {
		return nil, nil, err
	}
	if p.MaxCalls != nil && (*p.MaxCalls < 1 || *p.MaxCalls > jobs.MaxCallsMax) {
		return nil, nil, &jobs.ParamError{Field: "maxCalls", Message: fmt.Sprintf("must be an integer from 1 to %d when given", jobs.MaxCallsMax)}
	}
	if estimate, ok := e.cfg.Estimators[p.Job]; ok {
		if params.EstimatedCalls, err = estimate(ctx, db, params); err != nil {
			return nil, nil, fmt.Errorf("error estimating calls: %w", err)
		}
	}
	if limit, ok := e.cfg.DailyCaps[def.Provider()]; ok && params.EstimatedCalls > limit {
		return nil, nil, &OverCapError{Provider: def.Provider(), Cap: limit, Estimated: params.EstimatedCalls}
	}
	return def, params, nil
}

// Enqueue validates p and, in one transaction under the job's advisory lock
// (taken once; not at all for a duplicate of an active request the cleanup
// could not free, see settledStaleSeconds), runs the stale cleanup, refuses a duplicate, inserts the request's River
// job (when the Enqueuer has a River client) and the request. A conflict
// (serialization failure, deadlock) runs the transaction again (pgtx.InTx).
// Errors: ErrUnknownJob, *jobs.ParamError (an *OverCapError among them),
// *DuplicateError, p.Guard's own, or an internal error.
func (e *Enqueuer) Enqueue(ctx context.Context, p *EnqueueParams) (*EnqueueResult, error) {
	_, params, err := e.Validate(ctx, e.pool, p)
	if err != nil {
		if jobs.IsParamError(err) {
			e.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultInvalid)
		}
		return nil, err
	}
	var result *EnqueueResult
	err = pgtx.InTx(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		result, err = e.enqueueTx(ctx, tx, p, params)
		return err
	})
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		e.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultDuplicate)
		return nil, err
	case errors.Is(err, queries.ErrUniqueViolation):
		// The partial unique index caught what the lock should have: still a
		// duplicate, decided by the database.
		e.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultDuplicate)
		active, getErr := e.queries.JobRequestGetActiveByJob(ctx, e.pool, p.Job)
		if getErr != nil {
			return nil, &DuplicateError{Job: p.Job}
		}
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: active.ID}
	case err != nil:
		return nil, err
	}
	e.cfg.Instruments.RequestRecorded(ctx, p.Job, p.Source, observability.ResultAccepted)
	return result, nil
}

// settledStaleSeconds is the stale window enqueueTx hands to
// JobLockUnlessSettled for p: an active request held by a worker that
// heartbeat within it, and that its River job will still run, is one the
// cleanup cannot free, so its duplicate is answered without the job's
// advisory lock and never queues on the lock the run's start takes. The
// answer is the one the locked path would give: the cleanup would find
// nothing to finalize and the state read after it would show the same
// active request. Without a cleanup every active request stays (a window
// of a century); without a stale window, or for a request the cleanup
// itself makes (ResumeTx), 0: the lock is always taken, once.
func (e *Enqueuer) settledStaleSeconds(p *EnqueueParams) float64 {
	switch {
	case p.skipCleanup:
		return 0
	case e.cfg.Cleanup == nil:
		return (100 * 365 * 24 * time.Hour).Seconds()
	}
	return e.cfg.StaleAfter.Seconds()
}

// EnqueueTx is Enqueue inside the caller's transaction (chains insert the
// next job's request in the transaction that records a completion). The
// params must already be valid; a duplicate returns *DuplicateError and
// leaves tx usable only for rollback.
func (e *Enqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, p *EnqueueParams) (*EnqueueResult, error) {
	_, params, err := e.Validate(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	return e.enqueueTx(ctx, tx, p, params)
}

// enqueueTx is the one enqueue: in tx, the job's advisory lock (unless its
// active request is settled: a duplicate without the lock) and its state
// (one round trip), the stale cleanup when the job has an active
// request, the duplicate check, the restart rule, River's InsertTx of a job
// that carries the request's id, and the request row, linked to that job.
// A duplicate draws no request id: the state reads one only for a job
// without an active request.
func (e *Enqueuer) enqueueTx(ctx context.Context, tx pgx.Tx, p *EnqueueParams, params *jobs.Params) (*EnqueueResult, error) {
	if p.Guard != nil {
		if err := p.Guard.Before(ctx, tx); err != nil {
			return nil, err
		}
	}
	state, settled, err := e.queries.EnqueueStateTx(ctx, tx, p.Job, e.settledStaleSeconds(p))
	if err != nil {
		return nil, fmt.Errorf("error taking job lock and reading its requests: %w", err)
	}
	if settled != 0 {
		// A duplicate of a request the cleanup cannot free: no lock taken.
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: settled}
	}
	if state.ActiveRequestID != 0 && e.cfg.Cleanup != nil && !p.skipCleanup {
		if err := e.cfg.Cleanup(ctx, tx, p.Job); err != nil {
			return nil, fmt.Errorf("error cleaning up stale requests: %w", err)
		}
		// The cleanup may have finalized the active request (and inserted
		// its automatic resume): read again, still under the lock.
		if state, err = e.queries.JobRequestEnqueueState(ctx, tx, p.Job); err != nil {
			return nil, fmt.Errorf("error reading the job's requests: %w", err)
		}
	}
	if state.ActiveRequestID != 0 {
		return nil, &DuplicateError{Job: p.Job, ActiveRequestID: state.ActiveRequestID}
	}

	paramsHash := jobs.ParamsHash(params.Canonical)
	var resumesID *int64
	if !p.ConfirmPurge && state.LastExecutionID != 0 && resumes(state.LastStatus, state.LastParamsHash, state.LastConfirmPurge, paramsHash) {
		resumesID = &state.LastExecutionID
	}
	estimated := params.EstimatedCalls
	if resumesID != nil {
		if estimated, err = e.resumeEstimate(ctx, tx, state.LastInstanceID, estimated); err != nil {
			return nil, err
		}
	}
	var riverJobID *int64
	if e.river != nil && p.WorkerID == "" {
		res, err := e.insertRun(ctx, tx, p, state.NextRequestID)
		if err != nil {
			return nil, err
		}
		riverJobID = &res.Job.ID
	}
	request, err := e.queries.JobRequestInsert(ctx, tx, &queries.JobRequestInsertParams{
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
func (e *Enqueuer) Estimate(ctx context.Context, db queries.DBTX, p *EnqueueParams) (*Estimate, error) {
	_, params, err := e.Validate(ctx, db, p)
	if err != nil {
		return nil, err
	}
	out := &Estimate{Calls: params.EstimatedCalls}
	last, err := ResumeCandidate(ctx, db, p.Job, jobs.ParamsHash(params.Canonical), p.ConfirmPurge)
	if err != nil {
		return nil, err
	}
	if last == nil {
		return out, nil
	}
	if out.Calls, err = e.resumeEstimate(ctx, db, last.JobExecution.InstanceID, out.Calls); err != nil {
		return nil, err
	}
	out.ResumesExecutionID = &last.JobExecution.ID
	return out, nil
}

// resumeEstimate is the estimate of a request that resumes instanceID,
// whose whole run was estimated at full calls: the share of the chunks its
// instance has left (callsLeft).
func (e *Enqueuer) resumeEstimate(ctx context.Context, db queries.DBTX, instanceID int64, full int) (int, error) {
	plan, err := e.queries.JobInstanceChunksLeft(ctx, db, instanceID)
	if err != nil {
		return 0, fmt.Errorf("error reading the chunks the resumed instance has left: %w", err)
	}
	return callsLeft(full, plan.Planned, plan.Committed), nil
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
func (e *Enqueuer) insertRun(ctx context.Context, tx pgx.Tx, p *EnqueueParams, requestID int64) (*rivertype.JobInsertResult, error) {
	res, err := e.river.InsertTx(ctx, tx, jobs.RequestArgs{Job: p.Job, RequestID: requestID}, nil)
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
