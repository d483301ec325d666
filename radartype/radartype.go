// Package radartype is the vocabulary of buildrisk-radar's job queue: the
// statuses an execution, a request and a worker go through, where a request
// comes from, and what stopped a run. Every other package names these values
// through the types here, so the words stored in the database, answered by
// the api and exported as metric attribute values are declared once.
//
// It is a leaf: it imports no package of this module (nor anything outside
// the standard library), so any package may import it.
package radartype

import "slices"

// ExecutionStatus is the status of a job_execution: its state machine runs
// STARTING → STARTED (→ STOPPING) → one of the final statuses.
type ExecutionStatus string

// Execution statuses, as stored in job_execution.status.
const (
	ExecutionStarting  ExecutionStatus = "STARTING"
	ExecutionStarted   ExecutionStatus = "STARTED"
	ExecutionStopping  ExecutionStatus = "STOPPING"
	ExecutionStopped   ExecutionStatus = "STOPPED"
	ExecutionCompleted ExecutionStatus = "COMPLETED"
	ExecutionFailed    ExecutionStatus = "FAILED"
	ExecutionAbandoned ExecutionStatus = "ABANDONED"
)

// String returns the status as stored.
func (s ExecutionStatus) String() string { return string(s) }

// Active reports whether the execution is still running or stopping: its
// worker owns it and no other execution of the job may start.
func (s ExecutionStatus) Active() bool {
	switch s {
	case ExecutionStarting, ExecutionStarted, ExecutionStopping:
		return true
	}
	return false
}

// Final reports whether s is one of [FinalExecutionStatuses].
func (s ExecutionStatus) Final() bool {
	return slices.Contains(finalExecutionStatuses, s)
}

// RequestStatus is the status of the request whose execution ended with s:
// DONE for COMPLETED or STOPPED (a stop is a clean end that a new request
// resumes), FAILED for anything else (FAILED, ABANDONED).
func (s ExecutionStatus) RequestStatus() RequestStatus {
	switch s {
	case ExecutionCompleted, ExecutionStopped:
		return RequestDone
	default:
		return RequestFailed
	}
}

// finalExecutionStatuses are the statuses an execution ends with, in
// alphabetical order.
var finalExecutionStatuses = []ExecutionStatus{ExecutionAbandoned, ExecutionCompleted, ExecutionFailed, ExecutionStopped}

// FinalExecutionStatuses returns the statuses an execution ends with, in
// alphabetical order: the values of the status attribute of
// buildrisk_executions_total.
func FinalExecutionStatuses() []ExecutionStatus { return slices.Clone(finalExecutionStatuses) }

// RequestStatus is the status of a job_request.
type RequestStatus string

// Request statuses, as stored in job_request.status and answered by the api.
const (
	RequestQueued  RequestStatus = "QUEUED"
	RequestRunning RequestStatus = "RUNNING"
	RequestDone    RequestStatus = "DONE"
	RequestFailed  RequestStatus = "FAILED"
)

// String returns the status as stored.
func (s RequestStatus) String() string { return string(s) }

// Valid reports whether s is one of [RequestStatuses].
func (s RequestStatus) Valid() bool { return slices.Contains(requestStatuses, s) }

var requestStatuses = []RequestStatus{RequestQueued, RequestRunning, RequestDone, RequestFailed}

// RequestStatuses returns every request status, in the order a request goes
// through them.
func RequestStatuses() []RequestStatus { return slices.Clone(requestStatuses) }

// RequestSource says who asked for a run.
type RequestSource string

// Request sources, as stored in job_request.source and exported as the
// source attribute of buildrisk_requests_total.
const (
	SourceAPI      RequestSource = "api"
	SourceChain    RequestSource = "chain"
	SourceCLI      RequestSource = "cli"
	SourceSchedule RequestSource = "schedule"
	// SourceResume is a request the system inserted itself to resume a run
	// that infrastructure (a drain, a reap, a database outage) or a
	// provider's Retry-After stopped.
	SourceResume RequestSource = "resume"
)

// String returns the source as stored.
func (s RequestSource) String() string { return string(s) }

// Valid reports whether s is one of [RequestSources].
func (s RequestSource) Valid() bool { return slices.Contains(requestSources, s) }

var requestSources = []RequestSource{SourceAPI, SourceChain, SourceCLI, SourceResume, SourceSchedule}

// RequestSources returns every request source, in alphabetical order.
func RequestSources() []RequestSource { return slices.Clone(requestSources) }

// StopCause says why an execution ended without completing. The first three
// are infrastructure's doing and the fourth a provider's instruction to come
// back later; only those can be resumed automatically. The rest are
// decisions (an operator's stop, a cap, maxCalls) or the run's own failure,
// which a new run would only repeat. A run that finds it lost ownership of
// its execution writes nothing, its end included: whoever took the
// execution over (the reaper, cause reap) records it and its resume.
type StopCause string

// Stop causes, as stored in job_execution.stop_cause and exported as the
// cause attribute of buildrisk_executions_stopped_total and
// buildrisk_auto_resumes_total.
const (
	// CauseDrain is a worker shutting down (a deploy, a node drain).
	CauseDrain StopCause = "drain"
	// CauseReap is a dead worker's run freed by the reaper.
	CauseReap StopCause = "reap"
	// CauseDatabase is a database outage the run could not ride out (its
	// worker fenced itself), or a run whose outcome its worker could not
	// record (the reconcile loop abandons it).
	CauseDatabase StopCause = "database"
	// CauseProviderRate is a provider's 429 whose Retry-After asked for a
	// longer wait than the client waits within a call: the run stops, and
	// its automatic resume is due when the provider said (at most
	// upstream.RetryAfterMaxDefault later).
	CauseProviderRate StopCause = "provider-rate"
	// CauseOperator is an operator's stop.
	CauseOperator StopCause = "operator"
	// CauseCap is a provider's daily cap reached (resumable tomorrow).
	CauseCap StopCause = "cap"
	// CauseMaxCalls is the request's maxCalls reached.
	CauseMaxCalls StopCause = "max_calls"
	// CauseFailure is the run's own failure.
	CauseFailure StopCause = "failure"
)

// String returns the cause as stored.
func (c StopCause) String() string { return string(c) }

// Resumable reports whether c is infrastructure's doing, a provider's
// instruction to wait or a provider's daily budget spent, one of
// [ResumableCauses].
func (c StopCause) Resumable() bool { return slices.Contains(resumableCauses, c) }

var resumableCauses = []StopCause{CauseDrain, CauseReap, CauseDatabase, CauseProviderRate, CauseCap}

var stopCauses = []StopCause{CauseDrain, CauseReap, CauseDatabase, CauseProviderRate, CauseCap, CauseOperator, CauseMaxCalls, CauseFailure}

// StopCauses returns every stop cause: the resumable ones, then the
// decisions and the run's own failure.
func StopCauses() []StopCause { return slices.Clone(stopCauses) }

// ResumableCauses returns the causes an automatic resume may name
// (BUILDRISK_AUTO_RESUME).
func ResumableCauses() []StopCause { return slices.Clone(resumableCauses) }

// WorkerStatus is a worker's status in the worker registry.
type WorkerStatus string

// Worker statuses, as stored in the registry and answered by the api.
const (
	WorkerRunning  WorkerStatus = "running"
	WorkerDraining WorkerStatus = "draining"
	WorkerStopped  WorkerStatus = "stopped"
)

// String returns the status as stored.
func (s WorkerStatus) String() string { return string(s) }
