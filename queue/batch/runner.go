package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
)

// Defaults of Config.
const (
	FanOutDefault             = 5
	RecordRetryWindowDefault  = time.Minute
	DBTimeoutDefault          = 5 * time.Second
	LeaseCheckIntervalDefault = 10 * time.Second
	// StopTimeoutDefault is the worker's drain timeout's default
	// (worker.DrainTimeoutDefault): a stop is bounded like a drain.
	StopTimeoutDefault       = 45 * time.Second
	StopCheckIntervalDefault = time.Second
)

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
	// StopTimeout is how long the calls in flight of a run whose execution
	// was asked to stop (STOPPING) may still take once the run has seen the
	// stop (BUILDRISK_STOP_TIMEOUT, by default the drain timeout); past it
	// they are cancelled and their results are not committed (see stop.go).
	StopTimeout time.Duration
	// StopCheckInterval is how often a run reads its execution's status
	// to learn of a stop while a chunk is in flight, so that a stop does
	// not wait for a commit that stalled calls never reach.
	StopCheckInterval time.Duration
	// Held tracks the requests this process holds (for the reconcile loop).
	Held *HeldSet
	// Tracer makes the execution and chunk spans; nil is a no-op tracer.
	Tracer trace.Tracer
	// Owner owns the requests the runner runs. Required.
	Owner RequestOwner
}

// RequestOwner owns the requests a Runner runs (request.Owner is the one):
// the runner owns their executions, the owner the request rows and the
// River jobs that deliver them, and the policies of a request's end (the
// chain, the resume). Claim and Started run in the transaction that
// starts a run, Finish in the one that records its end, so the execution
// and its request never disagree.
type RequestOwner interface {
	// Claim moves a QUEUED request to RUNNING for workerID, or returns
	// request.ErrNotQueued, having ended the delivery in tx (which the
	// runner then commits).
	Claim(ctx context.Context, tx pgx.Tx, requestID int64, workerID string, delivery *request.Delivery) (*queries.JobRequest, error)
	// Started records the execution a claimed request runs as, and ends
	// its delivery.
	Started(ctx context.Context, tx pgx.Tx, req *queries.JobRequest, executionID int64, delivery *request.Delivery) error
	// Finish ends the request with its run's outcome and applies the
	// policies of that end.
	Finish(ctx context.Context, tx pgx.Tx, end *request.End) (bool, error)
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.FanOut = cmp.Or(c.FanOut, FanOutDefault)
	c.RecordRetryWindow = cmp.Or(c.RecordRetryWindow, RecordRetryWindowDefault)
	c.DBTimeout = cmp.Or(c.DBTimeout, DBTimeoutDefault)
	c.LeaseCheckInterval = cmp.Or(c.LeaseCheckInterval, LeaseCheckIntervalDefault)
	c.StopTimeout = cmp.Or(c.StopTimeout, StopTimeoutDefault)
	c.StopCheckInterval = cmp.Or(c.StopCheckInterval, StopCheckIntervalDefault)
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
	case c.Owner == nil:
		return errors.New("batch: Owner is required")
	case c.FanOut < 1:
		return fmt.Errorf("batch: FanOut must be at least 1, got %d", c.FanOut)
	case c.StopTimeout < 0:
		return fmt.Errorf("batch: StopTimeout must be positive, got %s", c.StopTimeout)
	case c.StopCheckInterval < 0:
		return fmt.Errorf("batch: StopCheckInterval must be positive, got %s", c.StopCheckInterval)
	}
	return nil
}

// Runner runs requests as chunked, checkpointed executions.
type Runner struct {
	cfg     Config
	pool    *pgxpool.Pool
	queries *queries.Queries
	// drainMu guards drain, which is closed once the runner is drained
	// and replaced when it accepts runs again.
	drainMu sync.Mutex
	drain   chan struct{}
	// moved counts the database moves (failovers) the process has seen;
	// a run re-verifies its committed chunks when it changes.
	moved atomic.Uint64
	// testSignals are zero but in this package's tests (testsignals.go).
	testSignals testSignals
}

