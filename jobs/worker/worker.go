// Package worker is the worker role: a River client that claims job requests
// and runs them through the batch runner, the worker registry with its
// heartbeats, the reaper that frees jobs held by dead workers, the reconcile
// loop, and graceful drain.
//
// It must not know about HTTP beyond its admin health endpoints.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/batch"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// Defaults of Config (the contract's values).
const (
	HeartbeatIntervalDefault = 10 * time.Second
	StaleAfterDefault        = 60 * time.Second
	ReapIntervalDefault      = 30 * time.Second
	DrainTimeoutDefault      = 45 * time.Second
	ReconcileIntervalDefault = 30 * time.Second
	// RetentionDefault is how long the registry keeps the row of a worker
	// that stopped beating.
	RetentionDefault         = 7 * 24 * time.Hour
	MaxConcurrentJobsDefault = 10
	// FetchCooldownDefault is River's minimum spacing of fetches, and of
	// the insert notifications this worker's client sends (chains,
	// schedules): River rate-limits an inserting client's NOTIFYs by its
	// FetchCooldown, so a longer one leaves back-to-back requests waiting
	// for the poll.
	FetchCooldownDefault = river.FetchCooldownMin
	// FetchPollIntervalDefault is River's fallback poll, for inserts whose
	// notification was lost.
	FetchPollIntervalDefault = 500 * time.Millisecond
)

// Worker statuses reported in the registry.
const (
	StatusRunning  = "running"
	StatusDraining = "draining"
	StatusStopped  = "stopped"
)

// Config configures a Worker.
type Config struct {
	// ID is `pid@hostname#boot`. Required (see NewID).
	ID string
	// Hostname and PID are the slot the ID was made from.
	Hostname string
	PID      int
	// Boot is the random part of ID.
	Boot string
	// Version is reported in the registry.
	Version string
	// ConfiguredKeys are the NAMES of the provider keys this worker holds.
	ConfiguredKeys []string

	HeartbeatInterval time.Duration
	StaleAfter        time.Duration
	ReapInterval      time.Duration
	DrainTimeout      time.Duration
	ReconcileInterval time.Duration
	// Retention is how long a silent worker's registry row is kept (it
	// must exceed StaleAfter); the reap loop deletes older rows that hold
	// no active request. Default RetentionDefault.
	Retention time.Duration
	// MaxConcurrentJobs bounds how many requests this process runs at once.
	MaxConcurrentJobs int
	// FetchCooldown and FetchPollInterval are River's; defaults
	// FetchCooldownDefault and FetchPollIntervalDefault.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// DisableReaper turns the periodic reaper off (tests show that the
	// API's cleanup-before-enqueue alone frees a job).
	DisableReaper bool

	Instruments *observability.Instruments
	Logger      *slog.Logger
	// RiverPlugins are added to the River client (otelriver).
	RiverPlugins []rivertype.Plugin
	// Schedules are the jobs requested periodically; only River's elected
	// leader inserts their ticks, so one tick is one request cluster-wide.
	Schedules []Schedule
	// ScheduleEnqueue inserts a tick's request (required with Schedules).
	ScheduleEnqueue ScheduleEnqueueFunc
	// Gauges, when set, are recorded on every heartbeat.
	Gauges *Gauges
	// HeartbeatPool, when set, carries the registry's heartbeats and status
	// changes, so that they never wait for a connection behind chunk work
	// on the main pool. Nil uses the main pool.
	HeartbeatPool *pgxpool.Pool
}

func (c Config) withDefaults() Config {
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	c.ReapInterval = cmp.Or(c.ReapInterval, ReapIntervalDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.MaxConcurrentJobs = cmp.Or(c.MaxConcurrentJobs, MaxConcurrentJobsDefault)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, FetchCooldownDefault)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, FetchPollIntervalDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.ConfiguredKeys == nil {
		c.ConfiguredKeys = []string{}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.ID == "" || c.Hostname == "" || c.Boot == "":
		return errors.New("worker: ID, Hostname and Boot are required")
	case c.Instruments == nil:
		return errors.New("worker: Instruments is required")
	case c.StaleAfter <= c.HeartbeatInterval:
		return fmt.Errorf("worker: StaleAfter (%s) must exceed HeartbeatInterval (%s)", c.StaleAfter, c.HeartbeatInterval)
	case c.Retention <= c.StaleAfter:
		return fmt.Errorf("worker: Retention (%s) must exceed StaleAfter (%s)", c.Retention, c.StaleAfter)
	}
	return nil
}

