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

// NewEnqueuer returns the one way requests are inserted (api, CLI, chains,
// schedules): stale-worker cleanup, then dedupe, under the job's lock.
// riverClient nil records requests the caller runs itself.
func NewEnqueuer(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *config.Config, tel *Telemetry) (*request.Enqueuer, error) {
	return NewEnqueuerFor(jobset.Catalog(), pool, riverClient, request.RiverCanceller(riverClient), env, tel)
}

// NewCLIEnqueuer returns the enqueuer of `radar run`'s own request, which
// has no River job (the CLI runs it); its cleanup still cancels the River
// job of a dead worker's request through cancelWith.
func NewCLIEnqueuer(pool *pgxpool.Pool, cancelWith *river.Client[pgx.Tx], env *config.Config, tel *Telemetry) (*request.Enqueuer, error) {
	return NewEnqueuerFor(jobset.Catalog(), pool, nil, request.RiverCanceller(cancelWith), env, tel)
}

// NewEnqueuerFor is newEnqueuer for another catalog (benchmarks enqueue
// no-op jobs through the production path).
func NewEnqueuerFor(catalog *jobs.Catalog, pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], canceller request.JobCanceller, env *config.Config, tel *Telemetry) (*request.Enqueuer, error) {
	// The cleanup reaps dead workers' runs, and a reaped run resumes. The
	// resume goes through an enqueuer of its own without a cleanup (a
	// resume never cleans up: its caller is the cleanup), so the reaper is
	// built on it before the enqueuer that cleans up with the reaper.
	cfg := request.Config{
		Catalog: catalog, DailyCaps: env.CapsByName(), Estimators: batch.Estimators(Jobs(env, pool)),
		Instruments: tel.Instruments, Logger: tel.Logger, Resume: env.AutoResume,
		StaleAfter: env.StaleAfter,
	}
	resumer, err := request.NewEnqueuer(pool, riverClient, cfg)
	if err != nil {
		return nil, err
	}
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: env.StaleAfter, Instruments: tel.Instruments, Logger: tel.Logger, Reachability: tel.Reach,
		River: canceller,
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := resumer.ResumeTx(ctx, tx, stopped)
			return err
		},
	})
	cfg.Cleanup = func(ctx context.Context, tx pgx.Tx, job string) error {
		_, err := reaper.ReapTx(ctx, tx, job)
		return err
	}
	return request.NewEnqueuer(pool, riverClient, cfg)
}
