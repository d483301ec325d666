package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream"
)

// Defaults of Config.
const (
	FanOutDefault             = 5
	RecordRetryWindowDefault  = time.Minute
	DBTimeoutDefault          = 5 * time.Second
	LeaseCheckIntervalDefault = 10 * time.Second
)

// Messages recorded on stopped executions; each tells the operator what a
// new request will do.
const (
	MessageStopRequested = "stopped on request at a chunk boundary; a new request resumes from the last commit"
	MessageDrained       = "worker shut down: stopped at a chunk boundary; a new request resumes from the last commit"
	MessageDrainTimeout  = "worker shut down past the drain timeout: the chunk in flight rolled back; a new request resumes from the last commit"
)

// Job is one runnable job. Plan and Process must not hold a database
// transaction open; the runner commits what ChunkResult.Write writes
// together with the chunk's checkpoint.
type Job interface {
	// Plan lists the job's chunks (stable keys: a resume skips the keys
	// already committed) and declares its targets.
	Plan(ctx context.Context, run *Run) (*Plan, error)
	// Process does one chunk's reading and external calls.
	Process(ctx context.Context, run *Run, chunk string) (*ChunkResult, error)
}

// DomainRowCounter is implemented by jobs that can count, with a query, the
// domain rows their executions wrote: a second count, independent of the
// runner's own, so that a loss can be proved from the data and not only
// from the counters.
type DomainRowCounter interface {
	DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error)
}

// RunEnder is implemented by jobs that keep state for an execution between
// its chunks (an open parse of a file): the runner calls EndRun once the
// execution's chunks are over, whatever the outcome.
type RunEnder interface {
	EndRun(run *Run)
}

// TargetsUnknown declares that a job learns its targets chunk by chunk.
const TargetsUnknown = -1

// Plan is a job's work list.
type Plan struct {
	Chunks []string
	// Targets is the number of items the whole instance must account for,
	// or TargetsUnknown when each chunk declares its own.
	Targets int64
}

// ChunkResult is one processed chunk.
type ChunkResult struct {
	// Targets is how many items the chunk was responsible for; every one of
	// them must be written, skipped or failed.
	Targets, Written, Skipped, Failed int64
	// SkipReason says why the chunk's items were skipped ("holiday");
	// the execution's final message totals skipped items by reason.
	SkipReason string
	// Write runs in the checkpoint transaction. It may be nil.
	Write func(ctx context.Context, tx pgx.Tx) error
	// Queue, in place of Write, adds the chunk's writes to the commit's
	// batch as statements (queries.Queue): the chunk then commits in one
	// round trip, its writes and its bookkeeping in one implicit
	// transaction (queries.InImplicitTx). A statement that fails rolls the
	// chunk back; a statement's result callback runs once the batch has
	// committed, so an error it returns fails the run but undoes nothing.
	// Set at most one of Write and Queue.
	Queue func(b *pgx.Batch)
}

// Run is what a job sees of its execution.
type Run struct {
	Job         string
	RequestID   int64
	ExecutionID int64
	InstanceID  int64
	Params      json.RawMessage
	Calls       *upstream.Caller
	DB          *pgxpool.Pool
	Logger      *slog.Logger
	FanOut      int
	Instruments *observability.Instruments

	// parts commits the finished items of a fan-out chunk (FanOutCommit).
	parts *partCommitter
}

// Config configures a Runner.
type Config struct {
	// WorkerID is recorded on requests and executions. Required.
	WorkerID string
	// Jobs maps job names to their implementation. Required.
	Jobs map[string]Job
	// Upstream makes provider calls. Required.
	Upstream *upstream.Client
	// Instruments counts executions and items. Required.
	Instruments *observability.Instruments
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// FanOut is the per-job fan-out pool size (BUILDRISK_FANOUT).
	FanOut int
	// RecordRetryWindow is how long recording an outcome is retried, and,
	// when there is no Fence, how long a transient database error during
	// the run is retried.
	RecordRetryWindow time.Duration
	// Fence is the process's self-fencing signal (the worker's or the
	// CLI's presence). While it stays up, transient database errors are
	// retried; once it fires, the run's work in flight is cancelled
	// uncommitted and the run fails naming the outage. nil never fires.
	Fence Fence
	// DBTimeout bounds each database call of a run (each attempt of a
	// transaction), like the connections' statement_timeout.
	DBTimeout time.Duration
	// LeaseCheckInterval is how often a run checks, while a chunk is in
	// flight, that its execution is still its own; losing it cancels the
	// chunk at once instead of at its commit.
	LeaseCheckInterval time.Duration
	// OnTransient, when set, is called with each transient database error
	// a run retries (tests wait for it to restart the database).
	OnTransient func(err error)
	// Held tracks the requests this process holds (for the reconcile loop).
	Held *HeldSet
	// Tracer makes the execution and chunk spans; nil is a no-op tracer.
	Tracer trace.Tracer
	// RecordHook, when set, runs between recording the execution's outcome
	// and the request's; tests cut the database there.
	RecordHook func()
	// OutcomeHook, when set, runs inside the transaction that records the
	// execution's outcome, after its write and before the commit, while
	// the row is locked: tests hold it there to race a stop against the
	// run's end.
	OutcomeHook func()
	// Chain runs inside the transaction that records a COMPLETED execution:
	// it inserts the next job's request there, so there is never a moment
	// where a job is done and its successor missing. An error rolls the
	// completion back (and recording retries).
	Chain ChainFunc
	// Resume runs inside the transaction that finishes the request of a run
	// that did not complete: it applies the resume policy, so a run stopped
	// by a drain resumes by itself (request.Enqueuer.ResumeTx).
	Resume func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error
}

