package app

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
)

// CLI is the role of `radar run`: one request run in the foreground under
// a worker's rules. It registers and heartbeats like a worker (its
// presence fences its run), inserts through one insert-only River client
// (the chained or resumed requests its run ends with are River jobs for the
// workers), and has the process's one Enqueuer, one Reaper and one runner.
type CLI struct {
	id       string
	presence *worker.Presence
	owner    *request.Owner
	runner   *batch.Runner
	built    census
}

// NewCLI builds the CLI role and registers its presence, which heartbeats
// through heartbeatPool until Stop.
func NewCLI(ctx context.Context, pool, heartbeatPool *pgxpool.Pool, env *config.Config, tel *Telemetry, workerID, hostname, boot string) (*CLI, error) {
	c := &CLI{id: workerID}
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
	c.presence, err = worker.StartPresence(ctx, heartbeatPool, worker.Config{
		ID: workerID, Hostname: hostname, PID: os.Getpid(), Boot: boot, Version: Version,
		ConfiguredKeys: env.ConfiguredKeyNames(), DailyCaps: env.CapsByName(), HeartbeatInterval: env.HeartbeatInterval,
		StaleAfter: env.StaleAfter, FenceAfter: env.FenceAfter, DBTimeout: env.DBTimeout,
	})
	if err != nil {
		return nil, err
	}
	runnerCfg := runnerConfig(pool, env, tel, workerID, up)
	runnerCfg.Owner, runnerCfg.Fence = c.owner, c.presence
	if c.runner, err = batch.NewRunner(pool, runnerCfg); err != nil {
		c.presence.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return c, nil
}

// Enqueue records the CLI's own request: no River job is inserted for it
// (this process runs it), and the reaper frees it if this process dies.
func (c *CLI) Enqueue(ctx context.Context, p request.EnqueueParams) (*request.EnqueueResult, error) {
	p.WorkerID = c.id
	return c.owner.Enqueue(ctx, &p)
}

// Runner is the runner the CLI runs its request with.
func (c *CLI) Runner() *batch.Runner { return c.runner }

// Stop deregisters the CLI's presence.
func (c *CLI) Stop(ctx context.Context) { c.presence.Stop(ctx) }
