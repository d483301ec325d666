package observability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// This file is THE list of buildrisk-radar's metric instruments. Add an
// instrument here (and to MetricNames, the dashboards and the alert rules)
// or not at all.
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

// ValueOther replaces an enumerated attribute value (result, source, status,
// outcome, reason) that is not one of the documented constants. A typo then
// shows up as a single "other" series on the dashboards instead of creating
// an unbounded number of new series.
const ValueOther = "other"

// Values of the source attribute of buildrisk_requests_total: who asked for
// the run.
const (
	SourceAPI      = "api"
	SourceChain    = "chain"
	SourceCLI      = "cli"
	SourceSchedule = "schedule"
	// SourceResume is a request the system inserted to resume a run that
	// infrastructure (a drain, a reap) stopped.
	SourceResume = "resume"
)

// Values of the result attribute of buildrisk_requests_total: what became of
// a request to run a job.
const (
	// ResultAccepted is a request that was enqueued (202).
	ResultAccepted = "accepted"
	// ResultDuplicate is a request refused because the job already has a
	// QUEUED or RUNNING request (409).
	ResultDuplicate = "duplicate"
	// ResultInvalid is a request refused for bad params or an estimate over
	// the cap (400).
	ResultInvalid = "invalid"
)

// Values of the status attribute of buildrisk_executions_total: an
// execution's final status.
const (
	StatusAbandoned = "ABANDONED"
	StatusCompleted = "COMPLETED"
	StatusFailed    = "FAILED"
	StatusStopped   = "STOPPED"
)

// Values of the cause attribute of buildrisk_executions_stopped_total: what
// stopped an execution that ended STOPPED. StopCap and StopMaxCalls feed the
// alert BuildriskRunCapped.
const (
	// StopCap is a provider's daily cap reached (resumable tomorrow).
	StopCap = "cap"
	// StopDrain is a worker shutting down (resumable at once).
	StopDrain = "drain"
	// StopMaxCalls is the request's maxCalls reached (resumable).
	StopMaxCalls = "max_calls"
	// StopOperator is an operator's stop.
	StopOperator = "operator"
)

// stopCauses lists every allowed value of the cause attribute of
// buildrisk_executions_stopped_total.
var stopCauses = []string{StopCap, StopDrain, StopMaxCalls, StopOperator}

// Values of the outcome attribute of buildrisk_items_total: what became of
// the items a chunked job declared as its targets.
const (
	OutcomeFailed  = "failed"
	OutcomeSkipped = "skipped"
	// OutcomeUnaccounted counts targets that are neither written, skipped nor
	// failed when an execution ends: items lost without a trace, which make
	// the execution FAILED and page someone.
	OutcomeUnaccounted = "unaccounted"
	OutcomeWritten     = "written"
)

// Values of the reason attribute of buildrisk_requests_failed_total: why a
// request was failed without its job running to an outcome of its own.
const (
	// ReasonOrphaned is a QUEUED request nobody will run (its River job
	// ended, or its worker died before starting it), failed by the reaper.
	ReasonOrphaned = "orphaned"
	// ReasonStartFailed is a request whose run could not start (its job is
	// not registered in the process that took it, another execution of the
	// job is still active, the start failed): failed with that error.
	ReasonStartFailed = "start_failed"
)

// requestFailedReasons lists every allowed value of the reason attribute of
// buildrisk_requests_failed_total.
var requestFailedReasons = []string{ReasonOrphaned, ReasonStartFailed}

// Values of the outcome attribute of buildrisk_external_calls_total.
const (
	// CallCapped is a call not made because the provider's daily cap was
	// reached.
	CallCapped = "capped"
	// CallError is a call made that failed.
	CallError = "error"
	// CallOK is a call made that succeeded.
	CallOK = "ok"
)

