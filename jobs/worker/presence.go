package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
)

// Presence is a process's row in the worker registry: it registers the
// process, heartbeats with its current status (re-registering if its row
// was removed), and records status changes at once. Workers and `radar run`
// CLIs both hold one, so the reaper treats them alike: alive while they
// beat, reaped when they die.
type Presence struct {
	pool    *pgxpool.Pool
	cfg     Config
	queries *queries.Queries
	cancel  context.CancelFunc
	done    sync.WaitGroup

	mu     sync.Mutex
	status string
}

// StartPresence registers cfg.ID with status running and heartbeats every
// cfg.HeartbeatInterval until Stop.
func StartPresence(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Presence, error) {
	p := &Presence{pool: pool, cfg: cfg.withDefaults(), queries: queries.New(), status: StatusRunning}
	if err := p.register(ctx); err != nil {
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		ticker := time.NewTicker(p.cfg.HeartbeatInterval)
		defer ticker.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-ticker.C:
				if err := p.heartbeat(loopCtx); err != nil && loopCtx.Err() == nil {
					p.cfg.Logger.WarnContext(loopCtx, "heartbeat failed", slog.String("error", err.Error()))
				}
			}
		}
	}()
	return p, nil
}

// Status returns running, draining or stopped.
func (p *Presence) Status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// SetStatus changes the reported status and records it at once.
func (p *Presence) SetStatus(ctx context.Context, status string) {
	p.mu.Lock()
	p.status = status
	p.mu.Unlock()
	if err := p.heartbeat(ctx); err != nil {
		p.cfg.Logger.WarnContext(ctx, "could not report worker status", slog.String("status", status), slog.String("error", err.Error()))
	}
}

// Stop ends the heartbeat and records the process as stopped.
func (p *Presence) Stop(ctx context.Context) {
	p.cancel()
	p.done.Wait()
	p.SetStatus(ctx, StatusStopped)
}

func (p *Presence) register(ctx context.Context) error {
	err := p.queries.WorkerUpsert(ctx, p.pool, &queries.WorkerUpsertParams{
		ID: p.cfg.ID, Hostname: p.cfg.Hostname, Pid: int32(p.cfg.PID), Boot: p.cfg.Boot,
		Status: p.Status(), ConfiguredKeys: p.cfg.ConfiguredKeys, Version: p.cfg.Version,
	})
	if err != nil {
		return fmt.Errorf("error registering worker %s: %w", p.cfg.ID, err)
	}
	return nil
}

func (p *Presence) heartbeat(ctx context.Context) error {
	n, err := p.queries.WorkerHeartbeat(ctx, p.pool, &queries.WorkerHeartbeatParams{ID: p.cfg.ID, Status: p.Status()})
	if err != nil {
		return err
	}
	if n == 0 {
		return p.register(ctx)
	}
	return nil
}