// ChainFunc inserts the request that follows a completed execution.
type ChainFunc func(ctx context.Context, tx pgx.Tx, finished *Finished) error

// Finished describes a COMPLETED execution to a ChainFunc.
type Finished struct {
	Job         string
	RequestID   int64
	ExecutionID int64
	Params      json.RawMessage
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.FanOut = cmp.Or(c.FanOut, FanOutDefault)
	c.RecordRetryWindow = cmp.Or(c.RecordRetryWindow, RecordRetryWindowDefault)
	c.DBTimeout = cmp.Or(c.DBTimeout, DBTimeoutDefault)
	c.LeaseCheckInterval = cmp.Or(c.LeaseCheckInterval, LeaseCheckIntervalDefault)
	if c.Held == nil {
		c.Held = NewHeldSet()
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.WorkerID == "":
		return errors.New("batch: WorkerID is required")
	case c.Jobs == nil:
		return errors.New("batch: Jobs is required")
	case c.Upstream == nil:
		return errors.New("batch: Upstream is required")
	case c.Instruments == nil:
		return errors.New("batch: Instruments is required")
	case c.FanOut < 1:
		return fmt.Errorf("batch: FanOut must be at least 1, got %d", c.FanOut)
	}
	return nil
}

// Runner runs requests as chunked, checkpointed executions.
type Runner struct {
	cfg       Config
	pool      *pgxpool.Pool
	queries   *queries.Queries
	drain     chan struct{}
	drainOnce sync.Once
}

// NewRunner returns a Runner.
func NewRunner(pool *pgxpool.Pool, cfg Config) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, pool: pool, queries: queries.New(), drain: make(chan struct{})}, nil
}

// Held returns the set of requests this runner holds.
func (r *Runner) Held() *HeldSet { return r.cfg.Held }

// Drain asks every running execution to stop at its next chunk boundary; a
// fan-out chunk (FanOutCommit) stops handing out items at once and commits
// the ones in flight. It returns at once; Run returns when the execution
// has really stopped.
func (r *Runner) Drain() { r.drainOnce.Do(func() { close(r.drain) }) }

// RunOpts are one Run's options.
type RunOpts struct {
	RequestID int64
	// FinishTx runs inside the transaction that records the request's
	// outcome (nil: the request was no longer queued, nothing ran); the
	// worker ends its River job there so both commit together.
	FinishTx func(ctx context.Context, tx pgx.Tx, outcome *Outcome) error
	// OnChunk is called after each committed chunk (the CLI prints it).
	OnChunk func(done, total int)
}

// Outcome is how a Run ended.
type Outcome struct {
	ExecutionID   int64
	Status        string // execution status, "" when the request was not runnable or the run lost its ownership
	RequestStatus string
	Message       string
}

// ErrNotQueued is returned by Run when the request was no longer QUEUED
// (reaped or finalized meanwhile); nothing was run.
var ErrNotQueued = errors.New("request is no longer queued")

// ErrOwnershipLost is returned (wrapped) by Run when a write of the run
// found its execution no longer active under this worker and lease epoch:
// it was abandoned (the reaper took this worker for dead) or a newer
// execution of its instance took over. The run stopped at once, rolled back
// what it was writing and wrote nothing more; the execution's record is
// whoever took it over's.
var ErrOwnershipLost = errors.New("ownership of the execution lost")

// ErrFenced is the cause of a run's cancellation when its process went
// without a successful heartbeat for its fencing threshold (see Fence).
var ErrFenced = errors.New("no successful heartbeat within the fencing threshold")

// Fence is a process's self-fencing signal. The worker's presence (and the
// CLI's) implements it: when its last successful heartbeat is older than a
// threshold safely below the reaper's stale window, it fires, so that the
// process stops its work before anyone can take that work over.
type Fence interface {
	// Fenced returns a channel that is closed while the process is fenced.
	// A run takes it when it starts: once closed, the run has lost its
	// window, even if the process re-registers later.
	Fenced() <-chan struct{}
}

// FenceFunc adapts a function to Fence.
type FenceFunc func() <-chan struct{}

// Fenced implements Fence.
func (f FenceFunc) Fenced() <-chan struct{} { return f() }