// Values of the reason attribute of buildrisk_fanout_rejections_total: why
// an item of a job's fan-out was refused instead of being processed.
//
// Two kinds. ReasonClosed, ReasonQueueFull and ReasonSubmitFailed mean the
// item was dropped: with backpressure before submit they should never be
// counted, and any increase pages (alert BuildriskFanoutRejections, severity
// critical). ReasonCap, ReasonProvider429 and ReasonProviderLimitLowered
// mean upstream pushed back: the item is not lost (a 429 is retried; a cap
// stops the job, resumable). The same alert names them by its reason label
// (deploy/prometheus/rules.yml), and the same calls are also counted by
// buildrisk_external_calls_total.
const (
	// ReasonCap is a call refused because the provider's daily cap or the
	// execution's maxCalls was reached (the job stops, resumable). Not a
	// loss.
	ReasonCap = "cap"
	// ReasonClosed is an item submitted after the pool was shut down. A
	// loss.
	ReasonClosed = "closed"
	// ReasonProvider429 is a provider refusing a call with 429 Too Many
	// Requests (the call is retried after Retry-After). Not a loss.
	ReasonProvider429 = "provider_429"
	// ReasonProviderLimitLowered is a provider refusing a call with 429
	// while its fleet-wide rate limit (BUILDRISK_RATE_<P>) is set: we stayed
	// under the rate we were given, so the provider's real limit is lower
	// (it lowered it, or the rate was set too high). The call is retried and
	// the whole fleet waits out the Retry-After. Not a loss.
	ReasonProviderLimitLowered = "provider_limit_lowered"
	// ReasonQueueFull is an item refused because a bounded queue was full:
	// the lost-events incident's failure, which backpressure is meant to make
	// impossible. A loss.
	ReasonQueueFull = "queue_full"
	// ReasonSubmitFailed is an item whose submit failed after a slot was
	// acquired (the slot is returned). A loss.
	ReasonSubmitFailed = "submit_failed"
)

// Values of the outcome attribute of buildrisk_schedule_ticks_total: what a
// scheduler did with one due time of a job's schedule. A due time is counted
// once as enqueued, coalesced, missed or failed, and additionally as
// deferred when it first had to wait.
const (
	// TickCoalesced is a due time whose params equal those of a request not
	// yet started or of a waiting due time: that one run serves both.
	TickCoalesced = "coalesced"
	// TickDeferred is a due time that met the job's active request: it
	// waits, recorded, and is enqueued when that request ends.
	TickDeferred = "deferred"
	// TickEnqueued is a due time whose request was inserted.
	TickEnqueued = "enqueued"
	// TickFailed is an attempt to enqueue a due time that failed: refused
	// params or estimate (recorded, not retried) or an error such as an
	// unreachable database (retried by the next pass within the catch-up
	// window). Any increase alerts.
	TickFailed = "failed"
	// TickMissed is a due time older than the catch-up window when a
	// scheduler first saw it (no leader ran in time). It is recorded and
	// never run; any increase alerts.
	TickMissed = "missed"
)

// tickOutcomes lists every allowed value of the outcome attribute of
// buildrisk_schedule_ticks_total.
var tickOutcomes = []string{TickCoalesced, TickDeferred, TickEnqueued, TickFailed, TickMissed}

// fanoutReasons lists every allowed value of the reason attribute.
var fanoutReasons = []string{ReasonCap, ReasonClosed, ReasonProvider429, ReasonProviderLimitLowered, ReasonQueueFull, ReasonSubmitFailed}

// Values of the cause attribute of buildrisk_auto_resumes_total and
// buildrisk_auto_resumes_refused_total: what stopped the run.
const (
	CauseDatabase = "database"
	CauseDrain    = "drain"
	CauseReap     = "reap"
)

