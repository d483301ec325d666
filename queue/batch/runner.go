package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// ForecastIntervalDefault is how often a run records the forecast of
	// its end.
	ForecastIntervalDefault = 5 * time.Second
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
	// Providers maps each job to the provider it calls (none: absent); a
	// run forecasts its end in that provider's calls (see forecast.go).
	Providers map[string]upstream.Provider
	// ForecastInterval is how often a run records the forecast of its end;
	// ForecastWindow is the span of recent progress the forecast's pace is
	// measured over (forecast.WindowDefault when 0).
	ForecastInterval time.Duration
	ForecastWindow   time.Duration
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
	c.ForecastInterval = cmp.Or(c.ForecastInterval, ForecastIntervalDefault)
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
	case c.ForecastInterval < 0 || c.ForecastWindow < 0:
		return fmt.Errorf("batch: ForecastInterval and ForecastWindow must be positive, got %s and %s", c.ForecastInterval, c.ForecastWindow)
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