type started struct {
	request  *queries.JobRequest
	exec     *queries.JobExecution
	resumed  bool
	maxCalls int
	// cause says why a run that did not complete ended (radartype.StopCause);
	// it is recorded with the end, and the resume policy reads it.
	cause radartype.StopCause
}

// runState is one run's ownership and outage state.
type runState struct {
	*started
	fenced <-chan struct{}
	logger *slog.Logger

	mu        sync.Mutex
	lastDBErr error // the newest transient database error, for the message
	warned    bool
}

func (rs *runState) noteDBError(err error) (first bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lastDBErr = err
	first = !rs.warned
	rs.warned = true
	return first
}

func (rs *runState) dbError() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.lastDBErr
}

// lost wraps ErrOwnershipLost with the execution's identity.
func (rs *runState) lost() error {
	return fmt.Errorf("execution %d (worker %s, lease epoch %d): %w", rs.exec.ID, rs.exec.WorkerID, rs.exec.LeaseEpoch, ErrOwnershipLost)
}

// Run claims the request, creates its execution under the job's advisory
// lock (resuming per the restart rules, with the instance's next lease
// epoch), runs the chunks and records the outcome. Errors are returned only
// when nothing could be recorded; an error wrapping ErrOwnershipLost means
// the run lost its execution and wrote nothing after noticing.
func (r *Runner) Run(ctx context.Context, opts RunOpts) (*Outcome, error) {
	held := r.cfg.Held
	held.Add(opts.RequestID) // before the claim commits: the reconcile loop never sees it unheld
	defer held.Remove(opts.RequestID)

	fenced := r.fenced()
	select {
	case <-fenced:
		return nil, fmt.Errorf("not starting request %d: %w", opts.RequestID, ErrFenced)
	default:
	}
	var st *started
	err := r.retryTransient(ctx, fenced, nil, func(ctx context.Context) error {
		var err error
		st, err = r.start(ctx, opts.RequestID)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotQueued) && opts.FinishTx != nil {
			recordErr := queries.InTx(context.WithoutCancel(ctx), r.pool, func(tx pgx.Tx) error { return opts.FinishTx(context.WithoutCancel(ctx), tx, nil) })
			return nil, errors.Join(err, recordErr)
		}
		return nil, err
	}
	ctx, span := r.cfg.Tracer.Start(ctx, "buildrisk.execution", trace.WithAttributes(
		attribute.String("buildrisk.job", st.request.Job),
		attribute.Int64("buildrisk.request_id", st.request.ID),
		attribute.Int64("buildrisk.execution_id", st.exec.ID),
	))
	defer span.End()
	rs := &runState{started: st, fenced: fenced, logger: r.cfg.Logger.With(
		slog.Int64("request_id", st.request.ID),
		slog.Int64("execution_id", st.exec.ID),
		slog.String("job", st.request.Job),
		slog.String("worker_id", r.cfg.WorkerID),
		slog.Int64("lease_epoch", st.exec.LeaseEpoch),
	)}
	if st.request.ClaimedAt != nil {
		r.cfg.Instruments.RequestStartLatency(ctx, st.request.Job, st.request.ClaimedAt.Sub(st.request.CreatedAt))
	}
	rs.logger.InfoContext(ctx, "execution started", slog.Bool("resumed", st.resumed))

	status, message, domainRows, err := r.execute(ctx, rs, opts)
	if err == nil && status != string(radartype.ExecutionCompleted) && rs.cause == "" {
		rs.cause = radartype.CauseFailure
	}
	if err == nil {
		span.SetAttributes(attribute.String("buildrisk.status", status))
		if status == string(radartype.ExecutionFailed) {
			span.SetStatus(codes.Error, message)
		}
		outcome := &Outcome{ExecutionID: st.exec.ID, Status: status, Message: message, RequestStatus: string(radartype.ExecutionStatus(status).RequestStatus())}
		if err = r.record(ctx, rs, outcome, domainRows, opts.FinishTx); err == nil {
			r.cfg.Instruments.ExecutionFinished(ctx, st.request.Job, radartype.ExecutionStatus(status))
			if status == string(radartype.ExecutionStopped) {
				r.cfg.Instruments.ExecutionStopped(ctx, st.request.Job, rs.cause)
			}
			rs.logger.InfoContext(ctx, "execution finished", slog.String("status", status), slog.String("message", message))
			return outcome, nil
		}
		if !errors.Is(err, ErrOwnershipLost) {
			rs.logger.ErrorContext(ctx, "could not record the outcome; the reconcile loop will finalize it", slog.String("error", err.Error()))
			return outcome, err
		}
	}
	// Ownership lost: one line, one count, nothing more written.
	span.SetStatus(codes.Error, err.Error())
	r.cfg.Instruments.OwnershipLost(ctx, st.request.Job)
	rs.logger.WarnContext(ctx, "ownership of the execution lost: stopped at once, the work in flight rolled back, nothing more written", slog.String("error", err.Error()))
	return &Outcome{ExecutionID: st.exec.ID, Message: err.Error()}, err
}