// Worker is one worker process's machinery.
type Worker struct {
	cfg    Config
	pool   *pgxpool.Pool
	runner *batch.Runner
	river  *river.Client[pgx.Tx]
	reaper *Reaper

	schedules map[string]Schedule

	mu       sync.Mutex
	presence *Presence // nil until Start registers the worker
	cancel   context.CancelFunc
	loops    sync.WaitGroup
}

// New returns a Worker that runs requests with runner.
func New(pool *pgxpool.Pool, runner *batch.Runner, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, pool: pool, runner: runner}
	w.reaper = NewReaper(pool, ReaperConfig{StaleAfter: cfg.StaleAfter, Instruments: cfg.Instruments, Logger: cfg.Logger})

	w.schedules = map[string]Schedule{}
	for _, sched := range cfg.Schedules {
		w.schedules[sched.Job] = sched
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &runWorker{w: w}); err != nil {
		return nil, fmt.Errorf("error registering river worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &scheduleWorker{w: w}); err != nil {
		return nil, fmt.Errorf("error registering schedule worker: %w", err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                  cfg.ID,
		Queues:              map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxConcurrentJobs}},
		Workers:             workers,
		FetchCooldown:       cfg.FetchCooldown,
		FetchPollInterval:   cfg.FetchPollInterval,
		FetchOnlyKnownKinds: true,
		JobTimeout:          -1, // a job runs as long as its chunks; dead workers are handled by the reaper
		Logger:              cfg.Logger,
		Plugins:             cfg.RiverPlugins,
		PeriodicJobs:        periodicJobs(cfg.Schedules),
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river client: %w", err)
	}
	w.river = client
	return w, nil
}

// River returns the worker's River client (schedules insert through it).
func (w *Worker) River() *river.Client[pgx.Tx] { return w.river }

// ID returns the worker id.
func (w *Worker) ID() string { return w.cfg.ID }

// Status returns running, draining or stopped (running before Start).
func (w *Worker) Status() string {
	if p := w.registration(); p != nil {
		return p.Status()
	}
	return StatusRunning
}

func (w *Worker) registration() *Presence {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.presence
}

// Ready reports whether the worker is registered, not draining, and its
// database answers.
func (w *Worker) Ready(ctx context.Context) error {
	p := w.registration()
	if p == nil {
		return errors.New("not registered yet")
	}
	if status := p.Status(); status != StatusRunning {
		return fmt.Errorf("worker is %s", status)
	}
	if err := w.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	return nil
}

