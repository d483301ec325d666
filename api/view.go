package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// ExecutionSummary is a job's last execution in the job list.
type ExecutionSummary struct {
	ID          string     `json:"id"`
	Status      string     `json:"status" enum:"STARTING,STARTED,STOPPING,STOPPED,COMPLETED,FAILED,ABANDONED"`
	StartedAt   *time.Time `json:"startedAt"`
	EndedAt     *time.Time `json:"endedAt"`
	ExitMessage string     `json:"exitMessage"`
}

// ExecutionView is a request's execution with its progress. Its chunks,
// items and calls are this execution's own: a resume's count what it did,
// not what earlier executions of its instance did (chunksBefore says how
// many chunks they had committed). InstanceView adds them up across the
// instance's executions. Its targets and domainRows are its instance's.
type ExecutionView struct {
	ID            string     `json:"id"`
	Status        string     `json:"status" enum:"STARTING,STARTED,STOPPING,STOPPED,COMPLETED,FAILED,ABANDONED"`
	ChunksDone    int32      `json:"chunksDone" doc:"chunks this execution committed; a resume's do not include those committed before it (chunksBefore; the instance's are instance.chunksDone)"`
	ChunksTotal   int32      `json:"chunksTotal" doc:"chunks this execution had to do: its instance's planned chunks less the chunksBefore already committed (0 until it has planned); chunksDone of chunksTotal is its progress"`
	ChunksBefore  int32      `json:"chunksBefore" doc:"chunks of its instance that earlier executions had committed when this one started (0 for an instance's first execution): chunksBefore + chunksTotal is the instance's plan, chunksBefore + chunksDone the instance's progress as of this execution"`
	Targets       int64      `json:"targets" doc:"items the instance must account for, across its executions (-1 until known)"`
	ItemsWritten  int64      `json:"itemsWritten" doc:"items this execution wrote (in its chunks' commits and in parts of chunks)"`
	ItemsSkipped  int64      `json:"itemsSkipped" doc:"items this execution skipped"`
	ItemsFailed   int64      `json:"itemsFailed" doc:"items that failed in this execution, those of a chunk over its failure tolerance (which commits none) included"`
	DomainRows    *int64     `json:"domainRows" doc:"domain rows the instance's executions wrote, counted by a query"`
	ExternalCalls int32      `json:"externalCalls" doc:"provider calls made by this execution"`
	StartedAt     *time.Time `json:"startedAt"`
	EndedAt       *time.Time `json:"endedAt"`
	LastUpdated   time.Time  `json:"lastUpdated"`
	ExitMessage   string     `json:"exitMessage"`
	StopCause     string     `json:"stopCause,omitempty" enum:"drain,reap,database,provider-rate,operator,cap,max_calls,failure" doc:"why an execution that did not complete ended (GET /v1/requests?cause= filters by it); absent otherwise"`
}

// InstanceView is the instance a request's execution belongs to, with its
// figures across all its executions: what its commits hold (chunks, and
// items committed in parts of chunks) and the provider calls made. Next to
// the execution's own figures it makes a resumed run read consistently:
// the execution shows what this run did, the instance what is done. Its
// chunksDone, items and externalCalls are the sums of its executions'
// (itemsFailed but for the failures of chunks that never committed).
type InstanceView struct {
	ID            string `json:"id"`
	Executions    int32  `json:"executions" doc:"executions of this instance so far, this one included"`
	ChunksDone    int64  `json:"chunksDone" doc:"chunks committed by any of its executions: the sum of their chunksDone"`
	ChunksPlanned int32  `json:"chunksPlanned" doc:"chunks in the instance's plan (0 until one of its executions has planned): chunksDone of chunksPlanned is the instance's progress"`
	Targets       int64  `json:"targets" doc:"targets its commits account for: itemsWritten + itemsSkipped + itemsFailed"`
	ItemsWritten  int64  `json:"itemsWritten" doc:"items written by any of its executions: the sum of their itemsWritten"`
	ItemsSkipped  int64  `json:"itemsSkipped" doc:"items skipped by any of its executions: the sum of their itemsSkipped"`
	ItemsFailed   int64  `json:"itemsFailed" doc:"failed items committed (a chunk over its failure tolerance commits none; its execution counts them)"`
	ExternalCalls int64  `json:"externalCalls" doc:"provider calls made by all its executions: the sum of their externalCalls"`
}