// fenced returns the fence's channel, or nil (never closed) without one.
func (r *Runner) fenced() <-chan struct{} {
	if r.cfg.Fence == nil {
		return nil
	}
	return r.cfg.Fence.Fenced()
}

// start claims the request and creates the execution in one transaction
// under the job's advisory lock, so a CLI run and a worker can never start
// the same job at once. The execution takes the instance's next lease
// epoch, which fences off every earlier execution of the instance.
func (r *Runner) start(ctx context.Context, requestID int64) (*started, error) {
	var st *started
	err := queries.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		st = nil
		pending, err := r.queries.JobRequestGetByID(ctx, tx, requestID)
		if err := queries.Interpret(err); err != nil {
			return fmt.Errorf("error reading request %d: %w", requestID, err)
		}
		if err := r.queries.AdvisoryXactLockJob(ctx, tx, pending.Job); err != nil {
			return fmt.Errorf("error taking job lock: %w", err)
		}
		req, err := r.queries.JobRequestClaim(ctx, tx, &queries.JobRequestClaimParams{ID: requestID, WorkerID: &r.cfg.WorkerID})
		if err := queries.Interpret(err); err != nil {
			if errors.Is(err, queries.ErrNotFound) {
				return ErrNotQueued
			}
			return fmt.Errorf("error claiming request: %w", err)
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
		return r.queries.JobRequestSetExecution(ctx, tx, &queries.JobRequestSetExecutionParams{ID: req.ID, ExecutionID: &st.exec.ID})
	})
	if err != nil {
		return nil, err
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

// watch cancels the run's work when the process fences itself or, checked
// every LeaseCheckInterval, when the execution is no longer the run's: so a
// lost execution is noticed while a chunk is in flight, not only at its
// commit. Transient errors of the check are left to the fence.
func (r *Runner) watch(ctx context.Context, cancel context.CancelCauseFunc, rs *runState) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(r.cfg.LeaseCheckInterval)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-rs.fenced:
				cancel(ErrFenced)
				return
			case <-ticker.C:
				checkCtx, cancelCheck := context.WithTimeout(ctx, r.cfg.DBTimeout)
				_, err := r.queries.JobExecutionOwned(checkCtx, r.pool, &queries.JobExecutionOwnedParams{
					ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
				})
				cancelCheck()
				if errors.Is(err, pgx.ErrNoRows) {
					cancel(rs.lost())
					return
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// execute runs the chunks and decides the execution's final status. It
// returns an error wrapping ErrOwnershipLost, and no status, when the run
// lost its execution.
//
// When that happens mid-chunk (the lease check or the fence cancels the
// chunk's context), the calls still in flight are the chunk's own: at most
// the fan-out's size, or one for a job that calls one at a time. Process
// returns only after they have ended (the fan-out waits for its items), and
// what they returned is never written: every write of the run is fenced in
// SQL on the execution's worker and lease epoch, so the chunk's commit, the
// call counts and the outcome all find no row and roll back. When a fenced
// commit is what finds the loss, Process has already returned, and no call
// of the run is in flight.
func (r *Runner) execute(parent context.Context, rs *runState, opts RunOpts) (status, message string, domainRows *int64, err error) {
	st := rs.started
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopWatch := r.watch(ctx, cancel, rs)
	defer stopWatch()

	job := r.cfg.Jobs[st.request.Job]
	run := &Run{
		Job:         st.request.Job,
		RequestID:   st.request.ID,
		ExecutionID: st.exec.ID,
		InstanceID:  st.exec.InstanceID,
		Params:      st.request.Params,
		Calls:       r.cfg.Upstream.NewCaller(st.request.Job, st.maxCalls),
		DB:          r.pool,
		Logger:      rs.logger,
		FanOut:      r.cfg.FanOut,
		Instruments: r.cfg.Instruments,
	}
	run.parts = r.partCommitter(st)
	// The run's unspent leases of the daily caps go back to the budget when
	// it ends, whatever the outcome.
	defer func() { _ = run.Calls.Release(context.WithoutCancel(ctx)) }()
	if ender, ok := job.(RunEnder); ok {
		defer ender.EndRun(run)
	}
	callsRecorded := int64(0)
	// flushCalls records the calls made outside a committed chunk (a failed
	// chunk's): fenced like every write, retried through an outage.
	flushCalls := func() error {
		n := run.Calls.Calls() - callsRecorded
		if n <= 0 {
			return nil
		}
		err := r.retryTransient(context.WithoutCancel(ctx), rs.fenced, rs, func(callCtx context.Context) error {
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
		callsRecorded += n
		return nil
	}
	// fail ends the run on err: the calls made so far are recorded first,
	// and a failure to record them is kept in the message.
	fail := func(err error, where string) (string, string, *int64, error) {
		if flushErr := flushCalls(); flushErr != nil {
			if errors.Is(flushErr, ErrOwnershipLost) {
				return "", "", nil, flushErr
			}
			err = errors.Join(err, flushErr)
		}
		status, message, lostErr := r.classify(ctx, rs, err, where)
		return status, message, nil, lostErr
	}
	defer func() {
		if err != nil || status == "" {
			return
		}
		if counter, ok := job.(DomainRowCounter); ok {
			n, countErr := r.domainRows(context.WithoutCancel(ctx), counter, st.exec.InstanceID)
			if countErr != nil {
				// The execution is recorded without the second count; say so.
				rs.logger.WarnContext(ctx, "could not count the domain rows", slog.String("error", countErr.Error()))
				return
			}
			domainRows = &n
		}
	}()

	plan, err := job.Plan(ctx, run)
	if err != nil {
		return fail(err, "plan")
	}
	var done []string
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		done, err = r.queries.JobCheckpointListChunks(callCtx, r.pool, st.exec.InstanceID)
		return err
	}); err != nil {
		return fail(fmt.Errorf("error reading checkpoints: %w", err), "start")
	}
	committed := make(map[string]bool, len(done))
	for _, c := range done {
		committed[c] = true
	}
	chunksDone := 0
	for _, c := range plan.Chunks {
		if committed[c] {
			chunksDone++
		}
	}
	var execStatus string
	err = r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		execStatus, err = r.queries.JobExecutionStart(callCtx, r.pool, &queries.JobExecutionStartParams{
			ID: st.exec.ID, ChunksTotal: int32(len(plan.Chunks)), ChunksDone: int32(chunksDone), Targets: plan.Targets,
			WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return rs.lost()
		}
		return err
	})
	if err != nil {
		return fail(err, "start")
	}
	for _, chunk := range plan.Chunks {
		if committed[chunk] {
			continue
		}
		if execStatus == string(radartype.ExecutionStopping) {
			rs.cause = radartype.CauseOperator
			return string(radartype.ExecutionStopped), MessageStopRequested, nil, nil
		}
		select {
		case <-r.drain:
			rs.cause = radartype.CauseDrain
			return string(radartype.ExecutionStopped), MessageDrained, nil, nil
		default:
		}

		began := time.Now()
		callsBefore := run.Calls.Calls()
		chunkCtx, chunkSpan := r.cfg.Tracer.Start(ctx, "buildrisk.chunk", trace.WithAttributes(attribute.String("buildrisk.chunk", chunk)))
		var res *ChunkResult
		// A transient database error inside Process (the call budget, a
		// read) is retried like the commit: the chunk is done again.
		err := r.retryTransient(chunkCtx, rs.fenced, rs, func(context.Context) error {
			var err error
			res, err = job.Process(chunkCtx, run, chunk)
			return err
		})
		if err != nil {
			chunkSpan.SetStatus(codes.Error, err.Error())
			chunkSpan.End()
			r.countItemFailures(ctx, st, err)
			return fail(err, "chunk "+chunk)
		}
		chunkSpan.SetAttributes(
			attribute.Int64("buildrisk.targets", res.Targets), attribute.Int64("buildrisk.written", res.Written),
			attribute.Int64("buildrisk.skipped", res.Skipped), attribute.Int64("buildrisk.failed", res.Failed),
			attribute.Int64("buildrisk.external_calls", run.Calls.Calls()-callsBefore),
		)
		chunkCalls := run.Calls.Calls() - callsBefore
		if err := r.checkChunk(ctx, run.Job, chunk, res); err != nil {
			chunkSpan.SetStatus(codes.Error, err.Error())
			chunkSpan.End()
			if flushErr := flushCalls(); errors.Is(flushErr, ErrOwnershipLost) {
				return "", "", nil, flushErr
			}
			return string(radartype.ExecutionFailed), err.Error(), nil, nil
		}
		newCalls := run.Calls.Calls() - callsRecorded
		execStatus, err = r.commitChunk(ctx, rs, chunk, res, int32(chunkCalls), int32(newCalls))
		chunkSpan.End()
		if err != nil {
			return fail(err, "commit of chunk "+chunk)
		}
		callsRecorded += newCalls
		chunksDone++
		r.cfg.Instruments.ChunkDuration(ctx, run.Job, time.Since(began))
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeWritten, res.Written)
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeSkipped, res.Skipped)
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeFailed, res.Failed)
		if opts.OnChunk != nil {
			opts.OnChunk(chunksDone, len(plan.Chunks))
		}
	}
	if execStatus == string(radartype.ExecutionStopping) && chunksDone < len(plan.Chunks) {
		rs.cause = radartype.CauseOperator
		return string(radartype.ExecutionStopped), MessageStopRequested, nil, nil
	}
	status, message, err = r.account(ctx, rs, plan, run.Job)
	if err != nil {
		return fail(err, "accounting")
	}
	return status, message, nil, nil
}

