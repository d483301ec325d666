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
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/radartype"
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
	// DBTimeoutDefault bounds each database call of a worker (the
	// connections' statement_timeout); FenceAfterFor and DBTimeoutFor
	// derive the defaults from the stale window.
	DBTimeoutDefault = 5 * time.Second
	// SchedulePollIntervalDefault is the longest time between scheduler
	// passes besides the due times: how soon a deferred due time is
	// enqueued after its blocking request ended.
	SchedulePollIntervalDefault = 30 * time.Second
	// SchedulePassTimeoutDefault bounds one scheduler pass.
	SchedulePassTimeoutDefault = time.Minute
	// FetchCooldownDefault is River's minimum spacing of fetches, and of
	// the insert notifications this worker's client sends (chains,
	// schedules): River rate-limits an inserting client's NOTIFYs by its
	// FetchCooldown, so a longer one leaves back-to-back requests waiting
	// for the poll.
	FetchCooldownDefault = river.FetchCooldownMin
	// FetchPollIntervalDefault is River's fallback poll, for inserts whose
	// notification was lost.
	FetchPollIntervalDefault = 500 * time.Millisecond
	// SnoozeMax is the longest a run's River job is snoozed at once: River
	// leaves a job snoozed for up to its scheduler interval (5 s) available,
	// to be fetched by any client once due; a longer snooze makes it
	// scheduled, which only River's elected leader makes available again.
	// Waits longer than this snooze several times.
	SnoozeMax = 4 * time.Second
)

// FenceAfterFor returns the default fencing threshold for a stale window,
// a heartbeat interval and a database timeout: half of the window, or, when
// that would break the inequality CheckFencing checks, three quarters of
// what the window leaves after the other two (so the default always passes
// CheckFencing when the other two leave any room).
func FenceAfterFor(staleAfter, heartbeatInterval, dbTimeout time.Duration) time.Duration {
	if fence := staleAfter / 2; CheckFencing(fence, heartbeatInterval, dbTimeout, staleAfter) == nil {
		return fence
	}
	return max((staleAfter-heartbeatInterval-dbTimeout)*3/4, time.Millisecond)
}

