package app

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/catalog/coverage"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/queue/worker"
)

// scheduleInfo tells the API a job's schedule and its next due time.
func scheduleInfo(env *config.Config) func(job string) (string, *time.Time) {
	byJob := map[string]worker.Schedule{}
	for _, s := range env.Schedules {
		byJob[s.Job] = s
	}
	return func(job string) (string, *time.Time) {
		s, ok := byJob[job]
		if !ok {
			return "", nil
		}
		next := s.Next.Next(env.TimeNow()).In(env.Location)
		return s.Spec, &next
	}
}

// observeSchedules exports, from any process, each scheduled job's period
// and every job's freshness read from the database, so that the api and
// every worker serve the same values. A failed read (a database outage
// fails every scrape's) is logged once per run of failures.
func observeSchedules(ctx context.Context, pool *pgxpool.Pool, env *config.Config, tel *Telemetry) {
	for _, s := range env.Schedules {
		tel.Instruments.SchedulePeriodSet(ctx, s.Job, s.Period)
	}
	q := queries.New()
	names := jobset.Catalog().Names()
	failures := service.NewFailureLog("job freshness read", tel.Logger, 0)
	tel.Instruments.SetJobFreshnessSource(func(ctx context.Context) (map[string]time.Time, error) {
		rows, err := q.JobFreshnessByJob(ctx, pool, names)
		failures.Observe(ctx, err)
		if err != nil {
			// Logged once per outage above; the gauge is left out of
			// this scrape.
			return nil, nil
		}
		out := make(map[string]time.Time, len(rows))
		for _, r := range rows {
			out[r.Job] = r.Since
		}
		return out, nil
	})
}

// observeDeadlines exports, from any process, each job's standing against
// its deadline (BUILDRISK_DEADLINE_<JOB>), judged from the database as GET
// /v1/jobs judges it. A failed read is logged once per run of failures.
func observeDeadlines(pool *pgxpool.Pool, env *config.Config, tel *Telemetry) {
	if len(env.Deadlines) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(env.Deadlines))
	q := queries.New()
	failures := service.NewFailureLog("job deadline read", tel.Logger, 0)
	tel.Instruments.SetDeadlineSource(func(ctx context.Context) ([]observability.DeadlineSample, error) {
		rows, err := q.JobDeadlineFigures(ctx, pool, names)
		failures.Observe(ctx, err)
		if err != nil {
			return nil, nil // logged once per outage; left out of this scrape
		}
		now := env.TimeNow()
		out := make([]observability.DeadlineSample, 0, len(rows))
		for _, r := range rows {
			j := forecast.Judge(env.Deadlines[r.Job], forecast.Figures{
				ActiveSince: r.ActiveRequestCreatedAt, ForecastDoneAt: r.ForecastDoneAt, LastCompletedAt: r.LastCompletedAt,
			}, now)
			out = append(out, observability.DeadlineSample{Job: r.Job, ForecastLateBy: j.ForecastLateBy(), Missed: j.Missed})
		}
		return out, nil
	})
}

// observeCoverage exports, from any process, every job's coverage counted
// from the database (jobs/coverage, cached for BUILDRISK_COVERAGE_MAX_AGE),
// and returns the reader, which the api also serves as GET /v1/coverage.
// Every failed count is counted (buildrisk_coverage_check_failures_total);
// a run of failed scrapes (a database outage) is logged once.
func observeCoverage(ctx context.Context, pool *pgxpool.Pool, env *config.Config, tel *Telemetry) (*coverage.Reader, error) {
	r, err := coverage.New(pool, coverage.Config{
		Catalog: jobset.Catalog(), Location: env.Location, MaxAge: env.CoverageMaxAge, Now: env.TimeNow,
		OnError: func(ctx context.Context, job string, _ error) {
			tel.Instruments.CoverageCheckFailed(ctx, job)
		},
	})
	if err != nil {
		return nil, err
	}
	tel.Instruments.InitCoverageSeries(ctx, r.Jobs())
	failures := service.NewFailureLog("coverage count", tel.Logger, 0)
	tel.Instruments.SetCoverageSource(func(ctx context.Context) ([]observability.CoverageSample, error) {
		snap, err := r.Snapshot(ctx)
		failures.Observe(ctx, err)
		out := make([]observability.CoverageSample, len(snap))
		for i, c := range snap {
			y, m, d := c.DataDate.Date()
			out[i] = observability.CoverageSample{
				Job: c.Job, Targets: c.Targets, Missing: c.Missing(), AsOf: c.AsOf,
				DataDateStart: time.Date(y, m, d, 0, 0, 0, 0, env.Location),
			}
		}
		// A failed count is counted (OnError) and logged once per outage
		// above; its job is left out of this scrape.
		return out, nil
	})
	return r, nil
}

// fanOutJobs are the jobs whose chunks fan out over BUILDRISK_FANOUT slots
// (batch.FanOut).
var fanOutJobs = []string{credit.Name, stockprice.Name}

// observeFanOut exports buildrisk_fanout_capacity (BUILDRISK_FANOUT) and
// buildrisk_fanout_inflight (0) for every fan-out job from the worker's
// start, so a rule or a dashboard reading them sees a series before the
// first fan-out job ran.
func observeFanOut(ctx context.Context, env *config.Config, tel *Telemetry) {
	for _, job := range fanOutJobs {
		tel.Instruments.FanoutCapacitySet(ctx, job, int64(env.FanOut))
		tel.Instruments.FanoutInflightAdd(ctx, job, 0)
	}
}