// commitChunk commits a chunk's writes and its checkpoint in one
// transaction with the chunk's whole bookkeeping (JobExecutionChunkCommit:
// the counts, the checkpoint, the execution's status). The bookkeeping is
// fenced: it raises (ErrOwnershipLost, everything rolls back) unless the
// execution is still active under this run's worker and lease epoch, and it
// locks the execution row until the commit. A chunk whose writes are
// queued statements (ChunkResult.Queue) commits in one round trip: its
// bookkeeping and writes in one implicit transaction. A chunk with a Write
// function runs it in an explicit transaction whose BEGIN travels with the
// bookkeeping, then commits: a chunk whose writes are one statement takes
// three round trips. Transient errors are retried inside the window; an
// attempt after an error whose commit may have landed first looks for the
// chunk's checkpoint, so a chunk is never counted twice.
func (r *Runner) commitChunk(ctx context.Context, rs *runState, chunk string, res *ChunkResult, chunkCalls, newCalls int32) (string, error) {
	if res.Write != nil && res.Queue != nil {
		return "", fmt.Errorf("chunk %s: a ChunkResult sets Write or Queue, not both", chunk)
	}
	var execStatus string
	attempt := 0
	params := &queries.JobExecutionChunkCommitParams{
		ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
		Chunk: chunk, Targets: res.Targets, Written: res.Written, Skipped: res.Skipped, Failed: res.Failed,
		SkipReason: res.SkipReason, ExternalCalls: newCalls, ChunkCalls: chunkCalls,
	}
	err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		attempt++
		if attempt > 1 {
			committed, status, err := r.committedBefore(callCtx, rs, chunk)
			if err != nil || committed {
				execStatus = status
				return err
			}
		}
		var status string
		bookkeeping := func(b *pgx.Batch) {
			queries.Queue(b, func(db queries.DBTX) { _, _ = r.queries.JobExecutionChunkCommit(callCtx, db, params) }).
				QueryRow(func(row pgx.Row) error { return row.Scan(&status) })
		}
		var err error
		if res.Write == nil {
			err = queries.InImplicitTx(callCtx, r.pool, func(b *pgx.Batch) {
				bookkeeping(b)
				if res.Queue != nil {
					res.Queue(b)
				}
			})
		} else {
			err = queries.InTxBatch(callCtx, r.pool, bookkeeping, func(tx pgx.Tx) error {
				if err := res.Write(callCtx, tx); err != nil {
					return fmt.Errorf("error writing chunk: %w", err)
				}
				return nil
			})
		}
		switch {
		case queries.IsNotOwned(err):
			return rs.lost()
		case err != nil:
			return fmt.Errorf("error committing chunk: %w", err)
		}
		execStatus = status
		return nil
	})
	return execStatus, err
}

