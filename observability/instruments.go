package observability

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// This file is THE list of buildrisk-radar's metric instruments. Add an
// instrument here (and to MetricNames, the dashboards and the alert rules)
// or not at all. The values its attributes may take are in values.go, the
// recording methods of counters and histograms in recording.go, and the
// gauges in gauges.go.
//
// How OTel names become Prometheus names (exporters/prometheus, default
// UnderscoreEscapingWithSuffixes): dots become underscores; a unit "s" adds
// "_seconds"; a unit in braces such as "{call}" is an annotation and adds
// nothing (unit "1" would add "_ratio" to gauges, so it is never used here);
// a monotonic counter adds "_total"; an UpDownCounter is a gauge and adds
// nothing. TestInstrumentsScrapedNames proves the result.

// ScopeName is the instrumentation scope of every instrument. It shows up
// as the otel_scope_name label on every buildrisk_* series.
const ScopeName = "github.com/buildrisk/radar/observability"

// Prometheus names, as scraped, of every instrument in [Instruments].
const (
	MetricAuthFailures           = "buildrisk_auth_failures_total"
	MetricAutoResumes            = "buildrisk_auto_resumes_total"
	MetricAutoResumesRefused     = "buildrisk_auto_resumes_refused_total"
	MetricChunkDuration          = "buildrisk_chunk_duration_seconds"
	MetricCommitsLost            = "buildrisk_commits_lost_total"
	MetricCoverageAsOf           = "buildrisk_coverage_as_of_timestamp_seconds"
	MetricCoverageCheckFailures  = "buildrisk_coverage_check_failures_total"
	MetricCoverageDataDate       = "buildrisk_coverage_data_date_timestamp_seconds"
	MetricCoverageMissing        = "buildrisk_coverage_missing"
	MetricCoverageTargets        = "buildrisk_coverage_targets"
	MetricDatabaseFailovers      = "buildrisk_database_failovers_total"
	MetricDatabaseSplitBrain     = "buildrisk_database_split_brain"
	MetricDatabaseSyncRepl       = "buildrisk_database_sync_replication"
	MetricDatabaseUp             = "buildrisk_database_up"
	MetricExecutions             = "buildrisk_executions_total"
	MetricExecutionsStopped      = "buildrisk_executions_stopped_total"
	MetricExternalCalls          = "buildrisk_external_calls_total"
	MetricFanoutCapacity         = "buildrisk_fanout_capacity"
	MetricFanoutInflight         = "buildrisk_fanout_inflight"
	MetricFanoutRejections       = "buildrisk_fanout_rejections_total"
	MetricHTTPRefusals           = "buildrisk_http_refusals_total"
	MetricItems                  = "buildrisk_items_total"
	MetricOwnershipLost          = "buildrisk_ownership_lost_total"
	MetricJobDeadlineForecast    = "buildrisk_job_deadline_forecast_seconds"
	MetricJobDeadlineMissed      = "buildrisk_job_deadline_missed"
	MetricJobLastCompleted       = "buildrisk_job_last_completed_timestamp_seconds"
	MetricLedgerReasserted       = "buildrisk_ledger_reasserted_calls_total"
	MetricProviderCallsRemaining = "buildrisk_provider_calls_remaining"
	MetricProviderDailyCap       = "buildrisk_provider_daily_cap"
	MetricQueueOldestAge         = "buildrisk_queue_oldest_age_seconds"
	MetricRateLimited            = "buildrisk_rate_limited_total"
	MetricRequestStartLatency    = "buildrisk_request_start_latency_seconds"
	MetricRequests               = "buildrisk_requests_total"
	MetricRequestsFailed         = "buildrisk_requests_failed_total"
	MetricScheduleMissed         = "buildrisk_schedule_missed_total"
	MetricSchedulePeriod         = "buildrisk_schedule_period_seconds"
	MetricScheduleTicks          = "buildrisk_schedule_ticks_total"
	MetricWorkerStaleHeartbeats  = "buildrisk_worker_stale_heartbeats_total"
	MetricWorkersAlive           = "buildrisk_workers_alive"
)

