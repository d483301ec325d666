package observability

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/buildrisk/radar/radartype"
)

// This file holds the recording methods of the counters and histograms:
// each fixes its instrument's attributes and bounds their values.

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
		for _, source := range radartype.RequestSources() {
			for _, result := range []string{ResultAccepted, ResultDuplicate, ResultInvalid} {
				i.requests.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrSource.String(string(source)), attrResult.String(result)))
			}
		}
		for _, status := range radartype.FinalExecutionStatuses() {
			i.executions.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrStatus.String(string(status))))
		}
		for _, cause := range stopCauses {
			i.executionsStopped.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(string(cause))))
		}
		for _, outcome := range []string{OutcomeFailed, OutcomeSkipped, OutcomeUnaccounted, OutcomeWritten} {
			i.items.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrOutcome.String(outcome)))
		}
		i.ownershipLost.Add(ctx, 0, metric.WithAttributes(attrJob.String(job)))
		i.commitsLost.Add(ctx, 0, metric.WithAttributes(attrJob.String(job)))
		for _, reason := range requestFailedReasons {
			i.requestsFailed.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrReason.String(reason)))
		}
		for _, cause := range autoResumeCauses {
			i.autoResumes.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(string(cause))))
			i.autoResumesRefused.Add(ctx, 0, metric.WithAttributes(attrJob.String(job), attrCause.String(string(cause))))
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
		i.ledgerReasserted.Add(ctx, 0, metric.WithAttributes(attrProvider.String(provider)))
	}
	for _, reason := range refusalReasons {
		i.httpRefusals.Add(ctx, 0, metric.WithAttributes(attrReason.String(reason)))
	}
	i.workerStaleHeartbeats.Add(ctx, 0)
	i.databaseFailovers.Add(ctx, 0)
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
// (CauseDrain, CauseReap, CauseDatabase, CauseProviderRate).
func (i *Instruments) AutoResumed(ctx context.Context, job string, cause radartype.StopCause) {
	i.autoResumes.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrCause.String(oneOf(cause, autoResumeCauses...))))
}

// AutoResumeRefused counts one automatic resume of job refused by the
// attempt limit; the alert BuildriskAutoResumeExhausted reads it.
func (i *Instruments) AutoResumeRefused(ctx context.Context, job string, cause radartype.StopCause) {
	i.autoResumesRefused.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrCause.String(oneOf(cause, autoResumeCauses...))))
}

// StaleHeartbeatReaped counts one worker the reaper found stale and whose
// requests it failed.
func (i *Instruments) StaleHeartbeatReaped(ctx context.Context) {
	i.workerStaleHeartbeats.Add(ctx, 1)
}

// DatabaseFailover counts one change of the database's identity (system
// identifier or timeline) the process saw; the alert BuildriskDatabaseFailover
// reads it.
func (i *Instruments) DatabaseFailover(ctx context.Context) {
	i.databaseFailovers.Add(ctx, 1)
}

// RequestRecorded counts one request to run job from source (one of
// radartype.RequestSources) with its result (ResultAccepted,
// ResultDuplicate, ResultInvalid).
func (i *Instruments) RequestRecorded(ctx context.Context, job string, source radartype.RequestSource, result string) {
	i.requests.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrSource.String(oneOf(source, radartype.RequestSources()...)),
		attrResult.String(oneOf(result, ResultAccepted, ResultDuplicate, ResultInvalid)),
	))
}

// AuthFailuresInit exports buildrisk_auth_failures_total at 0 for every
// via, so the first failures are an increase an alert can see. The api
// calls it at start.
func (i *Instruments) AuthFailuresInit(ctx context.Context) {
	for _, via := range []string{AuthViaBearer, AuthViaLogin} {
		i.authFailures.Add(ctx, 0, metric.WithAttributes(attribute.String("via", via)))
	}
}

// RateLimitedInit exports buildrisk_rate_limited_total at 0 for every
// role, so the first refusals are an increase an alert can see. The api
// calls it at start.
func (i *Instruments) RateLimitedInit(ctx context.Context) {
	for _, role := range []string{RoleViewer, RoleOperator} {
		i.rateLimited.Add(ctx, 0, metric.WithAttributes(attribute.String("role", role)))
	}
}

// RateLimited counts one request of a token of role (RoleViewer or
// RoleOperator) refused past its per-minute budget.
func (i *Instruments) RateLimited(ctx context.Context, role string) {
	i.rateLimited.Add(ctx, 1, metric.WithAttributes(attribute.String("role", oneOf(role, RoleViewer, RoleOperator))))
}

// AuthFailed counts one failed credential check (via AuthViaBearer or
// AuthViaLogin).
func (i *Instruments) AuthFailed(ctx context.Context, via string) {
	i.authFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("via", oneOf(via, AuthViaBearer, AuthViaLogin))))
}

// CommitsLost counts n commits of job that the database acknowledged and
// then did not hold: a failover to an asynchronous replica that had not
// received them. The run does them again before it may complete; any
// increase means the database lost acknowledged work: alert
// BuildriskCommitsLost.
func (i *Instruments) CommitsLost(ctx context.Context, job string, n int64) {
	i.commitsLost.Add(ctx, n, metric.WithAttributes(attrJob.String(job)))
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
// status (one of radartype.FinalExecutionStatuses).
func (i *Instruments) ExecutionFinished(ctx context.Context, job string, status radartype.ExecutionStatus) {
	i.executions.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrStatus.String(oneOf(status, radartype.FinalExecutionStatuses()...)),
	))
}

// ExecutionStopped counts one execution of job that ended STOPPED because
// of cause (CauseCap, CauseMaxCalls, CauseProviderRate, CauseOperator,
// CauseDrain). The cap causes and provider-rate feed the alert
// BuildriskRunCapped.
func (i *Instruments) ExecutionStopped(ctx context.Context, job string, cause radartype.StopCause) {
	i.executionsStopped.Add(ctx, 1, metric.WithAttributes(
		attrJob.String(job),
		attrCause.String(oneOf(cause, stopCauses...)),
	))
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
