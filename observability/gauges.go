package observability

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// This file holds the gauges: the values a process sets (pool sizes,
// budgets, queue ages) and the observable gauges read from the database at
// collection time through a source function.

// CoverageSample is one job's coverage as the gauges export it.
type CoverageSample struct {
	Job     string
	Targets int64
	Missing int64
	// AsOf is when the counts were taken.
	AsOf time.Time
	// DataDateStart is the start of the data date in the job's zone.
	DataDateStart time.Time
}

// CoverageFunc returns every job's coverage counted from the database (a
// cached count: jobs/coverage), so every process exports the same values.
type CoverageFunc func(ctx context.Context) ([]CoverageSample, error)

// JobFreshnessFunc returns, per job, the time since which the job is
// expected to complete: the end of its newest COMPLETED execution (or,
// for a job that never completed, its schedule's first recorded due
// time). It reads the database, so every process exports the same values.
type JobFreshnessFunc func(ctx context.Context) (map[string]time.Time, error)

// DeadlineSample is one job's standing against its deadline.
type DeadlineSample struct {
	Job string
	// ForecastLateBy is the running execution's forecast end minus its
	// deadline; nil when no run is active or it has no pace yet.
	ForecastLateBy *time.Duration
	// Missed: the newest deadline passed without a COMPLETED run since the
	// one before it.
	Missed bool
}

// DeadlineFunc returns the standing of every job with a deadline, judged
// from the database, so every process exports the same values.
type DeadlineFunc func(ctx context.Context) ([]DeadlineSample, error)

// SetDeadlineSource makes the buildrisk_job_deadline_* gauges read f at
// every collection. Setting it again replaces f.
func (i *Instruments) SetDeadlineSource(f DeadlineFunc) {
	i.deadlines.Store(&f)
}

func (i *Instruments) observeDeadlines(ctx context.Context, o metric.Observer) error {
	f := i.deadlines.Load()
	if f == nil || *f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, freshnessTimeout)
	defer cancel()
	samples, err := (*f)(ctx)
	if err != nil {
		return fmt.Errorf("error reading job deadlines: %w", err)
	}
	for _, d := range samples {
		attrs := metric.WithAttributes(attrJob.String(d.Job))
		var missed int64
		if d.Missed {
			missed = 1
		}
		o.ObserveInt64(i.jobDeadlineMissed, missed, attrs)
		if d.ForecastLateBy != nil {
			o.ObserveFloat64(i.jobDeadlineForecast, d.ForecastLateBy.Seconds(), attrs)
		}
	}
	return nil
}

// freshnessTimeout bounds the database read behind one scrape.
const freshnessTimeout = 5 * time.Second

// SetCoverageSource makes the buildrisk_coverage_* gauges read f at every
// collection. Setting it again replaces f.
func (i *Instruments) SetCoverageSource(f CoverageFunc) {
	i.coverage.Store(&f)
}

func (i *Instruments) observeCoverage(ctx context.Context, o metric.Observer) error {
	f := i.coverage.Load()
	if f == nil || *f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, freshnessTimeout)
	defer cancel()
	samples, err := (*f)(ctx)
	// A failed job is left out of samples; the others are still exported.
	for _, c := range samples {
		attrs := metric.WithAttributes(attrJob.String(c.Job))
		o.ObserveInt64(i.coverageTargets, c.Targets, attrs)
		o.ObserveInt64(i.coverageMissing, c.Missing, attrs)
		o.ObserveFloat64(i.coverageAsOf, float64(c.AsOf.UnixNano())/1e9, attrs)
		o.ObserveFloat64(i.coverageDataDate, float64(c.DataDateStart.Unix()), attrs)
	}
	if err != nil {
		return fmt.Errorf("error reading coverage: %w", err)
	}
	return nil
}

// DatabaseUpSet records whether the process's last database probe
// succeeded. Every process records it on its heartbeat or probe, from its
// start, so /metrics (which never needs the database) says 0 while the
// database is down: the alert BuildriskDatabaseDown reads it.
func (i *Instruments) DatabaseUpSet(ctx context.Context, up bool) {
	var v int64
	if up {
		v = 1
	}
	i.databaseUp.Record(ctx, v)
}

// DatabaseSyncReplicationSet records whether the database the process
// reaches acknowledges a commit only once a synchronous standby has it: a
// failover then loses no acknowledged commit. Every process records it on
// its database probe; the alert BuildriskDatabaseReplicationAsync reads it.
func (i *Instruments) DatabaseSyncReplicationSet(ctx context.Context, on bool) {
	var v int64
	if on {
		v = 1
	}
	i.databaseSyncRepl.Record(ctx, v)
}

// FanoutCapacitySet records the size n of job's fan-out pool.
func (i *Instruments) FanoutCapacitySet(ctx context.Context, job string, n int64) {
	i.fanoutCapacity.Record(ctx, n, metric.WithAttributes(attrJob.String(job)))
}

// ProviderCallsRemainingSet records the n calls left today under provider's
// daily cap.
func (i *Instruments) ProviderCallsRemainingSet(ctx context.Context, provider string, n int64) {
	i.providerCallsRemaining.Record(ctx, n, metric.WithAttributes(attrProvider.String(provider)))
}

// ProviderDailyCapSet records provider's daily cap n. Record it whenever the
// remaining calls are recorded so alert BuildriskProviderBudgetLow can
// compute the fraction left.
func (i *Instruments) ProviderDailyCapSet(ctx context.Context, provider string, n int64) {
	i.providerDailyCap.Record(ctx, n, metric.WithAttributes(attrProvider.String(provider)))
}

// WorkersAliveSet records n, the number of workers whose heartbeat is fresh.
func (i *Instruments) WorkersAliveSet(ctx context.Context, n int64) {
	i.workersAlive.Record(ctx, n)
}

// QueueOldestAgeSet records the age in seconds of job's oldest QUEUED
// request. Record 0 when nothing is queued: a gauge keeps its last value, so
// not recording would leave a stale age on the dashboard. Negative values
// (clock skew) are recorded as 0.
func (i *Instruments) QueueOldestAgeSet(ctx context.Context, job string, seconds float64) {
	i.queueOldestAge.Record(ctx, max(seconds, 0), metric.WithAttributes(attrJob.String(job)))
}

// SchedulePeriodSet records the longest gap d between two due times of
// job's schedule. Record it once at startup for every scheduled job, in
// every process, so the freshness alert knows each job's period.
func (i *Instruments) SchedulePeriodSet(ctx context.Context, job string, d time.Duration) {
	i.schedulePeriod.Record(ctx, d.Seconds(), metric.WithAttributes(attrJob.String(job)))
}

// SetJobFreshnessSource makes buildrisk_job_last_completed_timestamp_seconds
// read f at every collection (a scrape). Setting it again replaces f, so
// one process running several roles reads the database once per scrape.
func (i *Instruments) SetJobFreshnessSource(f JobFreshnessFunc) {
	i.freshness.Store(&f)
}

func (i *Instruments) observeFreshness(ctx context.Context, o metric.Observer) error {
	f := i.freshness.Load()
	if f == nil || *f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, freshnessTimeout)
	defer cancel()
	since, err := (*f)(ctx)
	if err != nil {
		return fmt.Errorf("error reading job freshness: %w", err)
	}
	for job, t := range since {
		o.ObserveFloat64(i.jobLastCompleted, float64(t.UnixNano())/1e9, metric.WithAttributes(attrJob.String(job)))
	}
	return nil
}