// MetricNames lists the Prometheus names, as scraped, of every instrument in
// [Instruments], in alphabetical order. Histograms are listed by their base
// name (their series add _bucket, _sum and _count). Alert rules, dashboards
// and tests in other packages compare against it. Don't modify it.
var MetricNames = []string{
	MetricAuthFailures,
	MetricAutoResumesRefused,
	MetricAutoResumes,
	MetricChunkDuration,
	MetricCommitsLost,
	MetricCoverageAsOf,
	MetricCoverageCheckFailures,
	MetricCoverageDataDate,
	MetricCoverageMissing,
	MetricCoverageTargets,
	MetricDatabaseFailovers,
	MetricDatabaseSplitBrain,
	MetricDatabaseSyncRepl,
	MetricDatabaseUp,
	MetricExecutionsStopped,
	MetricExecutions,
	MetricExternalCalls,
	MetricFanoutCapacity,
	MetricFanoutInflight,
	MetricFanoutRejections,
	MetricHTTPRefusals,
	MetricItems,
	MetricJobDeadlineForecast,
	MetricJobDeadlineMissed,
	MetricJobLastCompleted,
	MetricLedgerReasserted,
	MetricOwnershipLost,
	MetricProviderCallsRemaining,
	MetricProviderDailyCap,
	MetricQueueOldestAge,
	MetricRateLimited,
	MetricRequestStartLatency,
	MetricRequestsFailed,
	MetricRequests,
	MetricScheduleMissed,
	MetricSchedulePeriod,
	MetricScheduleTicks,
	MetricWorkerStaleHeartbeats,
	MetricWorkersAlive,
}

// HistogramNames lists the names in [MetricNames] that are histograms: their
// series are name_bucket, name_sum and name_count. Don't modify it.
var HistogramNames = []string{
	MetricChunkDuration,
	MetricRequestStartLatency,
}

// Bucket boundaries of the histograms, in seconds. OTel's default buckets
// (0 … 10000) are meant for milliseconds and would put every chunk in the
// first few buckets.
var (
	chunkDurationBuckets       = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	requestStartLatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600}
)

// Attribute keys. They are the label names on /metrics.
const (
	attrCause    = attribute.Key("cause")
	attrJob      = attribute.Key("job")
	attrOutcome  = attribute.Key("outcome")
	attrProvider = attribute.Key("provider")
	attrReason   = attribute.Key("reason")
	attrResult   = attribute.Key("result")
	attrSource   = attribute.Key("source")
	attrStatus   = attribute.Key("status")
)