// DatabaseMoved tells the runner that the database it writes to is another
// cluster or timeline than before (a failover): every running execution
// checks, at its next chunk boundary, that the chunks it committed are
// still in the database, and does the missing ones again at once rather
// than at its end.
func (r *Runner) DatabaseMoved() { r.moved.Add(1) }

// NewRunner returns a Runner.
func NewRunner(pool *pgxpool.Pool, cfg Config) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Every line of every run, the jobs' own included, is scrubbed of the
	// provider keys: a job may log a provider's refusal that quotes one.
	cfg.Logger = slog.New(cfg.Upstream.Secrets().Handler(cfg.Logger.Handler()))
	return &Runner{cfg: cfg, pool: pool, queries: queries.New(), drain: make(chan struct{})}, nil
}

// Held returns the set of requests this runner holds.
func (r *Runner) Held() *HeldSet { return r.cfg.Held }

// Drain asks every running execution to stop at its next chunk boundary; a
// fan-out chunk (FanOutCommit) stops handing out items at once and commits
// the ones in flight. It returns at once; Run returns when the execution
// has really stopped.
func (r *Runner) Drain() {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	select {
	case <-r.drain:
	default:
		close(r.drain)
	}
}

// Undrain makes a drained runner's new runs go on again (a worker started
// again after a stop); runs drained before stay drained.
func (r *Runner) Undrain() {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	select {
	case <-r.drain:
		r.drain = make(chan struct{})
	default:
	}
}

// drained returns the channel that is closed once the runner is drained,
// as a run starting now sees it.
func (r *Runner) drained() <-chan struct{} {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	return r.drain
}

// RunOpts are one Run's options.
type RunOpts struct {
	RequestID int64
	// Delivery is the River job that delivered the request (nil: none, the
	// CLI's own request); the claim ends it.
	Delivery *request.Delivery
	// OnChunk is called after each committed chunk (the CLI prints it).
	OnChunk func(done, total int)
}

// ErrNotQueued is returned by Run when the request was no longer QUEUED
// (reaped or finalized meanwhile); nothing was run, and its delivery was
// ended.
var ErrNotQueued = request.ErrNotQueued

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