// committedBefore reports whether an earlier attempt of the chunk's commit
// landed although its answer was lost, with the execution's status then. A
// checkpoint of the chunk by another execution, or an execution that is no
// longer the run's, is ErrOwnershipLost.
func (r *Runner) committedBefore(ctx context.Context, rs *runState, chunk string) (bool, string, error) {
	owner, err := r.queries.JobCheckpointOwner(ctx, r.pool, &queries.JobCheckpointOwnerParams{InstanceID: rs.exec.InstanceID, Chunk: chunk})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, "", nil
	case err != nil:
		return false, "", err
	case owner != rs.exec.ID:
		return false, "", rs.lost() // another execution committed the chunk
	}
	status, err := r.queries.JobExecutionOwned(ctx, r.pool, &queries.JobExecutionOwnedParams{
		ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", rs.lost()
	}
	return err == nil, status, err
}

// domainRows counts the rows the instance's executions wrote.
func (r *Runner) domainRows(ctx context.Context, counter DomainRowCounter, instanceID int64) (int64, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	ids, err := r.queries.JobExecutionIDsByInstance(callCtx, r.pool, instanceID)
	if err != nil {
		return 0, fmt.Errorf("error listing the instance's executions: %w", err)
	}
	return counter.DomainRows(callCtx, r.pool, ids)
}

// account refuses a silent success: every declared target must be written,
// skipped or failed, or the execution ends FAILED.
func (r *Runner) account(ctx context.Context, rs *runState, plan *Plan, job string) (string, string, error) {
	var totals *queries.JobCheckpointTotalsRow
	var reasons []*queries.JobCheckpointSkipReasonsRow
	err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		if totals, err = r.queries.JobCheckpointTotals(callCtx, r.pool, rs.exec.InstanceID); err != nil {
			return err
		}
		reasons, err = r.queries.JobCheckpointSkipReasons(callCtx, r.pool, rs.exec.InstanceID)
		return err
	})
	if err != nil {
		return "", "", err
	}
	targets := totals.Targets
	if plan.Targets != TargetsUnknown {
		targets = plan.Targets
	}
	accounted := totals.Written + totals.Skipped + totals.Failed
	if unaccounted := abs(targets - accounted); unaccounted != 0 {
		// Every committed chunk added up (checkChunk), so the gap is
		// between the declared targets and what the chunks took on.
		r.cfg.Instruments.ItemsCounted(ctx, job, observability.OutcomeUnaccounted, unaccounted)
		return string(radartype.ExecutionFailed), fmt.Sprintf("unaccounted: %d of %d targets (written %d, skipped %d, failed %d)",
			unaccounted, targets, totals.Written, totals.Skipped, totals.Failed), nil
	}
	return string(radartype.ExecutionCompleted), fmt.Sprintf("completed: %d targets (written %d, skipped %d%s, failed %d)",
		targets, totals.Written, totals.Skipped, skipReasons(reasons), totals.Failed), nil
}