// Prometheus names, as scraped, of every instrument in [Instruments].
const (
	MetricAuthFailures           = "buildrisk_auth_failures_total"
	MetricAutoResumes            = "buildrisk_auto_resumes_total"
	MetricAutoResumesRefused     = "buildrisk_auto_resumes_refused_total"
	MetricChunkDuration          = "buildrisk_chunk_duration_seconds"
	MetricCoverageAsOf           = "buildrisk_coverage_as_of_timestamp_seconds"
	MetricCoverageCheckFailures  = "buildrisk_coverage_check_failures_total"
	MetricCoverageDataDate       = "buildrisk_coverage_data_date_timestamp_seconds"
	MetricCoverageMissing        = "buildrisk_coverage_missing"
	MetricCoverageTargets        = "buildrisk_coverage_targets"
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
	MetricJobLastCompleted       = "buildrisk_job_last_completed_timestamp_seconds"
	MetricProviderCallsRemaining = "buildrisk_provider_calls_remaining"
	MetricProviderDailyCap       = "buildrisk_provider_daily_cap"
	MetricQueueOldestAge         = "buildrisk_queue_oldest_age_seconds"
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
	MetricCoverageAsOf,
	MetricCoverageCheckFailures,
	MetricCoverageDataDate,
	MetricCoverageMissing,
	MetricCoverageTargets,
	MetricDatabaseUp,
	MetricExecutionsStopped,
	MetricExecutions,
	MetricExternalCalls,
	MetricFanoutCapacity,
	MetricFanoutInflight,
	MetricFanoutRejections,
	MetricHTTPRefusals,
	MetricItems,
	MetricJobLastCompleted,
	MetricOwnershipLost,
	MetricProviderCallsRemaining,
	MetricProviderDailyCap,
	MetricQueueOldestAge,
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
	coverageAsOf           metric.Float64ObservableGauge
	coverageCheckFailures  metric.Int64Counter
	coverageDataDate       metric.Float64ObservableGauge
	coverageMissing        metric.Int64ObservableGauge
	coverageTargets        metric.Int64ObservableGauge
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
	jobLastCompleted       metric.Float64ObservableGauge
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
	workersAlive           metric.Int64Gauge

	// freshness is the source of buildrisk_job_last_completed_timestamp_seconds
	// (see SetJobFreshnessSource); nil exports no series.
	freshness atomic.Pointer[JobFreshnessFunc]
	// coverage is the source of the buildrisk_coverage_* gauges (see
	// SetCoverageSource); nil exports no series.
	coverage atomic.Pointer[CoverageFunc]
}

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

// Values of the reason attribute of buildrisk_http_refusals_total.
const (
	// RefusalBodyTooLarge is a 413: a body over BUILDRISK_MAX_BODY_BYTES.
	RefusalBodyTooLarge = "body_too_large"
	// RefusalUnavailable is a 503: the database unreachable, the pool
	// exhausted or a statement or lock timeout.
	RefusalUnavailable = "database_unavailable"
)

// refusalReasons lists every allowed value of the reason attribute of
// buildrisk_http_refusals_total.
var refusalReasons = []string{RefusalBodyTooLarge, RefusalUnavailable}

// JobFreshnessFunc returns, per job, the time since which the job is
// expected to complete: the end of its newest COMPLETED execution (or,
// for a job that never completed, its schedule's first recorded due
// time). It reads the database, so every process exports the same values.
type JobFreshnessFunc func(ctx context.Context) (map[string]time.Time, error)

// freshnessTimeout bounds the database read behind one scrape.
const freshnessTimeout = 5 * time.Second

// NewInstruments creates every instrument on a meter of mp named
// [ScopeName]. It also sets buildrisk_worker_stale_heartbeats_total, which
// has no attributes, to 0 so that the first stale worker is an increase an
// alert can see. Returns an error if the meter refuses an instrument.
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

	// buildrisk_fanout_rejections_total{job,reason}: items of a fan-out
	// refused instead of processed. reason: one of fanoutReasons.
	var err error
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
		metric.WithDescription("Job executions that ended STOPPED, by cause: cap (a provider's daily cap), max_calls (the request's maxCalls), operator (a stop), drain (a worker shutting down)."),
		metric.WithUnit("{execution}"))
	check(err)

	// buildrisk_database_up: 1 while the process's last database probe (a
	// worker's heartbeat, the api's probe) succeeded, 0 after one failed.
	i.databaseUp, err = meter.Int64Gauge("buildrisk.database.up",
		metric.WithDescription("1 when the process's last database probe (worker heartbeat, api probe) succeeded, 0 when it failed: the database is unreachable from this process."),
		metric.WithUnit("{up}"))
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
	// infrastructure that the system resumed by itself.
	i.autoResumes, err = meter.Int64Counter("buildrisk.auto_resumes",
		metric.WithDescription("Runs stopped by infrastructure (drain, reap of a dead or cut-off worker, database outage) that resumed by themselves, by cause."),
		metric.WithUnit("{request}"))
	check(err)

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

	if len(errs) > 0 {
		return nil, fmt.Errorf("error creating instruments: %w", errors.Join(errs...))
	}

	i.workerStaleHeartbeats.Add(context.Background(), 0)
	return &i, nil
}

