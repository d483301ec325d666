package app

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
)

// CLI is the role of `radar run`: one request run in the foreground under
// a worker's rules. From Start to Stop it is registered and heartbeats
// like a worker (its presence fences its run); it inserts through one
// insert-only River client (the chained or resumed requests its run ends
// with are River jobs for the workers), and has the process's one request
// owner and one runner.
type CLI struct {
	id            string
	heartbeatPool *pgxpool.Pool
	presenceCfg   worker.Config
	owner         *request.Owner
	runner        *batch.Runner
	built         census

	mu       sync.Mutex
	presence *worker.Presence // nil outside Start and Stop
}

// NewCLI builds the CLI role; it starts nothing (Start). Its heartbeats go
// through heartbeatPool.
func NewCLI(pool, heartbeatPool *pgxpool.Pool, env *config.Config, tel *Telemetry, workerID, hostname, boot string) (*CLI, error) {
	c := &CLI{id: workerID, heartbeatPool: heartbeatPool, presenceCfg: worker.Config{
		ID: workerID, Hostname: hostname, PID: os.Getpid(), Boot: boot, Version: Version,
		ConfiguredKeys: env.ConfiguredKeyNames(), DailyCaps: env.CapsByName(), HeartbeatInterval: env.HeartbeatInterval,
		StaleAfter: env.StaleAfter, FenceAfter: env.FenceAfter, DBTimeout: env.DBTimeout,
	}}
	insertOnly, err := newInsertOnlyRiver(pool, tel, &c.built)
	if err != nil {
		return nil, err
	}
	if c.owner, err = newOwner(pool, insertOnly, env, tel, &c.built); err != nil {
		return nil, err
	}
	up, err := NewUpstream(pool, env, tel, workerID)
	if err != nil {
		return nil, err
	}
	runnerCfg := runnerConfig(pool, env, tel, workerID, up)
	runnerCfg.Owner, runnerCfg.Fence = c.owner, c
	if c.runner, err = batch.NewRunner(pool, runnerCfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Start registers the CLI's presence, which heartbeats until Stop.
func (c *CLI) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.presence != nil {
		return errors.New("cli: already started")
	}
	presence, err := worker.StartPresence(ctx, c.heartbeatPool, c.presenceCfg)
	if err != nil {
		return err
	}
	c.presence = presence
	return nil
}

// Stop deregisters the CLI's presence.
func (c *CLI) Stop(ctx context.Context) error {
	c.mu.Lock()
	presence := c.presence
	c.presence = nil
	c.mu.Unlock()
	if presence != nil {
		presence.Stop(ctx)
	}
	return nil
}

// Fenced implements batch.Fence with the CLI's presence: its channel is
// closed while the CLI is fenced (nil, never closed, outside Start and
// Stop).
func (c *CLI) Fenced() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.presence == nil {
		return nil
	}
	return c.presence.Fenced()
}

// Enqueue records the CLI's own request: no River job is inserted for it
// (this process runs it), and the reaper frees it if this process dies.
func (c *CLI) Enqueue(ctx context.Context, p request.EnqueueParams) (*request.EnqueueResult, error) {
	p.WorkerID = c.id
	return c.owner.Enqueue(ctx, &p)
}

// Runner is the runner the CLI runs its request with.
func (c *CLI) Runner() *batch.Runner { return c.runner }