// skipReasons renders skipped items by reason: " (holiday: 100)".
func skipReasons(rows []*queries.JobCheckpointSkipReasonsRow) string {
	if len(rows) == 0 {
		return ""
	}
	parts := make([]string, 0, len(rows))
	for _, row := range rows {
		reason := row.SkipReason
		if reason == "" {
			reason = "unspecified"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", reason, row.Skipped))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// classify turns a chunk's error into the execution's final status, or
// returns an error wrapping ErrOwnershipLost when the run lost its
// execution (then there is no status to record).
func (r *Runner) classify(ctx context.Context, rs *runState, err error, where string) (string, string, error) {
	var capErr *upstream.CapError
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, ErrOwnershipLost):
		return "", "", err
	case errors.Is(cause, ErrOwnershipLost):
		return "", "", cause
	case errors.Is(cause, ErrFenced), errors.Is(err, ErrFenced):
		// An outage is infrastructure's doing, like a drain or a reap: the
		// run stops (it does not fail) with cause database, and the resume
		// policy resumes it, so the same outage ends the same way whether it
		// outlasts the stale window (reaped) or not (fenced).
		msg := "database outage: the worker went without a successful heartbeat past its fencing threshold, so it cancelled the work in flight uncommitted; resumes from the last commit"
		if dbErr := rs.dbError(); dbErr != nil {
			msg += fmt.Sprintf(" (last database error: %v)", dbErr)
		}
		rs.cause = radartype.CauseDatabase
		return string(radartype.ExecutionStopped), msg, nil
	case ctx.Err() != nil:
		rs.cause = radartype.CauseDrain
		return string(radartype.ExecutionStopped), MessageDrainTimeout, nil
	case errors.Is(err, ErrDrained):
		rs.cause = radartype.CauseDrain
		return string(radartype.ExecutionStopped), MessageDrainedInChunk, nil
	case errors.Is(err, ErrStopRequested):
		rs.cause = radartype.CauseOperator
		return string(radartype.ExecutionStopped), MessageStopRequestedInChunk, nil
	case errors.As(err, &capErr):
		rs.cause = radartype.CauseCap
		return string(radartype.ExecutionStopped), fmt.Sprintf("daily cap of %s reached; resumes from the last commit", capErr.Provider), nil
	case errors.Is(err, upstream.ErrMaxCalls):
		rs.cause = radartype.CauseMaxCalls
		return string(radartype.ExecutionStopped), fmt.Sprintf("%v; a new request resumes from the last commit", err), nil
	default:
		return string(radartype.ExecutionFailed), fmt.Sprintf("%s: %v", where, err), nil
	}
}

// record writes the outcome in two steps, each retried until
// RecordRetryWindow has passed, so a short database outage does not leave
// the request RUNNING: first the execution's result (with the chained
// request, so a completion and its successor commit together), then the
// request and, through finishTx, its River job. If the second step cannot be
// recorded, the reconcile loop finalizes the request from the first.
//
// The first step is fenced: when the execution is no longer the run's, it
// records nothing (neither the result, nor the chained request, nor the
// request's end) and returns an error wrapping ErrOwnershipLost.
func (r *Runner) record(ctx context.Context, rs *runState, outcome *Outcome, domainRows *int64, finishTx func(context.Context, pgx.Tx, *Outcome) error) error {
	st := rs.started
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RecordRetryWindow)
	defer cancel()
	attempt := 0
	err := retryUntilDone(recordCtx, func() error {
		attempt++
		callCtx, cancel := context.WithTimeout(recordCtx, r.cfg.DBTimeout)
		defer cancel()
		return queries.InTx(callCtx, r.pool, func(tx pgx.Tx) error {
			n, err := r.queries.JobExecutionFinish(callCtx, tx, &queries.JobExecutionFinishParams{
				ID: st.exec.ID, Status: outcome.Status, ExitMessage: outcome.Message, DomainRows: domainRows,
				WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
			})
			if err != nil {
				return fmt.Errorf("error finishing execution: %w", err)
			}
			if n == 0 {
				if attempt > 1 && r.recorded(callCtx, tx, st, outcome) {
					return nil // an earlier attempt committed
				}
				return rs.lost()
			}
			if r.cfg.OutcomeHook != nil {
				r.cfg.OutcomeHook()
			}
			if st.cause != "" {
				// Recorded with the end, so the reconcile loop applies the
				// resume policy if the request's own recording is lost.
				if err := r.queries.JobExecutionSetStopCause(callCtx, tx, &queries.JobExecutionSetStopCauseParams{ID: st.exec.ID, StopCause: string(st.cause)}); err != nil {
					return fmt.Errorf("error recording stop cause: %w", err)
				}
			}
			if outcome.Status == string(radartype.ExecutionCompleted) && r.cfg.Chain != nil {
				if err := r.cfg.Chain(callCtx, tx, &Finished{
					Job: st.request.Job, RequestID: st.request.ID, ExecutionID: st.exec.ID, Params: st.request.Params,
				}); err != nil {
					return fmt.Errorf("error chaining the next job: %w", err)
				}
			}
			return nil
		})
	}, func(err error) bool { return !errors.Is(err, ErrOwnershipLost) })
	if err != nil {
		if errors.Is(err, ErrOwnershipLost) {
			return err
		}
		return fmt.Errorf("error recording the execution's outcome: %w", err)
	}
	if r.cfg.RecordHook != nil {
		r.cfg.RecordHook()
	}
	err = retryUntilDone(recordCtx, func() error {
		callCtx, cancel := context.WithTimeout(recordCtx, r.cfg.DBTimeout)
		defer cancel()
		return queries.InTx(callCtx, r.pool, func(tx pgx.Tx) error {
			finished, err := r.queries.JobRequestFinish(callCtx, tx, &queries.JobRequestFinishParams{
				ID: st.request.ID, Status: outcome.RequestStatus, Message: outcome.Message,
			})
			if err != nil {
				return fmt.Errorf("error finishing request: %w", err)
			}
			if finishTx != nil {
				if err := finishTx(callCtx, tx, outcome); err != nil {
					return err
				}
			}
			if finished > 0 && outcome.Status != string(radartype.ExecutionCompleted) && r.cfg.Resume != nil {
				// The resume (when the policy allows it) commits with the
				// stop: never a stopped run without its resume.
				if err := r.cfg.Resume(callCtx, tx, &request.Stopped{Request: st.request, ExecutionID: st.exec.ID, Cause: st.cause}); err != nil {
					return fmt.Errorf("error applying the resume policy: %w", err)
				}
			}
			return nil
		})
	}, nil)
	if err != nil {
		return fmt.Errorf("error recording the request's outcome: %w", err)
	}
	return nil
}