// Instruments is the one set of metric instruments of buildrisk-radar. Every
// package records through its methods, which fix each instrument's name,
// unit and attributes, so names can't be misspelled and no unbounded
// attribute can be attached.
//
// Attribute values and their bounds:
//   - job: a job name from the catalog (aptTrade, corpCodeSync, filingParse,
//     stockPrice, creditEval, metrics, rules).
//   - provider: an upstream provider (DART, MOLIT, KRX, CREDIT).
//   - source, result, status, outcome, reason: the constants of this
//     package; any other value is recorded as [ValueOther].
//
// Never pass request ids, execution ids or worker ids: they belong in logs
// and spans. Create one Instruments per process with [NewInstruments] and
// share it; its methods are safe for concurrent use.
type Instruments struct {
	// hot holds the attribute sets of the measurements a run makes per
	// item or per call (ExternalCall, FanoutInflightAdd, ItemsCounted),
	// built once per distinct value instead of at every call.
	hot                    attrSets
	authFailures           metric.Int64Counter
	autoResumes            metric.Int64Counter
	autoResumesRefused     metric.Int64Counter
	chunkDuration          metric.Float64Histogram
	commitsLost            metric.Int64Counter
	coverageAsOf           metric.Float64ObservableGauge
	coverageCheckFailures  metric.Int64Counter
	coverageDataDate       metric.Float64ObservableGauge
	coverageMissing        metric.Int64ObservableGauge
	coverageTargets        metric.Int64ObservableGauge
	databaseFailovers      metric.Int64Counter
	databaseSplitBrain     metric.Int64Gauge
	databaseSyncRepl       metric.Int64Gauge
	databaseUp             metric.Int64Gauge
	executions             metric.Int64Counter
	executionsStopped      metric.Int64Counter
	externalCalls          metric.Int64Counter
	fanoutCapacity         metric.Int64Gauge
	fanoutInflight         metric.Int64UpDownCounter
	fanoutRejections       metric.Int64Counter
	httpRefusals           metric.Int64Counter
	items                  metric.Int64Counter
	ownershipLost          metric.Int64Counter
	jobDeadlineForecast    metric.Float64ObservableGauge
	jobDeadlineMissed      metric.Int64ObservableGauge
	jobLastCompleted       metric.Float64ObservableGauge
	ledgerReasserted       metric.Int64Counter
	providerCallsRemaining metric.Int64Gauge
	providerDailyCap       metric.Int64Gauge
	queueOldestAge         metric.Float64Gauge
	requestStartLatency    metric.Float64Histogram
	requests               metric.Int64Counter
	requestsFailed         metric.Int64Counter
	scheduleMissed         metric.Int64Counter
	schedulePeriod         metric.Float64Gauge
	scheduleTicks          metric.Int64Counter
	workerStaleHeartbeats  metric.Int64Counter
	rateLimited            metric.Int64Counter
	workersAlive           metric.Int64Gauge

	// freshness is the source of buildrisk_job_last_completed_timestamp_seconds
	// (see SetJobFreshnessSource); nil exports no series.
	freshness atomic.Pointer[JobFreshnessFunc]
	// coverage is the source of the buildrisk_coverage_* gauges (see
	// SetCoverageSource); nil exports no series.
	coverage atomic.Pointer[CoverageFunc]
	// deadlines is the source of the buildrisk_job_deadline_* gauges (see
	// SetDeadlineSource); nil exports no series.
	deadlines atomic.Pointer[DeadlineFunc]
}

// NewInstruments creates every instrument on a meter of mp named
// [ScopeName]. It also sets buildrisk_worker_stale_heartbeats_total and
// buildrisk_database_failovers_total, which have no attributes, to 0 so
// that the first stale worker or failover is an increase an alert can see. Returns an error if the meter refuses an instrument.
func NewInstruments(mp metric.MeterProvider) (*Instruments, error) {
	meter := mp.Meter(ScopeName)
	var (
		i    Instruments
		errs []error
	)
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	i.createFirstThird(meter, check)
	i.createSecondThird(meter, check)
	i.createLastThird(meter, check)

	if len(errs) > 0 {
		return nil, fmt.Errorf("error creating instruments: %w", errors.Join(errs...))
	}

	i.workerStaleHeartbeats.Add(context.Background(), 0)
	i.databaseFailovers.Add(context.Background(), 0)
	i.databaseSplitBrain.Record(context.Background(), 0)
	return &i, nil
}

