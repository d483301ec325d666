package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/radartype"
)

// Presence is a process's row in the worker registry: it registers the
// process, heartbeats with its current status (re-registering if its row
// was removed), and records status changes at once. Workers and `radar run`
// CLIs both hold one, so the reaper treats them alike: alive while they
// beat, reaped when they die.
//
// Presence also fences the process. Each heartbeat is bounded by
// Config.DBTimeout. When the last successful heartbeat is older than
// Config.FenceAfter, Fenced's channel closes: the runs of the process
// cancel their work in flight without committing, and the worker reads
// not-ready. Heartbeats go on at every interval; the first one that
// succeeds re-registers the process and lifts the fence (runs that were
// cancelled stay over).
//
// The ages that matter are the database's: the reaper compares the
// heartbeat_at the database wrote (its now()) with its now(). The process
// never compares its own wall clock with a database timestamp; it counts
// FenceAfter on its monotonic clock from the moment it SENT its last
// successful heartbeat, which is no later than the heartbeat_at the
// database recorded for it. So the fence always falls before the reaper can
// see the process stale, with HeartbeatInterval + DBTimeout to spare
// (Config.validate enforces FenceAfter + HeartbeatInterval + DBTimeout <
// StaleAfter): a write sent just before the fence lands within DBTimeout.
type Presence struct {
	pool    *pgxpool.Pool
	cfg     Config
	queries *queries.Queries
	// heartbeats is the service that heartbeats every HeartbeatInterval.
	heartbeats *service.Service

	mu       sync.Mutex
	status   radartype.WorkerStatus
	lastBeat time.Time // when the last successful heartbeat was sent (monotonic)
	lastErr  error     // the error of the last failed heartbeat
	fenced   chan struct{}
	isFenced bool
	timer    *time.Timer
	stopped  bool
}

// StartPresence registers cfg.ID with status running and heartbeats every
// cfg.HeartbeatInterval until Stop.
func StartPresence(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Presence, error) {
	p := &Presence{pool: pool, cfg: cfg.withDefaults(), queries: queries.New(), status: radartype.WorkerRunning, fenced: make(chan struct{})}
	sent := time.Now()
	if err := p.register(ctx); err != nil {
		return nil, err
	}
	p.recordDatabaseUp(ctx, true)
	p.checkIdentity(ctx)
	p.mu.Lock()
	p.lastBeat = sent
	p.timer = time.AfterFunc(p.cfg.FenceAfter, p.checkFence)
	p.mu.Unlock()
	// No timeout of the service's own: each statement of a heartbeat is
	// bounded by DBTimeout.
	p.heartbeats = service.New(service.Config{Name: "heartbeat", Interval: p.cfg.HeartbeatInterval, Logger: p.cfg.Logger, Pass: p.heartbeat})
	p.heartbeats.Start(context.WithoutCancel(ctx))
	return p, nil
}

// Status returns running, draining or stopped.
func (p *Presence) Status() radartype.WorkerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Fenced returns a channel that is closed while the process is fenced (its
// last successful heartbeat is older than FenceAfter); it implements
// batch.Fence. After the fence lifts, a new, open channel is returned.
func (p *Presence) Fenced() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced
}

// FenceError returns why the process is fenced, or nil.
func (p *Presence) FenceError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isFenced {
		return nil
	}
	return fmt.Errorf("fenced: no successful heartbeat for %s (fencing threshold %s; last error: %v)",
		time.Since(p.lastBeat).Round(time.Millisecond), p.cfg.FenceAfter, p.lastErr)
}

// SetStatus changes the reported status and records it at once.
func (p *Presence) SetStatus(ctx context.Context, status radartype.WorkerStatus) {
	p.mu.Lock()
	p.status = status
	p.mu.Unlock()
	if err := p.heartbeat(ctx); err != nil {
		p.cfg.Logger.WarnContext(ctx, "could not report worker status", slog.String("status", string(status)), slog.String("error", err.Error()))
	}
}

// Stop ends the heartbeat and records the process as stopped.
func (p *Presence) Stop(ctx context.Context) {
	p.heartbeats.Stop()
	p.mu.Lock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.SetStatus(ctx, radartype.WorkerStopped)
}

