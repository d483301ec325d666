package app

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream"
)

// BudgetDay returns the call budget's current day: the date in
// BUILDRISK_TIMEZONE of the database's clock (read through db at each
// call), or of env.Now when a test sets one; never the process's clock,
// unless the database does not answer (nothing is charged then).
func BudgetDay(env *config.Config, db queries.DBTX) func() time.Time {
	return func() time.Time {
		if env.Now != nil {
			return upstream.Day(env.Now(), env.Location)
		}
		ctx, cancel := context.WithTimeout(context.Background(), databaseProbeTimeout(env))
		defer cancel()
		now, err := queries.New().DatabaseNow(ctx, db)
		if err != nil {
			now = time.Now()
		}
		return upstream.Day(now, env.Location)
	}
}

// census counts what a role built: the test of each role's construction
// reads it (one River client, one request owner, which is also the role's
// reaper).
type census struct {
	riverClients, owners int
	// ownerRiver is the River client the owner inserts through.
	ownerRiver *river.Client[pgx.Tx]
}

// requestConfig is the request owner's configuration of a process:
// every insert (api, CLI, chains, schedules, resumes) goes through the
// owner, which reaps a job's dead runs before its duplicate check and
// applies the resume policy wherever a run ends.
func requestConfig(jobCatalog *catalog.Catalog, pool *pgxpool.Pool, env *config.Config, tel *Telemetry) request.Config {
	return request.Config{
		Catalog: jobCatalog, DailyCaps: env.CapsByName(), Estimators: batch.Estimators(Jobs(env, pool)),
		Instruments: tel.Instruments, Logger: tel.Logger, Resume: env.AutoResume,
		StaleAfter: env.StaleAfter, Reachability: tel.Reach, Schedules: worker.DueTimes(env.Schedules), Now: env.Now,
	}
}

// newOwner builds the request owner of a process that runs no River jobs
// (the api, the CLI) on its insert-only River client.
func newOwner(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *config.Config, tel *Telemetry, built *census) (*request.Owner, error) {
	owner, err := request.NewOwner(pool, riverClient, requestConfig(jobset.Catalog(), pool, env, tel))
	if err != nil {
		return nil, err
	}
	built.owners++
	built.ownerRiver = riverClient
	return owner, nil
}

// runnerConfig is the batch runner's configuration of a process, but for
// its owner and fence, which are the role's own.
func runnerConfig(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, workerID string, up *upstream.Client) batch.Config {
	return batch.Config{
		WorkerID: workerID, Jobs: batch.Implementations(Jobs(env, pool)), Upstream: up, Instruments: tel.Instruments,
		Logger: tel.Logger, FanOut: env.FanOut, Tracer: tel.Providers.Tracer.Tracer("github.com/buildrisk/radar/queue/batch"),
		DBTimeout: env.DBTimeout, LeaseCheckInterval: env.HeartbeatInterval, StopTimeout: env.StopTimeout,
		Providers: jobProviders(), ForecastInterval: env.ForecastInterval,
	}
}

// jobProviders maps each job of the catalog to the provider it calls.
func jobProviders() map[string]upstream.Provider {
	out := map[string]upstream.Provider{}
	for _, def := range jobset.Catalog().All() {
		if p := def.Provider(); p != "" {
			out[def.Name()] = upstream.Provider(p)
		}
	}
	return out
}