// Run claims the request, creates its execution under the job's advisory
// lock (resuming per the restart rules, with the instance's next lease
// epoch), runs the chunks and records the outcome. Errors are returned only
// when nothing could be recorded; an error wrapping ErrOwnershipLost means
// the run lost its execution and wrote nothing after noticing.
func (r *Runner) Run(ctx context.Context, opts RunOpts) (*Outcome, error) {
	held := r.cfg.Held
	held.Add(opts.RequestID) // before the claim commits: the reconcile loop never sees it unheld
	defer held.release(opts.RequestID)

	fenced := r.fenced()
	select {
	case <-fenced:
		return nil, fmt.Errorf("not starting request %d: %w", opts.RequestID, ErrFenced)
	default:
	}
	var st *started
	err := r.retryTransient(ctx, fenced, nil, func(ctx context.Context) error {
		var err error
		st, err = r.start(ctx, opts.RequestID, opts.Delivery)
		return err
	})
	if err != nil {
		return nil, err
	}
	ctx, span := r.cfg.Tracer.Start(ctx, "buildrisk.execution", trace.WithAttributes(
		attribute.String("buildrisk.job", st.request.Job),
		attribute.Int64("buildrisk.request_id", st.request.ID),
		attribute.Int64("buildrisk.execution_id", st.exec.ID),
	))
	defer span.End()
	st.items = &itemTally{instruments: r.cfg.Instruments, job: st.request.Job}
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
	defer r.settleItemCounts(ctx, rs)
	// The message is stored, answered by the API, logged and put in a span:
	// no provider key goes with it, whatever a provider's error quoted.
	message = r.cfg.Upstream.Secrets().Redact(message)
	err = r.cfg.Upstream.RedactError(err)
	if err == nil && status != radartype.ExecutionCompleted && rs.cause == "" {
		rs.cause = radartype.CauseFailure
	}
	if err == nil {
		span.SetAttributes(attribute.String("buildrisk.status", string(status)))
		if status == radartype.ExecutionFailed {
			span.SetStatus(codes.Error, message)
		}
		outcome := &Outcome{ExecutionID: st.exec.ID, Status: status, Message: message, RequestStatus: status.RequestStatus()}
		if err = r.record(ctx, rs, outcome, domainRows); err == nil {
			r.cfg.Instruments.ExecutionFinished(ctx, st.request.Job, status)
			if status == radartype.ExecutionStopped {
				r.cfg.Instruments.ExecutionStopped(ctx, st.request.Job, rs.cause)
			}
			rs.logger.InfoContext(ctx, "execution finished", slog.String("status", string(status)), slog.String("message", message))
			return outcome, nil
		}
		if !errors.Is(err, ErrOwnershipLost) {
			rs.logger.ErrorContext(ctx, "could not record the outcome; the reconcile loop will finalize it", slog.String("error", err.Error()))
			return outcome, err
		}
	}
	// Ownership lost: one line, one count, nothing more written.
	span.SetStatus(codes.Error, err.Error())
	if r.vanished(ctx, rs) {
		// Not another worker's doing: the database no longer holds the
		// execution it acknowledged (a failover to an asynchronous
		// replica). A different cause, counted and alerted apart.
		r.cfg.Instruments.CommitsLost(ctx, st.request.Job, 1)
		rs.logger.WarnContext(ctx, "the database lost this execution after acknowledging it (a failover to an asynchronous replica?): stopped, nothing more written", slog.String("error", err.Error()))
		return &Outcome{ExecutionID: st.exec.ID, Message: err.Error()}, fmt.Errorf("%w: %w", ErrExecutionVanished, err)
	}
	r.cfg.Instruments.OwnershipLost(ctx, st.request.Job)
	rs.logger.WarnContext(ctx, "ownership of the execution lost: stopped at once, the work in flight rolled back, nothing more written", slog.String("error", err.Error()))
	return &Outcome{ExecutionID: st.exec.ID, Message: err.Error()}, err
}

// ErrExecutionVanished is returned (wrapped, beside ErrOwnershipLost) by Run
// when the run's execution is no longer in the database at all: the
// database lost it after acknowledging it, as a failover to an
// asynchronous replica does. No other worker took it over.
var ErrExecutionVanished = errors.New("the database lost the execution")