func (p *Presence) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DBTimeout)
	defer cancel()
	caps := p.cfg.DailyCaps
	if caps == nil {
		caps = map[string]int{}
	}
	dailyCaps, err := json.Marshal(caps)
	if err != nil {
		return fmt.Errorf("error encoding daily caps: %w", err)
	}
	err = p.queries.WorkerUpsert(ctx, p.pool, &queries.WorkerUpsertParams{
		ID: p.cfg.ID, Hostname: p.cfg.Hostname, Pid: int32(p.cfg.PID), Boot: p.cfg.Boot,
		Status: string(p.Status()), ConfiguredKeys: p.cfg.ConfiguredKeys, Version: p.cfg.Version,
		DailyCaps: dailyCaps,
	})
	if err != nil {
		return fmt.Errorf("error registering worker %s: %w", p.cfg.ID, err)
	}
	return nil
}

// heartbeat records the process's status; a success pushes the fence back
// (and lifts it, re-registering), a failure is kept for FenceError.
func (p *Presence) heartbeat(ctx context.Context) error {
	sent := time.Now()
	err := p.beat(ctx)
	p.recordDatabaseUp(ctx, err == nil)
	if err == nil || ctx.Err() == nil {
		p.cfg.Reachability.Observe(err)
	}
	p.mu.Lock()
	if err != nil {
		p.lastErr = err
		p.mu.Unlock()
		return err
	}
	p.lastBeat = sent
	if p.timer != nil && !p.stopped {
		p.timer.Reset(p.cfg.FenceAfter - time.Since(sent))
	}
	if p.isFenced {
		p.isFenced = false
		p.fenced = make(chan struct{})
		p.cfg.Logger.InfoContext(ctx, "database answers again: worker re-registered and ready", slog.String("worker_id", p.cfg.ID))
	}
	p.mu.Unlock()
	p.checkIdentity(ctx)
	return nil
}

// checkIdentity checks, after a heartbeat that reached the database,
// whether the database moved (DatabaseWatch), bounded by DBTimeout. A
// failed read is the watch's to report: the heartbeat itself succeeded.
func (p *Presence) checkIdentity(ctx context.Context) {
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.DBTimeout)
	defer cancel()
	_ = p.cfg.DatabaseWatch.Check(callCtx, p.pool)
}

func (p *Presence) beat(ctx context.Context) error {
	p.mu.Lock()
	fenced := p.isFenced
	p.mu.Unlock()
	if fenced {
		// Re-register in full: the row may have been reaped or removed.
		return p.register(ctx)
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.DBTimeout)
	defer cancel()
	n, err := p.queries.WorkerHeartbeat(callCtx, p.pool, &queries.WorkerHeartbeatParams{ID: p.cfg.ID, Status: string(p.Status())})
	if err != nil {
		return err
	}
	if n == 0 {
		return p.register(ctx)
	}
	return nil
}

// recordDatabaseUp exports the heartbeat's result as buildrisk_database_up:
// a heartbeat is the worker's database probe. A heartbeat cut short by the
// process's own shutdown says nothing about the database and is not
// recorded.
func (p *Presence) recordDatabaseUp(ctx context.Context, up bool) {
	if p.cfg.Instruments == nil || (!up && ctx.Err() != nil) {
		return
	}
	p.cfg.Instruments.DatabaseUpSet(ctx, up)
}

// checkFence fences the process when its last successful heartbeat was sent
// FenceAfter ago or more (the timer may race with a heartbeat that just
// succeeded: then it is re-armed instead).
func (p *Presence) checkFence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.isFenced {
		return
	}
	if age := time.Since(p.lastBeat); age < p.cfg.FenceAfter {
		p.timer.Reset(p.cfg.FenceAfter - age)
		return
	}
	p.isFenced = true
	close(p.fenced)
	errText := "none"
	if p.lastErr != nil {
		errText = p.lastErr.Error()
	}
	p.cfg.Logger.Warn("fenced: no successful heartbeat within the fencing threshold; cancelling the work in flight uncommitted, not ready, retrying",
		slog.String("worker_id", p.cfg.ID), slog.Duration("fence_after", p.cfg.FenceAfter), slog.String("last_error", errText))
}
