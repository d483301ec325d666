package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
)

// Presence registers a process that holds requests but is not a River
// worker (a `radar run` CLI) and heartbeats for it, so the reaper treats it
// exactly like a worker: alive while it beats, reaped when it dies.
type Presence struct {
	pool    *pgxpool.Pool
	id      string
	cancel  context.CancelFunc
	done    sync.WaitGroup
	queries *queries.Queries
}

// StartPresence registers id and heartbeats every interval until Stop.
func StartPresence(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Presence, error) {
	cfg = cfg.withDefaults()
	q := queries.New()
	if err := q.WorkerUpsert(ctx, pool, &queries.WorkerUpsertParams{
		ID: cfg.ID, Hostname: cfg.Hostname, Pid: int32(cfg.PID), Boot: cfg.Boot,
		Status: StatusRunning, ConfiguredKeys: cfg.ConfiguredKeys, Version: cfg.Version,
	}); err != nil {
		return nil, fmt.Errorf("error registering: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Presence{pool: pool, id: cfg.ID, cancel: cancel, queries: q}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		ticker := time.NewTicker(cfg.HeartbeatInterval)
		defer ticker.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-ticker.C:
				_, _ = q.WorkerHeartbeat(loopCtx, pool, &queries.WorkerHeartbeatParams{ID: cfg.ID, Status: StatusRunning})
			}
		}
	}()
	return p, nil
}

// Stop ends the heartbeat and records the process as stopped.
func (p *Presence) Stop(ctx context.Context) {
	p.cancel()
	p.done.Wait()
	_, _ = p.queries.WorkerHeartbeat(ctx, p.pool, &queries.WorkerHeartbeatParams{ID: p.id, Status: StatusStopped})
}