// vanished reports whether the run's execution row is gone from the
// database (a read that fails says no: the loss stays ownership lost).
func (r *Runner) vanished(ctx context.Context, rs *runState) bool {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
	defer cancel()
	_, err := r.queries.JobExecutionGetByID(callCtx, r.pool, rs.exec.ID)
	return errors.Is(err, pgx.ErrNoRows)
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
func (r *Runner) execute(parent context.Context, rs *runState, opts RunOpts) (status radartype.ExecutionStatus, message string, domainRows *int64, err error) {
	st := rs.started
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopWatch := r.watch(ctx, cancel, rs)
	defer stopWatch()

	job := r.cfg.Jobs[st.request.Job]
	run := r.newRun(rs)
	// The run's unspent leases of the daily caps go back to the budget when
	// it ends, whatever the outcome.
	defer func() { _ = run.Calls.Release(context.WithoutCancel(ctx)) }()
	if ender, ok := job.(RunEnder); ok {
		defer ender.EndRun(run)
	}
	e := &execution{r: r, ctx: ctx, rs: rs, run: run, job: job}
	defer func() {
		if err == nil && status != "" {
			domainRows = r.countDomainRows(ctx, rs, job)
		}
	}()

	plan, pending, execStatus, end := e.start()
	if end != nil {
		return end.values()
	}
	chunksDone := len(plan.Chunks) - len(pending)
	// ran holds the figures this run committed, by chunk (not the results,
	// which may hold the chunk's rows): what it takes out of its tally when
	// a commit turns out lost.
	ran := make(map[string]chunkFigures, len(pending))
	lostChunks := 0
	// redo takes lost chunks back: counted, out of the tally, to do again.
	redo := func(lost []string) {
		lostChunks += len(lost)
		chunksDone -= len(lost)
		r.noteLostCommits(ctx, rs, lost, ran)
	}
	drained := r.drained()
	seenMoved := r.moved.Load()
	for {
		for i := 0; i < len(pending); i++ {
			chunk := pending[i]
			if moved := r.moved.Load(); moved != seenMoved {
				seenMoved = moved
				lost, err := r.uncommittedChunks(ctx, rs, plan, pending[i:])
				if err != nil {
					return e.fail(err, "verification after a database failover").values()
				}
				if len(lost) > 0 {
					redo(lost)
					pending = slices.Insert(pending, i, lost...)
					chunk = pending[i]
				}
			}
			if execStatus == radartype.ExecutionStopping {
				rs.cause = radartype.CauseOperator
				return radartype.ExecutionStopped, MessageStopRequested, nil, nil
			}
			select {
			case <-drained:
				rs.cause = radartype.CauseDrain
				return radartype.ExecutionStopped, MessageDrained, nil, nil
			default:
			}

			began := time.Now()
			res, status, end := e.doChunk(chunk)
			if end != nil {
				return end.values()
			}
			execStatus = status
			chunksDone++
			r.cfg.Instruments.ChunkDuration(ctx, run.Job, time.Since(began))
			st.items.count(ctx, observability.OutcomeWritten, res.Written)
			st.items.count(ctx, observability.OutcomeSkipped, res.Skipped)
			st.items.count(ctx, observability.OutcomeFailed, res.Failed)
			ran[chunk] = chunkFigures{written: res.Written, skipped: res.Skipped, failed: res.Failed}
			if opts.OnChunk != nil {
				opts.OnChunk(chunksDone, len(plan.Chunks))
			}
		}
		if execStatus == radartype.ExecutionStopping && chunksDone < len(plan.Chunks) {
			rs.cause = radartype.CauseOperator
			return radartype.ExecutionStopped, MessageStopRequested, nil, nil
		}
		// The end checks the plan against the database, not against the run's
		// memory: a commit acknowledged and then lost (a failover to an
		// asynchronous replica) leaves a planned chunk with no checkpoint, and
		// such a chunk is done again before the run may complete.
		lost, err := r.uncommittedChunks(ctx, rs, plan, nil)
		if err != nil {
			return e.fail(err, "verification").values()
		}
		if len(lost) == 0 {
			break
		}
		redo(lost)
		if lostChunks > len(plan.Chunks) {
			// Commits keep vanishing: the database is not keeping what it
			// acknowledges. Stop; the resume policy resumes the run.
			rs.cause = radartype.CauseDatabase
			return radartype.ExecutionStopped, fmt.Sprintf(
				"%d commits acknowledged by the database were lost (%s); stopped, resumes from the last commit",
				lostChunks, strings.Join(lost, ", ")), nil, nil
		}
		pending = lost
	}
	status, message, err = r.account(ctx, rs, plan, run.Job)
	if err != nil {
		return e.fail(err, "accounting").values()
	}
	if lostChunks > 0 && status == radartype.ExecutionCompleted {
		message += fmt.Sprintf("; %d lost commit(s) done again: the database lost them after acknowledging them", lostChunks)
	}
	return status, message, nil, nil
}

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

// countDomainRows is the second count of an execution that ended with a
// status: the domain rows its instance wrote, counted by the job's query
// (nil for a job without one, or when the count fails, which is logged:
// the execution is recorded without it).
func (r *Runner) countDomainRows(ctx context.Context, rs *runState, job Job) *int64 {
	counter, ok := job.(DomainRowCounter)
	if !ok {
		return nil
	}
	n, err := r.domainRows(context.WithoutCancel(ctx), counter, rs.started.exec.InstanceID)
	if err != nil {
		rs.logger.WarnContext(ctx, "could not count the domain rows", slog.String("error", err.Error()))
		return nil
	}
	return &n
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

// doChunk processes chunk and commits it, with the calls it made. It
// returns the chunk's result and the execution's status after the commit,
// or the run's ending when the chunk ends the run.
func (e *execution) doChunk(chunk string) (*ChunkResult, radartype.ExecutionStatus, *ending) {
	r, ctx, rs, st, run, job := e.r, e.ctx, e.rs, e.rs.started, e.run, e.job
	callsBefore := run.Calls.Calls()
	chunkCtx, chunkSpan := r.cfg.Tracer.Start(ctx, "buildrisk.chunk", trace.WithAttributes(attribute.String("buildrisk.chunk", chunk)))
	var res *ChunkResult
	// A transient database error inside Process (the call budget, a
	// read) is retried like the commit: the chunk is done again. And
	// before the chunk commits, the items it committed in parts must
	// still be there: a part the database lost after acknowledging
	// it is done again (Process calls only the items no part lists),
	// never folded short into the checkpoint.
	err := r.retryTransient(chunkCtx, rs.fenced, rs, func(context.Context) error {
		for round := 1; ; round++ {
			var err error
			if res, err = job.Process(chunkCtx, run, chunk); err != nil {
				return err
			}
			lost, err := r.checkParts(chunkCtx, rs, run.parts, chunk)
			if err != nil || lost == 0 {
				return err
			}
			if round > maxLostRounds {
				return fmt.Errorf("%w: %d items of chunk %s committed in parts vanished again", ErrCommitsLost, lost, chunk)
			}
		}
	})
	if err != nil {
		err = r.cfg.Upstream.RedactError(err)
		chunkSpan.SetStatus(codes.Error, err.Error())
		chunkSpan.End()
		r.countItemFailures(ctx, st, err)
		return nil, "", e.fail(err, "chunk "+chunk)
	}
	chunkCalls := run.Calls.Calls() - callsBefore
	chunkSpan.SetAttributes(
		attribute.Int64("buildrisk.targets", res.Targets), attribute.Int64("buildrisk.written", res.Written),
		attribute.Int64("buildrisk.skipped", res.Skipped), attribute.Int64("buildrisk.failed", res.Failed),
		attribute.Int64("buildrisk.external_calls", chunkCalls),
	)
	if err := r.checkChunk(ctx, run.Job, chunk, res); err != nil {
		chunkSpan.SetStatus(codes.Error, err.Error())
		chunkSpan.End()
		if flushErr := e.flushCalls(); errors.Is(flushErr, ErrOwnershipLost) {
			return nil, "", &ending{err: flushErr}
		}
		return nil, "", &ending{status: radartype.ExecutionFailed, message: err.Error()}
	}
	newCalls := run.Calls.Calls() - e.callsRecorded
	execStatus, err := r.commitChunk(ctx, rs, chunk, res, int32(chunkCalls), int32(newCalls))
	chunkSpan.End()
	if err != nil {
		return nil, "", e.fail(err, "commit of chunk "+chunk)
	}
	e.callsRecorded += newCalls
	return res, execStatus, nil
}

// maxLostRounds is how many times a run does the same work again because
// the database lost its commits before it stops (cause database): a
// database that keeps losing what it acknowledges is not one to finish on.
const maxLostRounds = 3

// ErrCommitsLost ends a run whose commits the database lost again and
// again (maxLostRounds): it stops with cause database and resumes.
var ErrCommitsLost = errors.New("the database lost acknowledged commits")

// checkParts returns how many of the items the run committed in parts of
// chunk are missing from the database (a failover to an asynchronous
// replica lost them after acknowledging them). Their items leave the run's
// tally, and the loss is counted; the items found are forgotten once all
// are there.
func (r *Runner) checkParts(ctx context.Context, rs *runState, parts *partCommitter, chunk string) (int, error) {
	keys := parts.committedIn(chunk)
	if len(keys) == 0 {
		return 0, nil
	}
	var missing []string
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		missing, err = r.queries.JobCheckpointPartMissing(callCtx, r.pool, &queries.JobCheckpointPartMissingParams{
			Items: keys, InstanceID: rs.exec.InstanceID, Chunk: chunk,
		})
		return err
	}); err != nil {
		return 0, fmt.Errorf("error checking the chunk's parts: %w", err)
	}
	parts.forget(chunk, missing)
	if len(missing) == 0 {
		return 0, nil
	}
	rs.items.lose(observability.OutcomeWritten, int64(len(missing)))
	r.cfg.Instruments.CommitsLost(ctx, rs.request.Job, 1)
	rs.logger.WarnContext(ctx, "items committed in parts are missing from the database: doing them again",
		slog.String("chunk", chunk), slog.Int("items", len(missing)))
	return len(missing), nil
}