// InitSeries records 0 on every counter series that jobs and providers can
// produce, so each series exists before its first real event.
//
// Why: a counter series appears on /metrics with its first increment, so
// Prometheus's increase() sees it go from 1 to 1 and the very first fan-out
// rejection or unaccounted item would never alert. Call it once at startup
// with the catalog's job names and the provider names. It is idempotent and
// adds a few hundred series at most (7 jobs × the enumerated values).
func (i *Instruments) InitSeries(ctx context.Context, jobs, providers []string) {
	for _, job := range jobs {
		for _, reason := range fanoutReasons {
			i.fanoutRejections.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrReason.String(reason)))
		}
		for _, source := range []string{SourceAPI, SourceChain, SourceCLI, SourceResume, SourceSchedule} {
			for _, result := range []string{ResultAccepted, ResultDuplicate, ResultInvalid} {
				i.requests.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrSource.String(source), attrResult.String(result)))
			}
		}
		for _, status := range []string{StatusAbandoned, StatusCompleted, StatusFailed, StatusStopped} {
			i.executions.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrStatus.String(status)))
		}
		for _, cause := range stopCauses {
			i.executionsStopped.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(cause)))
		}
		for _, outcome := range []string{OutcomeFailed, OutcomeSkipped, OutcomeUnaccounted, OutcomeWritten} {
			i.items.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrOutcome.String(outcome)))
		}
		i.ownershipLost.Add(ctx, 0, metric.WithAttributes(attrJob.String(job)))
		for _, reason := range requestFailedReasons {
			i.requestsFailed.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrReason.String(reason)))
		}
		for _, cause := range autoResumeCauses {
			i.autoResumes.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(cause)))
			i.autoResumesRefused.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(cause)))
		}
		for _, outcome := range tickOutcomes {
			i.scheduleTicks.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrOutcome.String(outcome)))
		}
		i.scheduleMissed.Add(ctx, 0, metric.WithAttributes(attrJob.String(job)))
	}
	for _, provider := range providers {
		for _, outcome := range []string{CallCapped, CallError, CallOK} {
			i.externalCalls.Add(ctx, 0, metric.WithAttributes(attrProvider.String(provider), attrOutcome.String(outcome)))
		}
	}
	for _, reason := range refusalReasons {
		i.httpRefusals.Add(ctx, 0, metric.WithAttributes(attrReason.String(reason)))
	}
	i.workerStaleHeartbeats.Add(ctx, 0)
}

// InitCoverageSeries records 0 on buildrisk_coverage_check_failures_total
// for every job with a coverage definition.
func (i *Instruments) InitCoverageSeries(ctx context.Context, jobs []string) {
	for _, job := range jobs {
		i.coverageCheckFailures.Add(ctx, 0, metric.WithAttributes(attrJob.String(job)))
	}
}

// CoverageCheckFailed counts one coverage count of job that could not run.
func (i *Instruments) CoverageCheckFailed(ctx context.Context, job string) {
	i.coverageCheckFailures.Add(ctx, 1, metric.WithAttributes(attrJob.String(job)))
}

// HTTPRefused counts one answer refused for reason (one of the Refusal
// constants; anything else is recorded as [ValueOther]).
func (i *Instruments) HTTPRefused(ctx context.Context, reason string) {
	i.httpRefusals.Add(ctx, 1, metric.WithAttributes(attrReason.String(oneOf(reason, refusalReasons...))))
}

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

// FanoutRejected counts one item of job's fan-out refused for reason (one
// of the Reason constants). The loss reasons (ReasonClosed,
// ReasonQueueFull, ReasonSubmitFailed) feed the critical alert
// BuildriskFanoutRejections; ReasonCap, ReasonProvider429 and
// ReasonProviderLimitLowered are upstream pushback, named by the same
// alert's reason label.
func (i *Instruments) FanoutRejected(ctx context.Context, job, reason string) {
	i.fanoutRejections.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrReason.String(oneOf(reason, fanoutReasons...)),
	))
}

// AutoResumed counts one automatic resume of job's run stopped by cause
// (CauseDrain, CauseReap, CauseDatabase).
func (i *Instruments) AutoResumed(ctx context.Context, job, cause string) {
	i.autoResumes.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrCause.String(oneOf(cause, autoResumeCauses...))))
}

