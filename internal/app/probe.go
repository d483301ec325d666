package app

import (
	"context"
	"time"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/worker"
)

// pinger is what probeDatabase needs of a pool.
type pinger interface {
	Ping(ctx context.Context) error
}

// StartDatabaseProbe exports buildrisk_database_up for a process that has
// no heartbeat of its own (the api): it records 1 at once (the pool has just
// connected), then, in the background until ctx is done, pings the database
// every interval, each ping bounded by timeout, and records the result.
// /metrics never reads the database for this gauge, so it says 0 while the
// database is down. A worker's heartbeat records the same gauge
// (worker.Presence). Each result also feeds reach, the process's link that
// its reapers wait on after a cut (nil: none).
func StartDatabaseProbe(ctx context.Context, db pinger, interval, timeout time.Duration, inst *observability.Instruments, reach *worker.Reachability) {
	inst.DatabaseUpSet(ctx, true)
	go probeDatabase(ctx, db, interval, timeout, inst, reach)
}

func probeDatabase(ctx context.Context, db pinger, interval, timeout time.Duration, inst *observability.Instruments, reach *worker.Reachability) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		pingCtx, cancel := context.WithTimeout(ctx, timeout)
		err := db.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return // the process is stopping: the failure says nothing about the database
		}
		inst.DatabaseUpSet(ctx, err == nil)
		reach.Observe(err)
	}
}

// databaseProbeTimeout bounds one probe: a database that does not answer
// within it counts as down.
func databaseProbeTimeout(env *Config) time.Duration {
	return min(env.HeartbeatInterval, 2*time.Second)
}
