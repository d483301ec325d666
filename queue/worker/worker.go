// Package worker is the worker role: a River client that claims job requests
// and runs them through the batch runner, the worker registry with its
// heartbeats, the reaper that frees jobs held by dead workers, the reconcile
// loop, the scheduler (its passes are River periodic jobs, inserted by
// River's elected leader; its state is in the database), and graceful
// drain.
//
// It must not know about HTTP beyond its admin health endpoints.
package worker

import (
	"cmp"
	"context"
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

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/radartype"
)

// Worker is one worker process's machinery.
type Worker struct {
	cfg   Config
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	// owner owns the requests the worker runs, enqueues and reaps; runner
	// runs them.
	owner  *request.Owner
	runner *batch.Runner
	// scheduler is nil without schedules.
	scheduler *Scheduler
	// leading is closed once River made this worker its leader.
	leading  chan struct{}
	leadOnce sync.Once

	mu       sync.Mutex
	presence *Presence // nil until Start registers the worker
	// services are the background loops Start started (gauges, reaper,
	// reconcile); Stop stops them.
	services []*service.Service
	// unwatch ends the runner's subscription to the database's moves.
	unwatch func()
}

// New returns a Worker: its River client, the request owner that inserts
// and ends River jobs through that client, and the runner that runs the
// client's jobs and ends their requests through the owner. The three need
// each other (River's client is built with the workers that run its jobs,
// those run the runner, the runner's runs end through the owner, and the
// owner inserts through the client), so they are built here together, in
// that order: the River worker reads the runner only when the client works
// a job, after New has returned.
func New(pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, pool: pool, leading: make(chan struct{})}
	client, err := w.newRiverClient(pool)
	if err != nil {
		return nil, err
	}
	owner, err := request.NewOwner(pool, client, cfg.Requests)
	if err != nil {
		return nil, err
	}
	runnerCfg := cfg.Runner
	runnerCfg.Owner, runnerCfg.Fence = owner, w
	runner, err := batch.NewRunner(pool, runnerCfg)
	if err != nil {
		return nil, err
	}
	w.river, w.owner, w.runner = client, owner, runner
	if len(cfg.Schedules) > 0 {
		if w.scheduler, err = NewScheduler(pool, SchedulerConfig{
			Schedules: cfg.Schedules, Enqueuer: owner, Now: cfg.Now, Instruments: cfg.Instruments, Logger: cfg.Logger,
		}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// newRiverClient makes the worker's River client: its runs' queue and, with
// schedules, the scheduler passes' queue and periodic job. Its workers hold
// w and read its runner and scheduler only once the client runs, after New
// has built them.
func (w *Worker) newRiverClient(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
	cfg := w.cfg
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &runWorker{w: w}); err != nil {
		return nil, fmt.Errorf("error registering river worker: %w", err)
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxConcurrentJobs}}
	var periodic []*river.PeriodicJob
	if len(cfg.Schedules) > 0 {
		if err := river.AddWorkerSafely(workers, &schedulePassWorker{w: w}); err != nil {
			return nil, fmt.Errorf("error registering river worker: %w", err)
		}
		queues[ScheduleQueue] = river.QueueConfig{MaxWorkers: 1}
		periodic = append(periodic, w.schedulePeriodicJob())
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                  cfg.ID,
		Queues:              queues,
		Workers:             workers,
		PeriodicJobs:        periodic,
		Hooks:               []rivertype.Hook{w.leaderHook()},
		FetchCooldown:       cfg.FetchCooldown,
		FetchPollInterval:   cfg.FetchPollInterval,
		FetchOnlyKnownKinds: true,
		JobTimeout:          -1, // a job runs as long as its chunks; dead workers are handled by the reaper
		// River's rescuer finalizes a job River still shows running after
		// this long only when it was cancelled (JobCancelTx of a dead
		// worker's job) or, for a scheduler pass, timed out: runs have no
		// timeout, so a live run is never rescued.
		RescueStuckJobsAfter:   cfg.StaleAfter + cfg.SchedulePassTimeout,
		Logger:                 observability.NewRiverLogger(cfg.Logger, observability.RiverRepeatIntervalDefault, nil),
		Plugins:                cfg.RiverPlugins,
		PollOnly:               cfg.PollOnly,
		LeaderElectionDisabled: cfg.LeaderElectionDisabled,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river client: %w", err)
	}
	return client, nil
}

// Owner returns the worker's request owner.
func (w *Worker) Owner() *request.Owner { return w.owner }

// Runner returns the batch runner the worker runs requests with.
func (w *Worker) Runner() *batch.Runner { return w.runner }

// River returns the worker's River client, the one that works its queues
// (its reaper cancels a dead worker's River jobs through it).
func (w *Worker) River() *river.Client[pgx.Tx] { return w.river }

// ID returns the worker id.
func (w *Worker) ID() string { return w.cfg.ID }

// reconcile is the reconcile loop's pass: the outcomes this worker's runs
// could not record yet first, then the requests it no longer holds.
func (w *Worker) reconcile(ctx context.Context) error {
	_, pendingErr := w.runner.RecordPending(ctx)
	_, err := w.owner.Reconcile(ctx, w.cfg.ID, w.runner.Held())
	return errors.Join(pendingErr, err)
}

// Status returns running, draining or stopped (running before Start).
func (w *Worker) Status() radartype.WorkerStatus {
	if p := w.registration(); p != nil {
		return p.Status()
	}
	return radartype.WorkerRunning
}

func (w *Worker) registration() *Presence {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.presence
}

// Fenced implements batch.Fence with the worker's presence: its channel is
// closed while the worker is fenced (nil, never closed, before Start).
func (w *Worker) Fenced() <-chan struct{} {
	if p := w.registration(); p != nil {
		return p.Fenced()
	}
	return nil
}