// AutoResumeRefused counts one automatic resume of job refused by the
// attempt limit; the alert BuildriskAutoResumeExhausted reads it.
func (i *Instruments) AutoResumeRefused(ctx context.Context, job, cause string) {
	i.autoResumesRefused.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrCause.String(oneOf(cause, autoResumeCauses...))))
}

var autoResumeCauses = []string{CauseDatabase, CauseDrain, CauseReap}

// StaleHeartbeatReaped counts one worker the reaper found stale and whose
// requests it failed.
func (i *Instruments) StaleHeartbeatReaped(ctx context.Context) {
	i.workerStaleHeartbeats.Add(ctx, 1)
}

// RequestRecorded counts one request to run job from source (SourceAPI,
// SourceSchedule, SourceCLI, SourceChain) with its result (ResultAccepted,
// ResultDuplicate, ResultInvalid).
func (i *Instruments) RequestRecorded(ctx context.Context, job, source, result string) {
	i.requests.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrSource.String(oneOf(source, SourceAPI, SourceChain, SourceCLI, SourceResume, SourceSchedule)),
		attrResult.String(oneOf(result, ResultAccepted, ResultDuplicate, ResultInvalid)),
	))
}

// Values of AuthFailed's via.
const (
	AuthViaBearer = "bearer"
	AuthViaLogin  = "login"
)

// AuthFailuresInit exports buildrisk_auth_failures_total at 0 for every
// via, so the first failures are an increase an alert can see. The api
// calls it at start.
func (i *Instruments) AuthFailuresInit(ctx context.Context) {
	for _, via := range []string{AuthViaBearer, AuthViaLogin} {
		i.authFailures.Add(ctx, 0, metric.WithAttributes(attribute.String("via", via)))
	}
}

// AuthFailed counts one failed credential check (via AuthViaBearer or
// AuthViaLogin).
func (i *Instruments) AuthFailed(ctx context.Context, via string) {
	i.authFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("via", oneOf(via, AuthViaBearer, AuthViaLogin))))
}

// OwnershipLost counts one run of job that found its execution no longer
// its own and stopped without writing. Any increase means a worker was
// taken for dead while it was alive (a database outage past the stale
// window, a paused process): alert BuildriskOwnershipLost.
func (i *Instruments) OwnershipLost(ctx context.Context, job string) {
	i.ownershipLost.Add(ctx, 1, metric.WithAttributes(attrJob.String(job)))
}

// RequestFailed counts one request of job failed for reason
// (ReasonOrphaned, ReasonStartFailed) without an outcome of its own run.
func (i *Instruments) RequestFailed(ctx context.Context, job, reason string) {
	i.requestsFailed.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrReason.String(oneOf(reason, requestFailedReasons...)),
	))
}

// ExecutionFinished counts one execution of job that ended with the final
// status (StatusCompleted, StatusStopped, StatusFailed, StatusAbandoned).
func (i *Instruments) ExecutionFinished(ctx context.Context, job, status string) {
	i.executions.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrStatus.String(oneOf(status, StatusAbandoned, StatusCompleted, StatusFailed, StatusStopped)),
	))
}

// ExecutionStopped counts one execution of job that ended STOPPED because
// of cause (StopCap, StopMaxCalls, StopOperator, StopDrain). The cap causes
// feed the alert BuildriskRunCapped.
func (i *Instruments) ExecutionStopped(ctx context.Context, job, cause string) {
	i.executionsStopped.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrCause.String(oneOf(cause, stopCauses...)),
	))
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

// ItemsCounted adds n target items of job with outcome (OutcomeWritten,
// OutcomeSkipped, OutcomeFailed, OutcomeUnaccounted). n <= 0 records
// nothing. Unaccounted items feed the critical alert
// BuildriskUnaccountedItems.
func (i *Instruments) ItemsCounted(ctx context.Context, job, outcome string, n int64) {
	if n <= 0 {
		return
	}
	outcome = oneOf(outcome, OutcomeFailed, OutcomeSkipped, OutcomeUnaccounted, OutcomeWritten)
	key := attrSetKey{instrument: hotItems, a: job, b: outcome}
	opt, ok := i.hot.get(key)
	if !ok {
		opt = i.hot.put(key, attrJob.String(job), attrOutcome.String(outcome))
	}
	i.items.Add(ctx, n, opt...)
}

