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

	"github.com/buildrisk/radar/jobs/request"
	"github.com/buildrisk/radar/jobs/upstream"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// Defaults of Config.
const (
	FanOutDefault            = 5
	RecordRetryWindowDefault = time.Minute
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
// domain rows their executions wrote: the second, independent count the
// post-mortem needed to prove a loss.
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
	// RecordRetryWindow is how long recording an outcome is retried.
	RecordRetryWindow time.Duration
	// Held tracks the requests this process holds (for the reconcile loop).
	Held *HeldSet
	// Tracer makes the execution and chunk spans; nil is a no-op tracer.
	Tracer trace.Tracer
	// RecordHook, when set, runs between recording the execution's outcome
	// and the request's; tests cut the database there.
	RecordHook func()
	// Chain runs inside the transaction that records a COMPLETED execution:
	// it inserts the next job's request there, so there is never a moment
	// where a job is done and its successor missing. An error rolls the
	// completion back (and recording retries).
	Chain ChainFunc
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

// Drain asks every running execution to stop at its next chunk boundary.
// It returns at once; Run returns when the execution has really stopped.
func (r *Runner) Drain() { r.drainOnce.Do(func() { close(r.drain) }) }

// RunOpts are one Run's options.
type RunOpts struct {
	RequestID int64
	// FinishTx runs inside the transaction that records the outcome; the
	// worker completes its River job there so both commit together.
	FinishTx func(ctx context.Context, tx pgx.Tx) error
	// OnChunk is called after each committed chunk (the CLI prints it).
	OnChunk func(done, total int)
}

// Outcome is how a Run ended.
type Outcome struct {
	ExecutionID   int64
	Status        string // execution status, "" when the request was not runnable
	RequestStatus string
	Message       string
}

// ErrNotQueued is returned by Run when the request was no longer QUEUED
// (reaped or finalized meanwhile); nothing was run.
var ErrNotQueued = errors.New("request is no longer queued")

type started struct {
	request  *queries.JobRequest
	exec     *queries.JobExecution
	resumed  bool
	maxCalls int
}

// Run claims the request, creates its execution under the job's advisory
// lock (resuming per the restart rules), runs the chunks and records the
// outcome. Errors are returned only when nothing could be recorded.
func (r *Runner) Run(ctx context.Context, opts RunOpts) (*Outcome, error) {
	held := r.cfg.Held
	held.Add(opts.RequestID) // before the claim commits: the reconcile loop never sees it unheld
	defer held.Remove(opts.RequestID)

	st, err := r.start(ctx, opts.RequestID)
	if err != nil {
		if errors.Is(err, ErrNotQueued) && opts.FinishTx != nil {
			recordErr := queries.InTx(context.WithoutCancel(ctx), r.pool, func(tx pgx.Tx) error { return opts.FinishTx(context.WithoutCancel(ctx), tx) })
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
	logger := r.cfg.Logger.With(
		slog.Int64("request_id", st.request.ID),
		slog.Int64("execution_id", st.exec.ID),
		slog.String("job", st.request.Job),
		slog.String("worker_id", r.cfg.WorkerID),
	)
	if st.request.ClaimedAt != nil {
		r.cfg.Instruments.RequestStartLatency(ctx, st.request.Job, st.request.ClaimedAt.Sub(st.request.CreatedAt))
	}
	logger.InfoContext(ctx, "execution started", slog.Bool("resumed", st.resumed))

	status, message, domainRows := r.execute(ctx, st, logger, opts)
	span.SetAttributes(attribute.String("buildrisk.status", status))
	if status == request.ExecutionFailed {
		span.SetStatus(codes.Error, message)
	}
	outcome := &Outcome{ExecutionID: st.exec.ID, Status: status, Message: message, RequestStatus: request.StatusForExecution(status)}
	if err := r.record(ctx, st, outcome, domainRows, opts.FinishTx); err != nil {
		logger.ErrorContext(ctx, "could not record the outcome; the reconcile loop will finalize it", slog.String("error", err.Error()))
		return outcome, err
	}
	r.cfg.Instruments.ExecutionFinished(ctx, st.request.Job, status)
	logger.InfoContext(ctx, "execution finished", slog.String("status", status), slog.String("message", message))
	return outcome, nil
}

// start claims the request and creates the execution in one transaction
// under the job's advisory lock, so a CLI run and a worker can never start
// the same job at once.
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
			return fmt.Errorf("job %q is not registered in this process", req.Job)
		}
		running, err := r.queries.JobExecutionRunningByJob(ctx, tx, req.Job)
		if err := queries.Interpret(err); err == nil {
			return fmt.Errorf("job %s: execution %d is still %s", req.Job, running.ID, running.Status)
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
		st.exec, err = r.queries.JobExecutionInsert(ctx, tx, &queries.JobExecutionInsertParams{
			InstanceID: instanceID, Job: req.Job, RequestID: req.ID, WorkerID: r.cfg.WorkerID,
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

// execute runs the chunks and decides the execution's final status.
func (r *Runner) execute(ctx context.Context, st *started, logger *slog.Logger, opts RunOpts) (status, message string, domainRows *int64) {
	job := r.cfg.Jobs[st.request.Job]
	run := &Run{
		Job:         st.request.Job,
		RequestID:   st.request.ID,
		ExecutionID: st.exec.ID,
		InstanceID:  st.exec.InstanceID,
		Params:      st.request.Params,
		Calls:       r.cfg.Upstream.NewCaller(st.request.Job, st.maxCalls),
		DB:          r.pool,
		Logger:      logger,
		FanOut:      r.cfg.FanOut,
		Instruments: r.cfg.Instruments,
	}
	// The run's unspent leases of the daily caps go back to the budget when
	// it ends, whatever the outcome.
	defer func() { _ = run.Calls.Release(context.WithoutCancel(ctx)) }()
	if ender, ok := job.(RunEnder); ok {
		defer ender.EndRun(run)
	}
	callsRecorded := int64(0)
	flushCalls := func() {
		if n := run.Calls.Calls() - callsRecorded; n > 0 {
			_ = r.queries.JobExecutionAddCalls(context.WithoutCancel(ctx), r.pool, &queries.JobExecutionAddCallsParams{ID: st.exec.ID, ExternalCalls: int32(n)})
			callsRecorded += n
		}
	}
	defer func() {
		if counter, ok := job.(DomainRowCounter); ok {
			ids, err := r.queries.JobExecutionIDsByInstance(context.WithoutCancel(ctx), r.pool, st.exec.InstanceID)
			if err == nil {
				if n, err := counter.DomainRows(context.WithoutCancel(ctx), r.pool, ids); err == nil {
					domainRows = &n
				}
			}
		}
	}()

	plan, err := job.Plan(ctx, run)
	if err != nil {
		flushCalls()
		return r.classify(ctx, err, "plan")
	}
	done, err := r.queries.JobCheckpointListChunks(ctx, r.pool, st.exec.InstanceID)
	if err != nil {
		return request.ExecutionFailed, fmt.Sprintf("error reading checkpoints: %v", err), nil
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
	execStatus, err := r.queries.JobExecutionStart(ctx, r.pool, &queries.JobExecutionStartParams{
		ID: st.exec.ID, ChunksTotal: int32(len(plan.Chunks)), ChunksDone: int32(chunksDone), Targets: plan.Targets,
	})
	if err != nil {
		return r.classify(ctx, err, "start")
	}
	for _, chunk := range plan.Chunks {
		if committed[chunk] {
			continue
		}
		if execStatus == request.ExecutionStopping {
			return request.ExecutionStopped, MessageStopRequested, nil
		}
		select {
		case <-r.drain:
			return request.ExecutionStopped, MessageDrained, nil
		default:
		}

		began := time.Now()
		callsBefore := run.Calls.Calls()
		chunkCtx, chunkSpan := r.cfg.Tracer.Start(ctx, "buildrisk.chunk", trace.WithAttributes(attribute.String("buildrisk.chunk", chunk)))
		res, err := job.Process(chunkCtx, run, chunk)
		if err != nil {
			chunkSpan.SetStatus(codes.Error, err.Error())
			chunkSpan.End()
			flushCalls()
			return r.classify(ctx, err, "chunk "+chunk)
		}
		chunkSpan.SetAttributes(
			attribute.Int64("buildrisk.targets", res.Targets), attribute.Int64("buildrisk.written", res.Written),
			attribute.Int64("buildrisk.skipped", res.Skipped), attribute.Int64("buildrisk.failed", res.Failed),
			attribute.Int64("buildrisk.external_calls", run.Calls.Calls()-callsBefore),
		)
		chunkCalls := run.Calls.Calls() - callsBefore
		if res.Targets != res.Written+res.Skipped+res.Failed {
			r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeUnaccounted, abs(res.Targets-(res.Written+res.Skipped+res.Failed)))
		}
		err = queries.InTx(ctx, r.pool, func(tx pgx.Tx) error {
			if res.Write != nil {
				if err := res.Write(ctx, tx); err != nil {
					return fmt.Errorf("error writing chunk: %w", err)
				}
			}
			if err := r.queries.JobCheckpointInsert(ctx, tx, &queries.JobCheckpointInsertParams{
				InstanceID: st.exec.InstanceID, Chunk: chunk, ExecutionID: st.exec.ID,
				Targets: res.Targets, Written: res.Written, Skipped: res.Skipped, Failed: res.Failed,
				SkipReason: res.SkipReason, ExternalCalls: int32(chunkCalls),
			}); err != nil {
				return fmt.Errorf("error writing checkpoint: %w", err)
			}
			execStatus, err = r.queries.JobExecutionChunkCommitted(ctx, tx, &queries.JobExecutionChunkCommittedParams{
				ID: st.exec.ID, Written: res.Written, Skipped: res.Skipped, Failed: res.Failed, ExternalCalls: int32(run.Calls.Calls() - callsRecorded),
			})
			return err
		})
		chunkSpan.End()
		if err != nil {
			flushCalls()
			return r.classify(ctx, err, "commit of chunk "+chunk)
		}
		callsRecorded = run.Calls.Calls()
		chunksDone++
		r.cfg.Instruments.ChunkDuration(ctx, run.Job, time.Since(began))
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeWritten, res.Written)
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeSkipped, res.Skipped)
		r.cfg.Instruments.ItemsCounted(ctx, run.Job, observability.OutcomeFailed, res.Failed)
		if opts.OnChunk != nil {
			opts.OnChunk(chunksDone, len(plan.Chunks))
		}
	}
	if execStatus == request.ExecutionStopping && chunksDone < len(plan.Chunks) {
		return request.ExecutionStopped, MessageStopRequested, nil
	}
	return r.account(ctx, st, plan, run.Job)
}

// account refuses a silent success: every declared target must be written,
// skipped or failed, or the execution ends FAILED.
func (r *Runner) account(ctx context.Context, st *started, plan *Plan, job string) (string, string, *int64) {
	totals, err := r.queries.JobCheckpointTotals(ctx, r.pool, st.exec.InstanceID)
	if err != nil {
		return r.classify(ctx, err, "accounting")
	}
	targets := totals.Targets
	if plan.Targets != TargetsUnknown {
		targets = plan.Targets
	}
	accounted := totals.Written + totals.Skipped + totals.Failed
	if unaccounted := abs(targets - accounted); unaccounted != 0 {
		// Chunks whose own items did not add up were counted as they
		// committed; count here only the gap between the declared targets
		// and what the chunks took on.
		if gap := abs(targets - totals.Targets); gap != 0 {
			r.cfg.Instruments.ItemsCounted(ctx, job, observability.OutcomeUnaccounted, gap)
		}
		return request.ExecutionFailed, fmt.Sprintf("unaccounted: %d of %d targets (written %d, skipped %d, failed %d)",
			unaccounted, targets, totals.Written, totals.Skipped, totals.Failed), nil
	}
	return request.ExecutionCompleted, fmt.Sprintf("completed: %d targets (written %d, skipped %d%s, failed %d)",
		targets, totals.Written, totals.Skipped, r.skipReasons(ctx, st.exec.InstanceID), totals.Failed), nil
}

// skipReasons renders skipped items by reason: " (holiday: 100)".
func (r *Runner) skipReasons(ctx context.Context, instanceID int64) string {
	rows, err := r.queries.JobCheckpointSkipReasons(ctx, r.pool, instanceID)
	if err != nil || len(rows) == 0 {
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

// classify turns a chunk's error into the execution's final status.
func (r *Runner) classify(ctx context.Context, err error, where string) (string, string, *int64) {
	var capErr *upstream.CapError
	switch {
	case ctx.Err() != nil:
		return request.ExecutionStopped, MessageDrainTimeout, nil
	case errors.As(err, &capErr):
		return request.ExecutionStopped, fmt.Sprintf("daily cap of %s reached; resumes from the last commit", capErr.Provider), nil
	case errors.Is(err, upstream.ErrMaxCalls):
		return request.ExecutionStopped, fmt.Sprintf("%v; a new request resumes from the last commit", err), nil
	default:
		return request.ExecutionFailed, fmt.Sprintf("%s: %v", where, err), nil
	}
}

// record writes the outcome in two steps, each retried until
// RecordRetryWindow has passed, so a short database outage does not leave
// the request RUNNING: first the execution's result (with the chained
// request, so a completion and its successor commit together), then the
// request and, through finishTx, its River job. If the second step cannot be
// recorded, the reconcile loop finalizes the request from the first.
func (r *Runner) record(ctx context.Context, st *started, outcome *Outcome, domainRows *int64, finishTx func(context.Context, pgx.Tx) error) error {
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RecordRetryWindow)
	defer cancel()
	err := retryUntilDone(recordCtx, func() error {
		return queries.InTx(recordCtx, r.pool, func(tx pgx.Tx) error {
			if _, err := r.queries.JobExecutionFinish(recordCtx, tx, &queries.JobExecutionFinishParams{
				ID: st.exec.ID, Status: outcome.Status, ExitMessage: outcome.Message, DomainRows: domainRows,
			}); err != nil {
				return fmt.Errorf("error finishing execution: %w", err)
			}
			if outcome.Status == request.ExecutionCompleted && r.cfg.Chain != nil {
				if err := r.cfg.Chain(recordCtx, tx, &Finished{
					Job: st.request.Job, RequestID: st.request.ID, ExecutionID: st.exec.ID, Params: st.request.Params,
				}); err != nil {
					return fmt.Errorf("error chaining the next job: %w", err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("error recording the execution's outcome: %w", err)
	}
	if r.cfg.RecordHook != nil {
		r.cfg.RecordHook()
	}
	err = retryUntilDone(recordCtx, func() error {
		return queries.InTx(recordCtx, r.pool, func(tx pgx.Tx) error {
			if _, err := r.queries.JobRequestFinish(recordCtx, tx, &queries.JobRequestFinishParams{
				ID: st.request.ID, Status: outcome.RequestStatus, Message: outcome.Message,
			}); err != nil {
				return fmt.Errorf("error finishing request: %w", err)
			}
			if finishTx != nil {
				return finishTx(recordCtx, tx)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("error recording the request's outcome: %w", err)
	}
	return nil
}

// retryUntilDone calls fn until it succeeds or ctx ends, backing off.
func retryUntilDone(ctx context.Context, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
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