// Ready reports whether the worker is registered, not fenced, not
// draining, and its database answers.
func (w *Worker) Ready(ctx context.Context) error {
	p := w.registration()
	if p == nil {
		return errors.New("not registered yet")
	}
	if err := p.FenceError(); err != nil {
		return err
	}
	if status := p.Status(); status != radartype.WorkerRunning {
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
	w.runner.Undrain() // a worker started again after a stop runs again
	presence, err := StartPresence(ctx, cmp.Or(w.cfg.HeartbeatPool, w.pool), w.cfg)
	if err != nil {
		return err
	}
	if n, err := w.owner.CleanupPreviousBoots(ctx, w.cfg.Hostname, w.cfg.PID, w.cfg.ID); err != nil {
		presence.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("error cleaning up previous boots: %w", err)
	} else if n > 0 {
		w.cfg.Logger.InfoContext(ctx, "finalized requests of a previous boot of this slot", slog.Int("requests", n))
	}
	var services []*service.Service
	if w.cfg.Gauges != nil {
		if err := w.recordGauges(ctx); err != nil {
			w.cfg.Logger.WarnContext(ctx, "gauges failed", slog.String("error", err.Error()))
		}
		services = append(services, w.service("gauges", w.cfg.HeartbeatInterval, w.recordGauges))
	}
	if !w.cfg.DisableReaper {
		services = append(services, w.service("reap", w.cfg.ReapInterval, func(ctx context.Context) error {
			if _, err := w.owner.Reap(ctx, ""); err != nil {
				return err
			}
			if err := w.deleteExpiredWorkers(ctx); err != nil {
				return err
			}
			return w.deleteExpiredIdempotencyKeys(ctx)
		}))
	}
	services = append(services, w.service("reconcile", w.cfg.ReconcileInterval, w.reconcile))
	// A failover makes every running execution check that its committed
	// chunks survived it, at its next chunk boundary.
	unwatch := w.cfg.DatabaseWatch.Subscribe(func(DatabaseMove) { w.runner.DatabaseMoved() })
	w.mu.Lock()
	w.presence = presence
	w.services = services
	w.unwatch = unwatch
	w.mu.Unlock()
	for _, s := range services {
		s.Start(context.WithoutCancel(ctx))
	}
	// River's fetch and work contexts derive from this one; drain stops the
	// client explicitly, so a cancelled ctx must not hard-cancel jobs.
	if err := w.river.Start(context.WithoutCancel(ctx)); err != nil {
		w.stopServices()
		presence.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("error starting river client: %w", err)
	}
	w.cfg.Logger.InfoContext(ctx, "worker started", slog.String("worker_id", w.cfg.ID), slog.Any("configured_keys", w.cfg.ConfiguredKeys))
	return nil
}

// Stop drains the worker: it stops claiming, asks every running job to
// stop at its next chunk boundary and waits up to DrainTimeout; past it,
// jobs are cancelled (the chunk in flight rolls back, the execution is
// still recorded STOPPED). Then it stops the background loops and
// deregisters. Pools, caches and telemetry must be closed only after Stop
// returns. A stopped worker may be started again.
func (w *Worker) Stop(ctx context.Context) error {
	// The runner first: once the worker reads draining, no run starts
	// another chunk.
	w.runner.Drain()
	presence := w.registration()
	if presence != nil {
		presence.SetStatus(ctx, radartype.WorkerDraining)
	}
	softCtx, cancel := context.WithTimeout(ctx, w.cfg.DrainTimeout)
	defer cancel()
	err := w.river.Stop(softCtx)
	if err != nil {
		w.cfg.Logger.WarnContext(ctx, "drain timeout reached; cancelling running jobs", slog.Duration("drain_timeout", w.cfg.DrainTimeout))
		hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancelHard()
		err = w.river.StopAndCancel(hardCtx)
	}
	w.stopServices()
	w.mu.Lock()
	if w.unwatch != nil {
		w.unwatch()
	}
	w.mu.Unlock()
	if presence != nil {
		presence.Stop(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("error stopping river client: %w", err)
	}
	return nil
}

func (w *Worker) recordGauges(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DBTimeout)
	defer cancel()
	return w.cfg.Gauges.Record(ctx)
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

// deleteExpiredIdempotencyKeys removes the api's Idempotency-Key records
// past their retention (each row carries its own expiry, set by the api
// that recorded it), so the table holds about one retention's POSTs. An
// expired row no longer answers a retry whether or not it is deleted yet:
// this pass only bounds the table.
func (w *Worker) deleteExpiredIdempotencyKeys(ctx context.Context) error {
	n, err := queries.New().IdempotencyKeyDeleteExpired(ctx, w.pool)
	if err != nil {
		return fmt.Errorf("error deleting expired idempotency keys: %w", err)
	}
	if n > 0 {
		w.cfg.Logger.DebugContext(ctx, "deleted expired idempotency keys", slog.Int64("keys", n))
	}
	return nil
}

// service returns the background service name that runs pass every
// interval. Each pass is bounded by DBTimeout per statement through the
// connections' statement_timeout, and in all by the stale window.
func (w *Worker) service(name string, interval time.Duration, pass func(context.Context) error) *service.Service {
	return service.New(service.Config{Name: name, Interval: interval, Timeout: w.cfg.StaleAfter, Logger: w.cfg.Logger, Pass: pass})
}

// stopServices stops the background services Start started and waits for
// their passes under way.
func (w *Worker) stopServices() {
	w.mu.Lock()
	services := w.services
	w.services = nil
	w.mu.Unlock()
	for _, s := range services {
		s.Stop()
	}
}