// ExternalCall counts one call to provider with outcome (CallOK, CallError,
// CallCapped; a capped call is one refused by the daily cap and not made).
func (i *Instruments) ExternalCall(ctx context.Context, provider, outcome string) {
	outcome = oneOf(outcome, CallCapped, CallError, CallOK)
	key := attrSetKey{instrument: hotExternalCalls, a: provider, b: outcome}
	opt, ok := i.hot.get(key)
	if !ok {
		opt = i.hot.put(key, attrProvider.String(provider), attrOutcome.String(outcome))
	}
	i.externalCalls.Add(ctx, 1, opt...)
}

// Instruments whose attribute sets attrSets keeps.
const (
	hotExternalCalls = iota + 1
	hotFanoutInflight
	hotItems
)

// attrSetsMax bounds attrSets: past it a set is built for the call and not
// kept (the values are bounded — job names, providers, outcomes — so this
// only guards against a caller minting values).
const attrSetsMax = 1024

// attrSetKey names one attribute set of one instrument.
type attrSetKey struct {
	instrument int
	a, b       string
}

// attrSets keeps the options (metric.WithAttributeSet, in a slice of its
// own so that passing it allocates no variadic slice either) of each
// attribute set a hot instrument has used: metric.WithAttributes sorts,
// deduplicates and hashes its attributes into a new set at every call,
// which the CPU profile of a 0 ms creditEval run showed at ≈ 3–4 % of the
// worker's time (three measurements per provider call).
type attrSets struct {
	mu sync.RWMutex
	m  map[attrSetKey][]metric.AddOption
}

// get returns the kept option of key.
func (c *attrSets) get(key attrSetKey) ([]metric.AddOption, bool) {
	c.mu.RLock()
	opt, ok := c.m[key]
	c.mu.RUnlock()
	return opt, ok
}

// put builds key's option from kvs, keeps it while there is room, and
// returns it.
func (c *attrSets) put(key attrSetKey, kvs ...attribute.KeyValue) []metric.AddOption {
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[attrSetKey][]metric.AddOption)
	}
	if len(c.m) < attrSetsMax {
		c.m[key] = opt
	}
	c.mu.Unlock()
	return opt
}

// ChunkDuration records how long one chunk of job took.
func (i *Instruments) ChunkDuration(ctx context.Context, job string, d time.Duration) {
	i.chunkDuration.Record(ctx, d.Seconds(), metric.WithAttributes(attrJob.String(job)))
}

// FanoutInflightAdd moves the number of job's items holding a fan-out slot
// by delta: +1 when a slot is acquired, -1 when it is released (in the same
// defer that releases the slot, so the gauge can't leak).
func (i *Instruments) FanoutInflightAdd(ctx context.Context, job string, delta int64) {
	key := attrSetKey{instrument: hotFanoutInflight, a: job}
	opt, ok := i.hot.get(key)
	if !ok {
		opt = i.hot.put(key, attrJob.String(job))
	}
	i.fanoutInflight.Add(ctx, delta, opt...)
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

// RequestStartLatency records d, the time between a request of job being
// enqueued and its execution starting. Negative durations (clock skew
// between hosts) are recorded as 0.
func (i *Instruments) RequestStartLatency(ctx context.Context, job string, d time.Duration) {
	i.requestStartLatency.Record(ctx, max(d, 0).Seconds(), metric.WithAttributes(attrJob.String(job)))
}

// ScheduleTick counts n due times of job's schedule with outcome (one of
// the Tick constants). n <= 0 records nothing. TickMissed also counts
// buildrisk_schedule_missed_total.
func (i *Instruments) ScheduleTick(ctx context.Context, job, outcome string, n int64) {
	if n <= 0 {
		return
	}
	outcome = oneOf(outcome, tickOutcomes...)
	i.scheduleTicks.Add(ctx, n, metric.WithAttributes(attrJob.String(job), attrOutcome.String(outcome)))
	if outcome == TickMissed {
		i.scheduleMissed.Add(ctx, n, metric.WithAttributes(attrJob.String(job)))
	}
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

// oneOf returns v if it is one of allowed and ValueOther otherwise, bounding
// the values an enumerated attribute can take.
func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return ValueOther
}