// uncommittedChunks returns the planned chunks, except those still to do,
// that have no checkpoint, in plan order. At the start they are the chunks
// to do. After that, every chunk the run did not find committed when it
// started, and is not still to do, was committed by it since, so any it
// returns is a commit the database acknowledged and then lost, or one an
// earlier execution made and the database lost.
func (r *Runner) uncommittedChunks(ctx context.Context, rs *runState, plan *Plan, toDo []string) ([]string, error) {
	var done []string
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		done, err = r.queries.JobCheckpointListChunks(callCtx, r.pool, rs.exec.InstanceID)
		return err
	}); err != nil {
		return nil, fmt.Errorf("error reading checkpoints: %w", err)
	}
	committed := make(map[string]bool, len(done)+len(toDo))
	for _, c := range done {
		committed[c] = true
	}
	for _, c := range toDo {
		committed[c] = true // not done yet: not lost
	}
	var lost []string
	for _, c := range plan.Chunks {
		if !committed[c] {
			lost = append(lost, c)
		}
	}
	return lost, nil
}

// chunkFigures are the items a committed chunk counted, by outcome.
type chunkFigures struct{ written, skipped, failed int64 }

// noteLostCommits counts and logs the chunks whose commits were lost, and
// takes the items this run committed in them out of its tally, so the
// figures it checks at the end are what the database holds.
func (r *Runner) noteLostCommits(ctx context.Context, rs *runState, lost []string, ran map[string]chunkFigures) {
	for _, chunk := range lost {
		if figures, ok := ran[chunk]; ok {
			rs.items.lose(observability.OutcomeWritten, figures.written)
			rs.items.lose(observability.OutcomeSkipped, figures.skipped)
			rs.items.lose(observability.OutcomeFailed, figures.failed)
			delete(ran, chunk)
		}
	}
	r.cfg.Instruments.CommitsLost(ctx, rs.request.Job, int64(len(lost)))
	rs.logger.WarnContext(ctx, "committed chunks are missing from the database: doing them again",
		slog.Int("chunks", len(lost)), slog.String("first", lost[0]))
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
func (r *Runner) commitChunk(ctx context.Context, rs *runState, chunk string, res *ChunkResult, chunkCalls, newCalls int32) (radartype.ExecutionStatus, error) {
	if res.Write != nil && res.Queue != nil {
		return "", fmt.Errorf("chunk %s: a ChunkResult sets Write or Queue, not both", chunk)
	}
	var execStatus radartype.ExecutionStatus
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
			err = pgtx.InImplicitTx(callCtx, r.pool, func(b *pgx.Batch) {
				bookkeeping(b)
				if res.Queue != nil {
					res.Queue(b)
				}
			})
		} else {
			err = pgtx.InTxBatch(callCtx, r.pool, bookkeeping, func(tx pgx.Tx) error {
				if err := res.Write(callCtx, tx); err != nil {
					return fmt.Errorf("error writing chunk: %w", err)
				}
				return nil
			})
		}
		if err == nil {
			err = r.testSignals.committed(commitChunk)
		}
		switch {
		case pgtx.IsNotOwned(err):
			return rs.lost()
		case err != nil:
			return fmt.Errorf("error committing chunk: %w", err)
		}
		execStatus = radartype.ExecutionStatus(status)
		return nil
	})
	return execStatus, err
}

// committedBefore reports whether an earlier attempt of the chunk's commit
// landed although its answer was lost, with the execution's status then. A
// checkpoint of the chunk by another execution, or an execution that is no
// longer the run's, is ErrOwnershipLost.
func (r *Runner) committedBefore(ctx context.Context, rs *runState, chunk string) (bool, radartype.ExecutionStatus, error) {
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
	return err == nil, radartype.ExecutionStatus(status), err
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
