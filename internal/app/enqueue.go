package app

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs"
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
// reads it (one River client, one Enqueuer, one Reaper).
type census struct {
	riverClients, enqueuers, reapers int
	// enqueuerRiver is the River client the Enqueuer inserts through.
	enqueuerRiver *river.Client[pgx.Tx]
}

// newRequests builds a process's one Enqueuer and one Reaper on its River
// client: every insert (api, CLI, chains, schedules, resumes) goes through
// the Enqueuer, which reaps a job's dead runs (the Reaper) before its
// duplicate check; a reaped run resumes through the Enqueuer. Each needs
// the other, so the Reaper is made first and told its resumer last.
func newRequests(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *config.Config, tel *Telemetry, built *census) (*request.Enqueuer, *worker.Reaper, error) {
	return newRequestsFor(jobset.Catalog(), pool, riverClient, env, tel, built)
}

// newRequestsFor is newRequests for another catalog (benchmarks enqueue
// no-op jobs through the production path).
func newRequestsFor(catalog *jobs.Catalog, pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *config.Config, tel *Telemetry, built *census) (*request.Enqueuer, *worker.Reaper, error) {
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: env.StaleAfter, Instruments: tel.Instruments, Logger: tel.Logger, Reachability: tel.Reach,
		River: request.RiverCanceller(riverClient),
	})
	enqueuer, err := request.NewEnqueuer(pool, riverClient, request.Config{
		Catalog: catalog, DailyCaps: env.CapsByName(), Estimators: batch.Estimators(Jobs(env, pool)),
		Instruments: tel.Instruments, Logger: tel.Logger, Resume: env.AutoResume,
		StaleAfter: env.StaleAfter, Cleanup: reaper.CleanupTx,
	})
	if err != nil {
		return nil, nil, err
	}
	reaper.ResumeThrough(enqueuer)
	built.enqueuers++
	built.enqueuerRiver = riverClient
	built.reapers++
	return enqueuer, reaper, nil
}

// runnerConfig is the batch runner's configuration of a process, but for
// what links it to the process's other parts (withParts).
func runnerConfig(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, workerID string, up *upstream.Client) batch.Config {
	return batch.Config{
		WorkerID: workerID, Jobs: batch.Implementations(Jobs(env, pool)), Upstream: up, Instruments: tel.Instruments,
		Logger: tel.Logger, FanOut: env.FanOut, Tracer: tel.Providers.Tracer.Tracer("github.com/buildrisk/radar/queue/batch"),
		DBTimeout: env.DBTimeout, LeaseCheckInterval: env.HeartbeatInterval, StopTimeout: env.StopTimeout,
	}
}

// newRunner builds a process's one batch runner from cfg (runnerConfig's):
// fenced by the process's presence, its runs' ends chaining and resuming
// through the process's Enqueuer.
func newRunner(pool *pgxpool.Pool, cfg batch.Config, fence batch.Fence, requests *request.Enqueuer) (*batch.Runner, error) {
	cfg.Fence = fence
	cfg.Chain = func(ctx context.Context, tx pgx.Tx, finished *batch.Finished) error {
		_, err := requests.EnqueueNext(ctx, tx, finished.Job, finished.Params)
		return err
	}
	cfg.Resume = func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
		_, err := requests.ResumeTx(ctx, tx, stopped)
		return err
	}
	return batch.NewRunner(pool, cfg)
}
