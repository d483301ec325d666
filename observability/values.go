package observability

import "github.com/buildrisk/radar/radartype"

// This file holds the enumerated values of the instruments' attributes:
// every value an attribute can take is a constant here, and any other is
// recorded as [ValueOther].

// ValueOther replaces an enumerated attribute value (result, source, status,
// outcome, reason) that is not one of the documented constants. A typo then
// shows up as a single "other" series on the dashboards instead of creating
// an unbounded number of new series.
const ValueOther = "other"

// The source attribute of buildrisk_requests_total (who asked for the run)
// takes the values of radartype.RequestSources.

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

// The status attribute of buildrisk_executions_total (an execution's final
// status) takes the values of radartype.FinalExecutionStatuses.

// stopCauses lists every allowed value of the cause attribute of
// buildrisk_executions_stopped_total: what stopped an execution that ended
// STOPPED. CauseCap, CauseMaxCalls and CauseProviderRate feed the alert
// BuildriskRunCapped (a warning: the run is stopped, not failed).
var stopCauses = []radartype.StopCause{radartype.CauseCap, radartype.CauseDrain, radartype.CauseMaxCalls, radartype.CauseOperator, radartype.CauseProviderRate}

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
	// Requests (the call is retried after Retry-After). Not a loss. A 429
	// whose Retry-After is longer than a call waits (the upstream client's
	// MaxBackoff) is not counted here: it stops the run, counted by
	// buildrisk_executions_stopped_total{cause="provider-rate"}.
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

// autoResumeCauses lists every allowed value of the cause attribute of
// buildrisk_auto_resumes_total and buildrisk_auto_resumes_refused_total:
// what stopped the run, infrastructure or a provider's Retry-After.
var autoResumeCauses = []radartype.StopCause{radartype.CauseDatabase, radartype.CauseDrain, radartype.CauseProviderRate, radartype.CauseReap}

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

// Values of RateLimited's role: the api's token roles.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
)

// Values of AuthFailed's via.
const (
	AuthViaBearer = "bearer"
	AuthViaLogin  = "login"
)

// oneOf returns v if it is one of allowed and ValueOther otherwise, bounding
// the values an enumerated attribute can take.
func oneOf[T ~string](v T, allowed ...T) string {
	for _, a := range allowed {
		if v == a {
			return string(v)
		}
	}
	return ValueOther
}