// DBTimeoutFor returns the default database call timeout for a stale
// window and a heartbeat interval: DBTimeoutDefault, at most a quarter of
// the window and at most a third of what the window leaves after one
// heartbeat interval, so that FenceAfterFor still finds room; never below
// a millisecond (statement_timeout is set in whole milliseconds, 0 would
// disable it).
func DBTimeoutFor(staleAfter, heartbeatInterval time.Duration) time.Duration {
	d := min(DBTimeoutDefault, staleAfter/4, (staleAfter-heartbeatInterval)/3)
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// CheckFencing returns an error unless fenceAfter + heartbeatInterval +
// dbTimeout < staleAfter: the inequality that makes a worker fence itself
// (and have its last write land) before any reaper can take it for dead.
func CheckFencing(fenceAfter, heartbeatInterval, dbTimeout, staleAfter time.Duration) error {
	if fenceAfter+heartbeatInterval+dbTimeout >= staleAfter {
		return fmt.Errorf("fencing threshold %s + heartbeat interval %s + database timeout %s must be less than the stale window %s, "+
			"so that a worker stops its work before a reaper can take it for dead", fenceAfter, heartbeatInterval, dbTimeout, staleAfter)
	}
	return nil
}

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
	// DailyCaps are the daily call caps per provider this process enforces
	// (BUILDRISK_DAILY_CAP_<P>), recorded on its registry row so the api
	// shows the caps really enforced (GET /v1/providers).
	DailyCaps map[string]int

	HeartbeatInterval time.Duration
	StaleAfter        time.Duration
	// FenceAfter is the fencing threshold: a process whose last successful
	// heartbeat is older cancels its runs' work in flight uncommitted and
	// turns not-ready (default FenceAfterFor(StaleAfter)).
	FenceAfter time.Duration
	// DBTimeout bounds each database call of the worker, heartbeats
	// included (default DBTimeoutFor(StaleAfter)).
	DBTimeout         time.Duration
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
	// PollOnly runs River without LISTEN (River's Config.PollOnly), for
	// PgBouncer's transaction pooling, where a LISTEN does not survive its
	// transaction: a new request is then picked up by the next fetch poll,
	// within FetchPollInterval, and a leader that resigns is replaced
	// within about five seconds.
	PollOnly bool
	// DisableReaper turns the periodic reaper off (tests show that the
	// API's cleanup-before-enqueue alone frees a job).
	DisableReaper bool
	// LeaderElectionDisabled keeps the worker's River client from ever
	// standing for River's leader (River's Config.LeaderElectionDisabled):
	// tests show that no run, resumes included, waits for a leader. Refused
	// with Schedules, whose passes only a leader inserts.
	LeaderElectionDisabled bool

	Instruments *observability.Instruments
	Logger      *slog.Logger
	// RiverPlugins are added to the River client (otelriver).
	RiverPlugins []rivertype.Plugin
	// Schedules are the jobs requested periodically. Only River's elected
	// leader runs scheduler passes; the database makes each due time one
	// request cluster-wide whoever runs them (see Scheduler).
	Schedules []Schedule
	// SchedulePollInterval is the longest wait between scheduler passes.
	SchedulePollInterval time.Duration
	// SchedulePassTimeout bounds one scheduler pass.
	SchedulePassTimeout time.Duration
	// Now, when set, replaces the database's clock as the schedules' clock
	// (tests move it).
	Now func() time.Time
	// Gauges, when set, are recorded on every heartbeat.
	Gauges *Gauges
	// Reachability is the process's link to the database as its heartbeats
	// see it; the worker's reaper waits on it (see Reachability). Nil makes
	// one of the worker's own.
	Reachability *request.Reachability
	// DatabaseWatch is the process's failover detection: each successful
	// heartbeat checks the database's identity with it (see DatabaseWatch),
	// so a move is seen within a HeartbeatInterval or two of the new
	// primary accepting connections (the first heartbeat after the move
	// may meet a connection the old primary broke). Nil makes one of the
	// worker's own.
	DatabaseWatch *DatabaseWatch
	// HeartbeatPool, when set, carries the registry's heartbeats and status
	// changes, so that they never wait for a connection behind chunk work
	// on the main pool. Nil uses the main pool.
	HeartbeatPool *pgxpool.Pool
	// Requests configures the worker's request owner: its chains, resumes
	// and schedules enqueue through it, its reaper and reconcile loop end
	// requests through it. Its StaleAfter, Reachability, Instruments and
	// Logger default to the worker's.
	Requests request.Config
	// Runner configures the worker's batch runner. Its WorkerID, Owner and
	// Fence are the worker's own; its Instruments and Logger default to the
	// worker's.
	Runner batch.Config
}