// createFirstThird creates the list's instruments from fan-out rejections to database failovers, in its
// order (NewInstruments is split in three only for length).
func (i *Instruments) createFirstThird(meter metric.Meter, check func(error)) {
	var err error
	// buildrisk_fanout_rejections_total{job,reason}: items of a fan-out
	// refused instead of processed. reason: one of fanoutReasons.
	i.fanoutRejections, err = meter.Int64Counter("buildrisk.fanout.rejections",
		metric.WithDescription("Items of a job's fan-out refused instead of processed, by reason; closed, queue_full and submit_failed are losses and should always be 0."),
		metric.WithUnit("{item}"))
	check(err)

	// buildrisk_auth_failures_total{via}: failed credential checks (a wrong
	// bearer token, a wrong login token); via: AuthViaBearer, AuthViaLogin.
	i.authFailures, err = meter.Int64Counter("buildrisk.auth.failures",
		metric.WithDescription("Failed credential checks of the api (a wrong bearer token or login), by via (bearer, login); a burst is someone guessing tokens."),
		metric.WithUnit("{attempt}"))
	check(err)

	// buildrisk_rate_limited_total{role}: requests of a valid token
	// answered 429 because the token spent its BUILDRISK_TOKEN_RATE_LIMIT;
	// role: RoleViewer, RoleOperator.
	i.rateLimited, err = meter.Int64Counter("buildrisk.rate_limited",
		metric.WithDescription("Requests of a valid token refused (429) past its per-minute budget (BUILDRISK_TOKEN_RATE_LIMIT), by the token's role (viewer, operator)."),
		metric.WithUnit("{request}"))
	check(err)

	// buildrisk_worker_stale_heartbeats_total: workers the reaper found
	// silent for longer than the stale threshold. No attributes.
	i.workerStaleHeartbeats, err = meter.Int64Counter("buildrisk.worker.stale_heartbeats",
		metric.WithDescription("Workers reaped because their heartbeat went stale."),
		metric.WithUnit("{worker}"))
	check(err)

	// buildrisk_requests_total{job,source,result}: requests to run a job.
	i.requests, err = meter.Int64Counter("buildrisk.requests",
		metric.WithDescription("Requests to run a job, by source and result (accepted, duplicate, invalid)."),
		metric.WithUnit("{request}"))
	check(err)

	// buildrisk_requests_failed_total{job,reason}: requests failed without
	// an outcome of their own run (orphaned, start_failed).
	i.requestsFailed, err = meter.Int64Counter("buildrisk.requests.failed",
		metric.WithDescription("Requests failed without an outcome of their own run, by reason (orphaned, start_failed)."),
		metric.WithUnit("{request}"))
	check(err)

	// buildrisk_commits_lost_total{job}: commits the database acknowledged
	// and then did not hold (a failover to an asynchronous replica), found
	// by a run's check of its plan against the database and done again.
	i.commitsLost, err = meter.Int64Counter("buildrisk.commits_lost",
		metric.WithDescription("Commits the database acknowledged and then lost (a failover to an asynchronous replica), found and done again."),
		metric.WithUnit("{commit}"))
	check(err)

	// buildrisk_ownership_lost_total{job}: runs that found their execution
	// no longer theirs (abandoned, or taken over by a newer lease epoch) and
	// stopped without writing.
	i.ownershipLost, err = meter.Int64Counter("buildrisk.ownership_lost",
		metric.WithDescription("Runs that lost the ownership of their execution (abandoned or taken over) and stopped without writing."),
		metric.WithUnit("{execution}"))
	check(err)

	// buildrisk_executions_total{job,status}: executions that ended, by
	// final status (COMPLETED, STOPPED, FAILED, ABANDONED).
	i.executions, err = meter.Int64Counter("buildrisk.executions",
		metric.WithDescription("Job executions that ended, by final status."),
		metric.WithUnit("{execution}"))
	check(err)

	// buildrisk_executions_stopped_total{job,cause}: executions that ended
	// STOPPED, by what stopped them (stopCauses).
	i.executionsStopped, err = meter.Int64Counter("buildrisk.executions.stopped",
		metric.WithDescription("Job executions that ended STOPPED, by cause: cap (a provider's daily cap), max_calls (the request's maxCalls), provider-rate (a provider's Retry-After past the client's backoff), operator (a stop), drain (a worker shutting down)."),
		metric.WithUnit("{execution}"))
	check(err)

	// buildrisk_database_up: 1 while the process's last database probe (a
	// worker's heartbeat, the api's probe) succeeded, 0 after one failed.
	i.databaseUp, err = meter.Int64Gauge("buildrisk.database.up",
		metric.WithDescription("1 when the process's last database probe (worker heartbeat, api probe) succeeded, 0 when it failed: the database is unreachable from this process."),
		metric.WithUnit("{up}"))
	check(err)

	// buildrisk_database_failovers_total: changes of the database's
	// identity (system identifier, timeline) the process's probe saw: a
	// promoted replica, or another cluster behind the same URL. No
	// attributes.
	i.databaseFailovers, err = meter.Int64Counter("buildrisk.database.failovers",
		metric.WithDescription("Changes of the database's identity (system identifier or timeline) seen by the process's database probe: a replica was promoted (a failover) or the URL now reaches another cluster. With asynchronous replication the last acknowledged commits may be missing."),
		metric.WithUnit("{failover}"))
	check(err)
}

