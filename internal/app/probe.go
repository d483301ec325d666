package app

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river/rivershared/startstop"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/queue/worker"
)

// probed is what probeDatabase needs of a pool: a ping, and queries for
// the database's identity.
type probed interface {
	Ping(ctx context.Context) error
	queries.DBTX
}

// newDatabaseProbe returns the service that exports buildrisk_database_up
// for a process that has no heartbeat of its own (the api): started, it
// records 1 at once (the pool has just connected), then pings the
// database every interval, each ping bounded by timeout, and records the
// result, until it is stopped. /metrics never reads the database for this
// gauge, so it says 0 while the database is down. A worker's heartbeat
// records the same gauge (worker.Presence). Each result also feeds the
// process's link that its reapers wait on after a cut (tel.Reach). After
// each ping that succeeded, and once at the start, the process's database
// watch checks whether the database moved (a failover), bounded by timeout
// as well.
//
// The probe is a service ("database probe"): the api logs an outage when
// its first ping fails, a reminder at most every minute, and the recovery
// at the first ping that succeeds again, as a worker's heartbeat does.
func newDatabaseProbe(db probed, interval, timeout time.Duration, tel *Telemetry) startstop.Service {
	probe := service.New(service.Config{Name: "database probe", Interval: interval, Logger: tel.Logger, Pass: func(passCtx context.Context) error {
		return probeDatabase(passCtx, db, timeout, tel.Instruments, tel.Reach, tel.Database)
	}})
	return startstop.StartStopFunc(func(ctx context.Context, shouldStart bool, started, stopped func()) error {
		if !shouldStart {
			return nil
		}
		tel.Instruments.DatabaseUpSet(ctx, true)
		checkIdentity(ctx, db, timeout, tel.Database)
		_ = probe.Start(ctx)
		go func() {
			defer stopped()
			<-ctx.Done()
			probe.Stop()
		}()
		started()
		return nil
	})
}

// checkIdentity checks with watch whether the database db reaches moved,
// bounded by timeout. A failed read is the watch's to report.
func checkIdentity(ctx context.Context, db probed, timeout time.Duration, watch *worker.DatabaseWatch) {
	checkCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_ = watch.Check(checkCtx, db)
}

// probeDatabase is one pass of the probe: a ping in ctx bounded by
// timeout, recorded unless ctx is done (the probe is stopping: the failure
// says nothing about the database).
func probeDatabase(ctx context.Context, db probed, timeout time.Duration, inst *observability.Instruments, reach *request.Reachability, watch *worker.DatabaseWatch) error {
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	err := db.Ping(pingCtx)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	inst.DatabaseUpSet(ctx, err == nil)
	reach.Observe(err)
	if err != nil {
		return fmt.Errorf("error pinging the database: %w", err)
	}
	checkIdentity(ctx, db, timeout, watch)
	return nil
}

// databaseProbeTimeout bounds one probe: a database that does not answer
// within it counts as down.
func databaseProbeTimeout(env *config.Config) time.Duration {
	return min(env.HeartbeatInterval, 2*time.Second)
}