// recorded reports whether the execution already holds this run's outcome
// (an attempt whose commit landed although its answer was lost).
func (r *Runner) recorded(ctx context.Context, tx pgx.Tx, st *started, outcome *Outcome) bool {
	exec, err := r.queries.JobExecutionGetByID(ctx, tx, st.exec.ID)
	return err == nil && exec.WorkerID == st.exec.WorkerID && exec.LeaseEpoch == st.exec.LeaseEpoch &&
		exec.Status == outcome.Status && exec.ExitMessage == outcome.Message
}

// retryTransient calls fn, each attempt bounded by DBTimeout, until it
// succeeds or fails with an error that is not a transient database error
// (queries.IsTransient). Transient errors are retried with a capped
// backoff while the run keeps its window: until fenced closes (the process
// fenced itself: the error then wraps ErrFenced). RecordRetryWindow bounds
// the retries too: without a fence it is the window, and with one it stops
// a statement that times out every time while the database is otherwise
// up (heartbeats succeed, the fence never fires) from being retried
// forever. rs, when set, keeps the last error for the run's message and
// logs the outage once.
func (r *Runner) retryTransient(ctx context.Context, fenced <-chan struct{}, rs *runState, fn func(ctx context.Context) error) error {
	var window <-chan time.Time // from the first transient error on
	backoff := 50 * time.Millisecond
	for {
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
		err := fn(callCtx)
		cancel()
		if err == nil || ctx.Err() != nil || !queries.IsTransient(err) {
			return err
		}
		if rs != nil && rs.noteDBError(err) {
			rs.logger.WarnContext(ctx, "database unavailable; retrying inside the fencing window", slog.String("error", err.Error()))
		}
		if r.cfg.OnTransient != nil {
			r.cfg.OnTransient(err)
		}
		if window == nil {
			timer := time.NewTimer(r.cfg.RecordRetryWindow)
			defer timer.Stop()
			window = timer.C
		}
		select {
		case <-ctx.Done():
			return err
		case <-fenced:
			return fmt.Errorf("%w: %w", ErrFenced, err)
		case <-window:
			return fmt.Errorf("database errors for %s, retried in vain: %w", r.cfg.RecordRetryWindow, err)
		case <-time.After(backoff):
			backoff = min(backoff*2, time.Second)
		}
	}
}

// retryUntilDone calls fn until it succeeds, ctx ends, or retry (when set)
// says an error is final, backing off.
func retryUntilDone(ctx context.Context, fn func() error, retry func(error) bool) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || retry != nil && !retry(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