// createSecondThird creates the list's instruments from sync replication to auto-resumes, in its
// order (NewInstruments is split in three only for length).
func (i *Instruments) createSecondThird(meter metric.Meter, check func(error)) {
	var err error
	// buildrisk_database_sync_replication: 1 while the database the probe
	// reaches makes every commit wait for a synchronous standby.
	i.databaseSyncRepl, err = meter.Int64Gauge("buildrisk.database.sync_replication",
		metric.WithDescription("1 when the database the process reaches acknowledges a commit only once a synchronous standby has it (synchronous_standby_names set and synchronous_commit on or remote_apply, as the process's sessions see them), 0 otherwise: a failover may then lose the last acknowledged commits."),
		metric.WithUnit("{on}"))
	check(err)

	// buildrisk_items_total{job,outcome}: target items by outcome (written,
	// skipped, failed, unaccounted).
	i.items, err = meter.Int64Counter("buildrisk.items",
		metric.WithDescription("Target items of chunked jobs, by outcome; unaccounted items fail the execution."),
		metric.WithUnit("{item}"))
	check(err)

	// buildrisk_external_calls_total{provider,outcome}: upstream calls by
	// outcome (ok, error, capped).
	i.externalCalls, err = meter.Int64Counter("buildrisk.external_calls",
		metric.WithDescription("Calls to upstream providers, by outcome; capped calls were not made."),
		metric.WithUnit("{call}"))
	check(err)

	// buildrisk_chunk_duration_seconds{job}: wall time of one chunk (read,
	// process, write + checkpoint).
	i.chunkDuration, err = meter.Float64Histogram("buildrisk.chunk.duration",
		metric.WithDescription("Duration of one chunk: read, process and the write + checkpoint transaction."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(chunkDurationBuckets...))
	check(err)

	// buildrisk_fanout_inflight{job}: items currently holding a fan-out slot.
	i.fanoutInflight, err = meter.Int64UpDownCounter("buildrisk.fanout.inflight",
		metric.WithDescription("Items currently holding a slot of a job's fan-out pool."),
		metric.WithUnit("{item}"))
	check(err)

	// buildrisk_fanout_capacity{job}: the fan-out pool's size.
	i.fanoutCapacity, err = meter.Int64Gauge("buildrisk.fanout.capacity",
		metric.WithDescription("Slots of a job's fan-out pool."),
		metric.WithUnit("{slot}"))
	check(err)

	// buildrisk_provider_calls_remaining{provider}: calls left today under
	// the provider's daily cap, shared by all workers.
	i.providerCallsRemaining, err = meter.Int64Gauge("buildrisk.provider.calls_remaining",
		metric.WithDescription("Calls left today under the provider's daily cap."),
		metric.WithUnit("{call}"))
	check(err)

	// buildrisk_provider_daily_cap{provider}: the provider's daily cap, so
	// alerts can compare calls_remaining against it.
	i.providerDailyCap, err = meter.Int64Gauge("buildrisk.provider.daily_cap",
		metric.WithDescription("The provider's daily call cap."),
		metric.WithUnit("{call}"))
	check(err)

	// buildrisk_workers_alive: workers whose heartbeat is fresh.
	i.workersAlive, err = meter.Int64Gauge("buildrisk.workers.alive",
		metric.WithDescription("Workers whose heartbeat is fresh, as seen in the worker registry."),
		metric.WithUnit("{worker}"))
	check(err)

	// buildrisk_queue_oldest_age_seconds{job}: age of the oldest QUEUED
	// request of the job; 0 when none is queued.
	i.queueOldestAge, err = meter.Float64Gauge("buildrisk.queue.oldest_age",
		metric.WithDescription("Age of the job's oldest QUEUED request; 0 when none is queued."),
		metric.WithUnit("s"))
	check(err)

	// buildrisk_request_start_latency_seconds{job}: time from enqueue to
	// start of a request.
	i.requestStartLatency, err = meter.Float64Histogram("buildrisk.request.start_latency",
		metric.WithDescription("Time from a request's enqueue to its start on a worker."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(requestStartLatencyBuckets...))
	check(err)

	// buildrisk_auto_resumes_total{job,cause}: runs stopped by
	// infrastructure or a provider's Retry-After that the system resumed by
	// itself.
	i.autoResumes, err = meter.Int64Counter("buildrisk.auto_resumes",
		metric.WithDescription("Runs stopped by infrastructure (drain, reap of a dead or cut-off worker, database outage) or by a provider's Retry-After (provider-rate) that resumed by themselves, by cause."),
		metric.WithUnit("{request}"))
	check(err)
}

// createLastThird creates the list's instruments from refused resumes to HTTP refusals, in its
// order (NewInstruments is split in three only for length).
func (i *Instruments) createLastThird(meter metric.Meter, check func(error)) {
	var err error
	// buildrisk_auto_resumes_refused_total{job,cause}: automatic resumes
	// refused because the instance spent the day's attempts (or its params
	// no longer validate). Any increase pages: the run stays stopped.
	i.autoResumesRefused, err = meter.Int64Counter("buildrisk.auto_resumes_refused",
		metric.WithDescription("Automatic resumes refused because the instance used every attempt of the day; the run stays stopped until someone acts."),
		metric.WithUnit("{request}"))
	check(err)

	// buildrisk_schedule_ticks_total{job,outcome}: due times of a job's
	// schedule by what the scheduler did with them (tickOutcomes).
	i.scheduleTicks, err = meter.Int64Counter("buildrisk.schedule.ticks",
		metric.WithDescription("Due times of a job's schedule, by outcome: enqueued, coalesced, deferred (waited for an active request), missed (older than the catch-up window), failed (enqueue refused or failed)."),
		metric.WithUnit("{tick}"))
	check(err)

	// buildrisk_schedule_missed_total{job}: due times recorded missed.
	i.scheduleMissed, err = meter.Int64Counter("buildrisk.schedule.missed",
		metric.WithDescription("Due times of a job's schedule older than its catch-up window when a scheduler first saw them; recorded and never run."),
		metric.WithUnit("{tick}"))
	check(err)

	// buildrisk_schedule_period_seconds{job}: the longest gap between two
	// due times of the job's schedule, which the freshness alert allows.
	i.schedulePeriod, err = meter.Float64Gauge("buildrisk.schedule.period",
		metric.WithDescription("Longest gap between two consecutive due times of the job's schedule: the job is expected to complete at least this often."),
		metric.WithUnit("s"))
	check(err)

	// buildrisk_job_last_completed_timestamp_seconds{job}: read from the
	// database at collection time through the freshness source.
	i.jobLastCompleted, err = meter.Float64ObservableGauge("buildrisk.job.last_completed_timestamp",
		metric.WithDescription("Unix time of the end of the job's newest COMPLETED execution (for a scheduled job that never completed: its first recorded due time), read from the database."),
		metric.WithUnit("s"))
	check(err)
	if err == nil {
		_, err = meter.RegisterCallback(i.observeFreshness, i.jobLastCompleted)
		check(err)
	}

	// buildrisk_job_deadline_forecast_seconds{job} and
	// buildrisk_job_deadline_missed{job}: read from the database at
	// collection time through the deadline source, for the jobs with a
	// deadline (BUILDRISK_DEADLINE_<JOB>).
	i.jobDeadlineForecast, err = meter.Float64ObservableGauge("buildrisk.job.deadline_forecast",
		metric.WithDescription("The running execution's forecast end minus its deadline (positive: late); exported only while a run of a job with a deadline is active and has a pace."),
		metric.WithUnit("s"))
	check(err)
	i.jobDeadlineMissed, err = meter.Int64ObservableGauge("buildrisk.job.deadline_missed",
		metric.WithDescription("1 when the job's newest deadline passed without a COMPLETED execution since the deadline before it (and none since), else 0; exported for the jobs with a deadline."),
		metric.WithUnit("{deadline}"))
	check(err)
	if err == nil {
		_, err = meter.RegisterCallback(i.observeDeadlines, i.jobDeadlineForecast, i.jobDeadlineMissed)
		check(err)
	}

	// buildrisk_coverage_targets{job}, buildrisk_coverage_missing{job},
	// buildrisk_coverage_as_of_timestamp_seconds{job}: read from the
	// database (cached) at collection time through the coverage source.
	i.coverageTargets, err = meter.Int64ObservableGauge("buildrisk.coverage.targets",
		metric.WithDescription("Targets the job's source of truth names for its data date (jobs.Coverage), counted from the domain tables."),
		metric.WithUnit("{target}"))
	check(err)
	i.coverageMissing, err = meter.Int64ObservableGauge("buildrisk.coverage.missing",
		metric.WithDescription("Targets without the job's current row for its data date, counted from the domain tables: rows lost or never written, whatever the runs reported."),
		metric.WithUnit("{target}"))
	check(err)
	i.coverageAsOf, err = meter.Float64ObservableGauge("buildrisk.coverage.as_of_timestamp",
		metric.WithDescription("Unix time the job's coverage counts were taken."),
		metric.WithUnit("s"))
	check(err)
	// buildrisk_coverage_data_date_timestamp_seconds{job}: the start of the
	// data date, so an alert can tell a COMPLETED run of that date.
	i.coverageDataDate, err = meter.Float64ObservableGauge("buildrisk.coverage.data_date_timestamp",
		metric.WithDescription("Unix time of the start (in BUILDRISK_TIMEZONE) of the data date the job's coverage counts."),
		metric.WithUnit("s"))
	check(err)
	if i.coverageTargets != nil && i.coverageMissing != nil && i.coverageAsOf != nil && i.coverageDataDate != nil {
		_, err = meter.RegisterCallback(i.observeCoverage, i.coverageTargets, i.coverageMissing, i.coverageAsOf, i.coverageDataDate)
		check(err)
	}

	// buildrisk_coverage_check_failures_total{job}: coverage counts that
	// could not run (the gauges then keep no value for the job).
	i.coverageCheckFailures, err = meter.Int64Counter("buildrisk.coverage.check_failures",
		metric.WithDescription("Coverage counts of a job that failed (database error or timeout): while it grows, the coverage gauges of the job are missing, not zero."),
		metric.WithUnit("{check}"))
	check(err)

	// buildrisk_http_refusals_total{reason}: answers refused before any
	// work: 413 (body too large) and 503 (database unavailable).
	i.httpRefusals, err = meter.Int64Counter("buildrisk.http.refusals",
		metric.WithDescription("HTTP answers refused by the api before doing the work, by reason: body_too_large (413) or database_unavailable (503, with Retry-After)."),
		metric.WithUnit("{response}"))
	check(err)

	// buildrisk_database_split_brain: 1 while two hosts of one database
	// system named by DATABASE_URL answer read-write (a demoted primary
	// still taking writes beside the promoted one), 0 otherwise.
	i.databaseSplitBrain, err = meter.Int64Gauge("buildrisk.database.split_brain",
		metric.WithDescription("1 while two hosts of one database system named by DATABASE_URL answer read-write (a split brain: the process writes only to the higher timeline), 0 otherwise."),
		metric.WithUnit("{on}"))
	check(err)

	// buildrisk_ledger_reasserted_calls_total{provider}: provider calls a
	// worker charged again to the daily budget after a failover because
	// the promoted primary had lost their charge.
	i.ledgerReasserted, err = meter.Int64Counter("buildrisk.ledger.reasserted_calls",
		metric.WithDescription("Provider calls a worker charged again to the day's call budget after a failover, because the promoted primary had lost their charge (asynchronous replication)."),
		metric.WithUnit("{call}"))
	check(err)
}

// DatabaseSplitBrainSet records whether two hosts of one database system
// answer read-write; the alert BuildriskDatabaseSplitBrain reads it.
func (i *Instruments) DatabaseSplitBrainSet(ctx context.Context, on bool) {
	var v int64
	if on {
		v = 1
	}
	i.databaseSplitBrain.Record(ctx, v)
}

// LedgerReasserted counts n calls of provider charged again to the day's
// budget after a failover lost their charge.
func (i *Instruments) LedgerReasserted(ctx context.Context, provider string, n int64) {
	i.ledgerReasserted.Add(ctx, n, metric.WithAttributes(attrProvider.String(provider)))
}