// RequestView is one job request.
type RequestView struct {
	RequestID          string          `json:"requestId"`
	Job                string          `json:"job"`
	Source             string          `json:"source" enum:"api,schedule,cli,chain,resume" doc:"who asked: resume is the system resuming a run that infrastructure stopped"`
	Params             json.RawMessage `json:"params"`
	MaxCalls           *int32          `json:"maxCalls"`
	ConfirmPurge       bool            `json:"confirmPurge"`
	Status             string          `json:"status" enum:"QUEUED,RUNNING,DONE,FAILED"`
	EstimatedCalls     int32           `json:"estimatedCalls" doc:"external calls the run was estimated to make when requested: the whole plan's for a new instance; for a resume (resumesExecutionId), those of the chunks its instance had left"`
	ResumesExecutionID *string         `json:"resumesExecutionId"`
	ResumeCause        string          `json:"resumeCause,omitempty" enum:"drain,reap,database,provider-rate,cap" doc:"for source resume: what stopped the run it resumes"`
	ResumesAt          *time.Time      `json:"resumesAt" doc:"for a QUEUED request that may not start yet (an automatic resume waiting for its backoff, a provider's Retry-After, or its provider's next daily reset after a cap stop): when it may start; null otherwise"`
	CreatedAt          time.Time       `json:"createdAt"`
	ClaimedAt          *time.Time      `json:"claimedAt" doc:"when a worker took the request: the database's time of the fetch that handed it to that worker; the status turns RUNNING a moment later, when the run starts"`
	FinishedAt         *time.Time      `json:"finishedAt"`
	WorkerID           *string         `json:"workerId" doc:"the worker that took the request (set at claimedAt)"`
	Message            string          `json:"message"`
	DueAt              *time.Time      `json:"dueAt" doc:"the due time of the schedule this request was made for; null unless source is schedule"`
	Execution          *ExecutionView  `json:"execution"`
	Instance           *InstanceView   `json:"instance" doc:"the execution's instance across all its executions; only GET /v1/requests/{id} fills it, null before an execution exists"`
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

func formatIDPtr(id *int64) *string {
	if id == nil {
		return nil
	}
	s := formatID(*id)
	return &s
}

// parseID parses an id from a URL; ok is false for anything but a positive
// integer in plain decimal digits ("+1", "01", " 1" and "1e3" are not ids).
func parseID(s string) (int64, bool) {
	if s == "" || s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// badID is the 400 for a malformed id in the path.
func badID(field, s string) error {
	return badInput("path", field, "path."+field, fmt.Sprintf("%s is not an id (a positive decimal integer)", catalog.Quote(s)))
}

func executionViewFromRow(e *queries.JobExecution) *ExecutionView {
	if e == nil {
		return nil
	}
	// The row keeps the run's view of the instance (chunks_done and
	// chunks_total count from the plan's start); the view is the
	// execution's own.
	return &ExecutionView{
		ID: formatID(e.ID), Status: e.Status, ChunksDone: max(e.ChunksDone-e.ChunksBefore, 0),
		ChunksTotal: max(e.ChunksTotal-e.ChunksBefore, 0), ChunksBefore: e.ChunksBefore, Targets: e.Targets,
		ItemsWritten: e.ItemsWritten, ItemsSkipped: e.ItemsSkipped, ItemsFailed: e.ItemsFailed,
		DomainRows: e.DomainRows, ExternalCalls: e.ExternalCalls, StartedAt: e.StartedAt, EndedAt: e.EndedAt,
		LastUpdated: e.LastUpdated, ExitMessage: e.ExitMessage, StopCause: e.StopCause,
	}
}

func requestViewFromRow(r *queries.JobRequest, e *queries.JobExecution) *RequestView {
	return &RequestView{
		RequestID: formatID(r.ID), Job: r.Job, Source: r.Source, Params: json.RawMessage(r.Params),
		MaxCalls: r.MaxCalls, ConfirmPurge: r.ConfirmPurge, Status: r.Status, EstimatedCalls: r.EstimatedCalls,
		ResumesExecutionID: formatIDPtr(r.ResumesExecutionID), ResumeCause: r.ResumeCause, CreatedAt: r.CreatedAt, ClaimedAt: r.ClaimedAt,
		FinishedAt: r.FinishedAt, WorkerID: r.WorkerID, Message: r.Message, DueAt: r.DueAt, Execution: executionViewFromRow(e),
		ResumesAt: resumesAt(r),
	}
}

// resumesAt is when a QUEUED request may start, when that is later than
// its creation (its not_before); nil otherwise.
func resumesAt(r *queries.JobRequest) *time.Time {
	if r.Status != string(radartype.RequestQueued) || r.NotBefore == nil || !r.NotBefore.After(r.CreatedAt) {
		return nil
	}
	return r.NotBefore
}

// requestViewFromViewRow is GET /v1/requests/{id}'s view of its one row
// (queries.JobRequestView): the request, its execution when it has one,
// and then that execution's instance.
func requestViewFromViewRow(row *queries.JobRequestViewRow) *RequestView {
	if row.ExecID == nil {
		return requestViewFromRow(&row.JobRequest, nil)
	}
	exec := &queries.JobExecution{
		ID: *row.ExecID, InstanceID: *row.ExecInstanceID, Status: *row.ExecStatus,
		StartedAt: row.ExecStartedAt, EndedAt: row.ExecEndedAt, LastUpdated: *row.ExecLastUpdated,
		ExitMessage: *row.ExecExitMessage, StopCause: *row.ExecStopCause, ChunksTotal: *row.ExecChunksTotal, ChunksDone: *row.ExecChunksDone, ChunksBefore: *row.ExecChunksBefore,
		Targets: *row.ExecTargets, ItemsWritten: *row.ExecItemsWritten, ItemsSkipped: *row.ExecItemsSkipped,
		ItemsFailed: *row.ExecItemsFailed, ExternalCalls: *row.ExecExternalCalls, DomainRows: row.ExecDomainRows,
	}
	view := requestViewFromRow(&row.JobRequest, exec)
	view.Instance = instanceViewFromRows(exec.InstanceID,
		&queries.JobCheckpointTotalsRow{Chunks: row.InstanceChunks, Written: row.InstanceWritten, Skipped: row.InstanceSkipped, Failed: row.InstanceFailed},
		&queries.JobInstanceExecutionTotalsRow{Executions: row.InstanceExecutions, ExternalCalls: row.InstanceExternalCalls},
		row.InstanceChunksPlanned)
	return view
}

func instanceViewFromRows(instanceID int64, commits *queries.JobCheckpointTotalsRow, execs *queries.JobInstanceExecutionTotalsRow, planned int32) *InstanceView {
	return &InstanceView{
		ID: formatID(instanceID), Executions: execs.Executions, ChunksDone: commits.Chunks, ChunksPlanned: planned,
		Targets: commits.Written + commits.Skipped + commits.Failed, ItemsWritten: commits.Written,
		ItemsSkipped: commits.Skipped, ItemsFailed: commits.Failed, ExternalCalls: execs.ExternalCalls,
	}
}