func (c Config) withDefaults() Config {
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	c.DBTimeout = cmp.Or(c.DBTimeout, DBTimeoutFor(c.StaleAfter, c.HeartbeatInterval))
	c.FenceAfter = cmp.Or(c.FenceAfter, FenceAfterFor(c.StaleAfter, c.HeartbeatInterval, c.DBTimeout))
	c.ReapInterval = cmp.Or(c.ReapInterval, ReapIntervalDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.MaxConcurrentJobs = cmp.Or(c.MaxConcurrentJobs, MaxConcurrentJobsDefault)
	c.SchedulePollInterval = cmp.Or(c.SchedulePollInterval, SchedulePollIntervalDefault)
	c.SchedulePassTimeout = cmp.Or(c.SchedulePassTimeout, SchedulePassTimeoutDefault)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, FetchCooldownDefault)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, FetchPollIntervalDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Reachability == nil {
		c.Reachability = request.NewReachability()
	}
	if c.DatabaseWatch == nil {
		c.DatabaseWatch = NewDatabaseWatch(c.Instruments, c.Logger)
	}
	if c.ConfiguredKeys == nil {
		c.ConfiguredKeys = []string{}
	}
	c.Requests.StaleAfter = cmp.Or(c.Requests.StaleAfter, c.StaleAfter)
	c.Requests.Reachability = cmp.Or(c.Requests.Reachability, c.Reachability)
	c.Requests.Instruments = cmp.Or(c.Requests.Instruments, c.Instruments)
	c.Requests.Logger = cmp.Or(c.Requests.Logger, c.Logger)
	c.Runner.WorkerID = c.ID
	c.Runner.Instruments = cmp.Or(c.Runner.Instruments, c.Instruments)
	c.Runner.Logger = cmp.Or(c.Runner.Logger, c.Logger)
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
	case len(c.Schedules) > 0 && c.LeaderElectionDisabled:
		return errors.New("worker: Schedules need River's leader election (LeaderElectionDisabled is set)")
	}
	if err := CheckFencing(c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

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

// runWorker is the River worker of runs: every job of the catalog runs
// through it.
type runWorker struct {
	river.WorkerDefaults[jobs.RequestArgs]
	w *Worker
}

// Timeout disables River's per-job timeout: chunks bound the work, and the
// reaper handles dead workers.
func (rw *runWorker) Timeout(*river.Job[jobs.RequestArgs]) time.Duration { return -1 }

// Work runs one request. Its River job only delivers the request: the
// run's claim completes it, in the transaction that starts the run (see
// request.Owner), and from then on the request row alone tracks the run,
// so what Work returns after a claim changes nothing in River. Before a
// claim it hands the job back (a snooze) while the request may not start
// yet, and cancels it with the request's failure when the run cannot
// start.
func (rw *runWorker) Work(ctx context.Context, job *river.Job[jobs.RequestArgs]) error {
	w := rw.w
	// A request that may not start yet (an automatic resume's backoff, by
	// the database's clock) goes back to River available, for at most
	// SnoozeMax at a time: River's leader is on no resume's path.
	wait, err := queries.New().JobRequestWait(ctx, w.pool, job.Args.RequestID)
	if err != nil && !errors.Is(queries.Interpret(err), queries.ErrNotFound) {
		return river.JobSnooze(time.Second) // the run's start would meet the same database
	}
	if wait > 0 {
		return river.JobSnooze(min(time.Duration(wait*float64(time.Second)), SnoozeMax))
	}
	// Continue the trace of the request's insert (the API's POST): the run's
	// spans become its children, so one trace shows enqueue → run.
	if parent := enqueueSpanContext(job.Metadata); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	outcome, err := w.runner.Run(ctx, batch.RunOpts{RequestID: job.Args.RequestID, Delivery: job})
	switch {
	case outcome != nil, err == nil, errors.Is(err, batch.ErrNotQueued):
		// The claim ended the delivery: whatever the run's end, its
		// request records it (or the reconcile loop, or whoever took the
		// run over).
		return nil
	case errors.Is(err, batch.ErrExecutionActive):
		// An execution of the job is still ending (STOPPING): the request
		// waits for it, still QUEUED, instead of failing at start.
		w.cfg.Logger.InfoContext(ctx, "request waits for the job's active execution to end", slog.Int64("request_id", job.Args.RequestID), slog.String("reason", err.Error()))
		return river.JobSnooze(time.Second)
	case errors.Is(err, batch.ErrFenced):
		// Fenced before the run could start: the request is still QUEUED;
		// try again once the database answers.
		return river.JobSnooze(min(w.cfg.HeartbeatInterval, SnoozeMax))
	default:
		// The run could not start: keep its real error on the request
		// instead of leaving it QUEUED for the reaper to call orphaned;
		// its River job ends cancelled.
		w.owner.FailStart(ctx, job.Args.RequestID, w.cfg.ID, err)
		return river.JobCancel(err)
	}
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