// Start registers the worker, cleans up what the previous boot of the same
// slot left RUNNING, and starts claiming requests, heartbeating, reaping
// and reconciling. ctx bounds the background loops.
func (w *Worker) Start(ctx context.Context) error {
	presence, err := StartPresence(ctx, cmp.Or(w.cfg.HeartbeatPool, w.pool), w.cfg)
	if err != nil {
		return err
	}
	if n, err := w.reaper.CleanupPreviousBoots(ctx, w.cfg.Hostname, w.cfg.PID, w.cfg.ID); err != nil {
		presence.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("error cleaning up previous boots: %w", err)
	} else if n > 0 {
		w.cfg.Logger.InfoContext(ctx, "finalized requests of a previous boot of this slot", slog.Int("requests", n))
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.cancel = cancel
	w.presence = presence
	w.mu.Unlock()

	if w.cfg.Gauges != nil {
		_ = w.cfg.Gauges.Record(ctx)
		w.loop(loopCtx, w.cfg.HeartbeatInterval, "gauges", w.cfg.Gauges.Record)
	}
	if !w.cfg.DisableReaper {
		w.loop(loopCtx, w.cfg.ReapInterval, "reap", func(ctx context.Context) error {
			if _, err := w.reaper.Reap(ctx, ""); err != nil {
				return err
			}
			return w.deleteExpiredWorkers(ctx)
		})
	}
	w.loop(loopCtx, w.cfg.ReconcileInterval, "reconcile", func(ctx context.Context) error {
		_, err := w.Reconcile(ctx)
		return err
	})
	// River's fetch and work contexts derive from this one; drain stops the
	// client explicitly, so a cancelled ctx must not hard-cancel jobs.
	if err := w.river.Start(context.WithoutCancel(ctx)); err != nil {
		cancel()
		w.loops.Wait()
		presence.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("error starting river client: %w", err)
	}
	w.cfg.Logger.InfoContext(ctx, "worker started", slog.String("worker_id", w.cfg.ID), slog.Any("configured_keys", w.cfg.ConfiguredKeys))
	return nil
}

// Drain stops claiming, asks every running job to stop at its next chunk
// boundary and waits up to DrainTimeout; past it, jobs are cancelled (the
// chunk in flight rolls back, the execution is still recorded STOPPED).
// Pools, caches and telemetry must be closed only after Drain returns.
func (w *Worker) Drain(ctx context.Context) error {
	presence := w.registration()
	if presence != nil {
		presence.SetStatus(ctx, StatusDraining)
	}
	w.runner.Drain()
	softCtx, cancel := context.WithTimeout(ctx, w.cfg.DrainTimeout)
	defer cancel()
	err := w.river.Stop(softCtx)
	if err != nil {
		w.cfg.Logger.WarnContext(ctx, "drain timeout reached; cancelling running jobs", slog.Duration("drain_timeout", w.cfg.DrainTimeout))
		hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancelHard()
		err = w.river.StopAndCancel(hardCtx)
	}
	w.mu.Lock()
	cancelLoops := w.cancel
	w.mu.Unlock()
	if cancelLoops != nil {
		cancelLoops()
	}
	w.loops.Wait()
	if presence != nil {
		presence.Stop(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("error stopping river client: %w", err)
	}
	return nil
}

// deleteExpiredWorkers removes the registry rows of workers silent for
// longer than Retention (after the reaper has freed what they held).
func (w *Worker) deleteExpiredWorkers(ctx context.Context) error {
	n, err := queries.New().WorkerDeleteExpired(ctx, w.pool, w.cfg.Retention.Seconds())
	if err != nil {
		return fmt.Errorf("error deleting expired worker rows: %w", err)
	}
	if n > 0 {
		w.cfg.Logger.InfoContext(ctx, "deleted the registry rows of long-gone workers", slog.Int64("workers", n), slog.Duration("retention", w.cfg.Retention))
	}
	return nil
}

// loop runs fn every interval until ctx ends, logging failures as one line.
func (w *Worker) loop(ctx context.Context, interval time.Duration, name string, fn func(context.Context) error) {
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				if err := fn(ctx); err != nil && ctx.Err() == nil {
					w.cfg.Logger.WarnContext(ctx, name+" failed", slog.String("error", err.Error()))
				}
			}
		}
	}()
}

// runWorker is the single River worker: every job kind runs through it.
type runWorker struct {
	river.WorkerDefaults[jobs.RunArgs]
	w *Worker
}

// Timeout disables River's per-job timeout: chunks bound the work, and the
// reaper handles dead workers.
func (rw *runWorker) Timeout(*river.Job[jobs.RunArgs]) time.Duration { return -1 }

// Work runs one request. The River job is completed in the transaction that
// records the outcome, so a request and its River job end together.
func (rw *runWorker) Work(ctx context.Context, job *river.Job[jobs.RunArgs]) error {
	finishTx := func(ctx context.Context, tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		if errors.Is(err, rivertype.ErrNotFound) {
			return nil // finalized meanwhile (reaped): nothing left to complete
		}
		return err
	}
	// Continue the trace of the request's insert (the API's POST): the run's
	// spans become its children, so one trace shows enqueue → run.
	if parent := enqueueSpanContext(job.Metadata); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	_, err := rw.w.runner.Run(ctx, batch.RunOpts{RequestID: job.Args.RequestID, FinishTx: finishTx})
	if errors.Is(err, batch.ErrNotQueued) {
		return nil
	}
	if err != nil {
		// Returning the error would let River retry or rescue: the request
		// is recorded (or left to the reconcile loop), so cancel the job.
		return river.JobCancel(err)
	}
	return nil
}

// enqueueSpanContext reads the W3C trace context otelriver stored in the
// job's metadata when it was inserted.
func enqueueSpanContext(metadata []byte) trace.SpanContext {
	var meta map[string]any
	if err := json.Unmarshal(metadata, &meta); err != nil {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{}
	for k, v := range meta {
		if s, ok := v.(string); ok {
			carrier[k] = s
		}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}
