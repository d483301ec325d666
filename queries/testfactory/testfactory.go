// Package testfactory writes the rows of the queue's tables for tests, one
// function per row in River's testfactory style:
//
//	worker := testfactory.Worker(ctx, t, pool, &testfactory.WorkerOpts{HeartbeatAge: time.Hour})
//	exec := testfactory.Execution(ctx, t, pool, &testfactory.ExecutionOpts{WorkerID: worker.ID})
//
// Every field of an Opts struct has a sensible default (its zero value, or
// the one its comment names), so a test spells only what it is about; a nil
// Opts is all defaults. The rows are written through the sqlc queries the
// service itself uses (package queries) wherever one exists, so a row looks
// as the code under test would have left it; raw SQL inside this package
// writes only what no query writes (a request already finished, a
// heartbeat an hour old, figures moved without a checkpoint). A failed
// write fails the test.
//
// It is for _test.go files only: production code never imports it
// (cmd/radar/layout_test.go).
package testfactory

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// DefaultJob is the job of a request, instance or execution whose Opts name
// none.
const DefaultJob = "aptTrade"

// seq makes the defaults that must be unique (worker ids, params hashes).
var seq atomic.Int64

func next() int64 { return seq.Add(1) }

var q = queries.New()

func must(tb testing.TB, err error, what string) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("testfactory: %s: %v", what, err)
	}
}

// seconds is d as PostgreSQL interval seconds.
func seconds(d time.Duration) float64 { return d.Seconds() }

// WorkerOpts are the fields of a worker registry row.
type WorkerOpts struct {
	// ID is pid@hostname#boot; default a new one on host "factory". The
	// hostname, pid and boot default to the ID's parts.
	ID       string
	Hostname string
	PID      int32
	Boot     string
	// Status is running (default), draining or stopped.
	Status radartype.WorkerStatus
	// HeartbeatAge is how long before the database's now() the worker last
	// beat (default 0: it beats now).
	HeartbeatAge time.Duration
	// StartedAge is how long before now() it registered (default 0).
	StartedAge     time.Duration
	ConfiguredKeys []string
	Version        string
	DailyCaps      map[string]int
}

// Worker registers a worker (queries.WorkerUpsert, as Presence does) and
// returns its row.
func Worker(ctx context.Context, tb testing.TB, db queries.DBTX, opts *WorkerOpts) *queries.Worker {
	tb.Helper()
	if opts == nil {
		opts = &WorkerOpts{}
	}
	id := opts.ID
	if id == "" {
		n := next()
		id = fmt.Sprintf("%d@factory#b%d", n, n)
	}
	hostname, pid, boot := splitWorkerID(id)
	if opts.Hostname != "" {
		hostname = opts.Hostname
	}
	if opts.PID != 0 {
		pid = opts.PID
	}
	if opts.Boot != "" {
		boot = opts.Boot
	}
	status := opts.Status
	if status == "" {
		status = radartype.WorkerRunning
	}
	keys := opts.ConfiguredKeys
	if keys == nil {
		keys = []string{}
	}
	caps := opts.DailyCaps
	if caps == nil {
		caps = map[string]int{}
	}
	dailyCaps, err := json.Marshal(caps)
	must(tb, err, "encoding daily caps")
	must(tb, q.WorkerUpsert(ctx, db, &queries.WorkerUpsertParams{
		ID: id, Hostname: hostname, Pid: pid, Boot: boot, Status: string(status),
		ConfiguredKeys: keys, Version: opts.Version, DailyCaps: dailyCaps,
	}), "registering worker "+id)
	if opts.HeartbeatAge != 0 || opts.StartedAge != 0 {
		// No query backdates a registry row: a live worker's are always now().
		_, err := db.Exec(ctx, `UPDATE worker SET heartbeat_at = now() - make_interval(secs => $2), started_at = now() - make_interval(secs => $3) WHERE id = $1`,
			id, seconds(opts.HeartbeatAge), seconds(opts.StartedAge))
		must(tb, err, "backdating worker "+id)
	}
	row, err := q.WorkerGetByID(ctx, db, id)
	must(tb, err, "reading worker "+id)
	return row
}

// WorkerHeartbeatAge sets how long ago the worker id last beat (every
// worker's when id is ""), as if it had stopped beating then.
func WorkerHeartbeatAge(ctx context.Context, tb testing.TB, db queries.DBTX, id string, age time.Duration) {
	tb.Helper()
	tag, err := db.Exec(ctx, `UPDATE worker SET heartbeat_at = now() - make_interval(secs => $2) WHERE $1 = '' OR id = $1`, id, seconds(age))
	must(tb, err, "backdating the heartbeat of worker "+id)
	if id != "" && tag.RowsAffected() != 1 {
		tb.Fatalf("testfactory: no worker %s", id)
	}
}

// splitWorkerID returns the parts of pid@hostname#boot (whatever it can).
func splitWorkerID(id string) (hostname string, pid int32, boot string) {
	rest := id
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		if n, err := strconv.Atoi(rest[:at]); err == nil {
			pid = int32(n)
		}
		rest = rest[at+1:]
	}
	hostname, boot, _ = strings.Cut(rest, "#")
	if hostname == "" {
		hostname = "factory"
	}
	if boot == "" {
		boot = "b"
	}
	return hostname, pid, boot
}

// InstanceOpts are the fields of a job instance.
type InstanceOpts struct {
	// Job defaults to DefaultJob.
	Job string
	// Params defaults to {}; ParamsHash to a new unique one.
	Params       []byte
	ParamsHash   string
	ConfirmPurge bool
}

// Instance inserts a job instance (queries.JobInstanceInsert).
func Instance(ctx context.Context, tb testing.TB, db queries.DBTX, opts *InstanceOpts) *queries.JobInstance {
	tb.Helper()
	if opts == nil {
		opts = &InstanceOpts{}
	}
	hash := opts.ParamsHash
	if hash == "" {
		hash = fmt.Sprintf("factory-%d", next())
	}
	inst, err := q.JobInstanceInsert(ctx, db, &queries.JobInstanceInsertParams{
		Job: or(opts.Job, DefaultJob), Params: orJSON(opts.Params), ParamsHash: hash, ConfirmPurge: opts.ConfirmPurge,
	})
	must(tb, err, "inserting instance")
	return inst
}

// RequestOpts are the fields of a job request.
type RequestOpts struct {
	// Job defaults to DefaultJob; Params to {}.
	Job        string
	Params     []byte
	ParamsHash string
	// Source defaults to api.
	Source         radartype.RequestSource
	RequestedBy    string
	EstimatedCalls int32
	MaxCalls       *int32
	// Status defaults to QUEUED. A RUNNING request is claimed by WorkerID;
	// a DONE or FAILED one is finished with Message.
	Status radartype.RequestStatus
	// WorkerID is the worker that holds the request (none by default).
	WorkerID string
	Message  string
	// ExecutionID is the execution the request names (none by default;
	// Execution sets it to the one it starts).
	ExecutionID        *int64
	ResumesExecutionID *int64
	RiverJobID         *int64
	DueAt              *time.Time
	// CreatedAge is how long before now() the request was made (default 0).
	CreatedAge time.Duration
}

// Request inserts a request: a QUEUED or RUNNING one as the enqueue and the
// claim write it (queries.JobRequestInsert, JobRequestClaim), a finished one
// in its final status at once, so that it never holds its job's one active
// slot.
func Request(ctx context.Context, tb testing.TB, db queries.DBTX, opts *RequestOpts) *queries.JobRequest {
	tb.Helper()
	if opts == nil {
		opts = &RequestOpts{}
	}
	job := or(opts.Job, DefaultJob)
	source := string(opts.Source)
	if source == "" {
		source = string(radartype.SourceAPI)
	}
	status := opts.Status
	if status == "" {
		status = radartype.RequestQueued
	}
	var workerID *string
	if opts.WorkerID != "" {
		workerID = &opts.WorkerID
	}
	var id int64
	switch status {
	case radartype.RequestQueued, radartype.RequestRunning:
		// The id is drawn as the enqueue draws it (JobRequestEnqueueState),
		// from the table's sequence.
		must(tb, db.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('job_request', 'id'))`).Scan(&id), "drawing a request id")
		insert := &queries.JobRequestInsertParams{
			ID: id, Job: job, Params: orJSON(opts.Params), ParamsHash: opts.ParamsHash, MaxCalls: opts.MaxCalls,
			Source: source, RequestedBy: opts.RequestedBy, EstimatedCalls: opts.EstimatedCalls,
			ResumesExecutionID: opts.ResumesExecutionID, DueAt: opts.DueAt, RiverJobID: opts.RiverJobID,
		}
		if status == radartype.RequestQueued {
			insert.WorkerID = workerID
		}
		_, err := q.JobRequestInsert(ctx, db, insert)
		must(tb, err, "inserting request")
		if status == radartype.RequestRunning {
			_, err := q.JobRequestClaim(ctx, db, &queries.JobRequestClaimParams{ID: id, WorkerID: workerID})
			must(tb, err, "claiming request")
		}
	default:
		// No query inserts a finished request.
		must(tb, db.QueryRow(ctx, `
INSERT INTO job_request (job, params, params_hash, max_calls, source, requested_by, status, estimated_calls,
                         resumes_execution_id, river_job_id, worker_id, message, claimed_at, finished_at, due_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, CASE WHEN $11::text IS NOT NULL THEN now() END, now(), $13)
RETURNING id`, job, orJSON(opts.Params), opts.ParamsHash, opts.MaxCalls, source, opts.RequestedBy, string(status), opts.EstimatedCalls,
			opts.ResumesExecutionID, opts.RiverJobID, workerID, opts.Message, opts.DueAt).Scan(&id), "inserting finished request")
	}
	if opts.ExecutionID != nil {
		must(tb, q.JobRequestSetExecution(ctx, db, &queries.JobRequestSetExecutionParams{ID: id, ExecutionID: opts.ExecutionID}), "setting the request's execution")
	}
	if opts.CreatedAge != 0 {
		_, err := db.Exec(ctx, `UPDATE job_request SET created_at = now() - make_interval(secs => $2) WHERE id = $1`, id, seconds(opts.CreatedAge))
		must(tb, err, "backdating request")
	}
	req, err := q.JobRequestGetByID(ctx, db, id)
	must(tb, err, "reading request")
	return req
}

// FinishRequest ends an active request with status (DONE or FAILED) and
// message, as the runner records an outcome (queries.JobRequestFinish).
func FinishRequest(ctx context.Context, tb testing.TB, db queries.DBTX, id int64, status radartype.RequestStatus, message string) {
	tb.Helper()
	n, err := q.JobRequestFinish(ctx, db, &queries.JobRequestFinishParams{ID: id, Status: string(status), Message: message})
	must(tb, err, "finishing request")
	if n != 1 {
		tb.Fatalf("testfactory: request %d is not active", id)
	}
}

// ExecutionOpts are the fields of an execution.
type ExecutionOpts struct {
	// Job defaults to the instance's, the request's, or DefaultJob.
	Job string
	// InstanceID is the instance it runs (default: a new one).
	InstanceID int64
	// RequestID is the request it runs (default: a new RUNNING request
	// claimed by WorkerID). The request names the execution unless
	// Unlinked.
	RequestID int64
	Unlinked  bool
	// WorkerID owns the execution (default "1@factory#b").
	WorkerID string
	// Status defaults to STARTED. An execution is written as a run writes
	// it: STARTING under the instance's next lease epoch, then started with
	// ChunksTotal and Targets, then ended (STOPPED, COMPLETED, FAILED with
	// ExitMessage and DomainRows; ABANDONED as the reaper ends it) or asked
	// to stop (STOPPING).
	Status      radartype.ExecutionStatus
	ChunksTotal int32
	Targets     int64
	ExitMessage string
	DomainRows  *int64
	// StopCause is recorded as the runner records why a run stopped.
	StopCause radartype.StopCause
	// KeepRequest leaves the request as it is when the execution ends (a
	// run whose outcome reached its execution but not its request, or a
	// request already finished); by default the request is finished with
	// it.
	KeepRequest bool
	// LastUpdatedAge is how long before now() the execution last recorded
	// progress (default 0).
	LastUpdatedAge time.Duration
	// ItemsWritten and ExternalCalls are figures the execution holds
	// beyond its checkpoints' (default 0), set before it ends.
	ItemsWritten  int64
	ExternalCalls int32
}

// DefaultWorkerID owns an execution whose Opts name no worker.
const DefaultWorkerID = "1@factory#b"

// Execution writes an execution owned by a worker at a lease epoch (the
// instance's next one, queries.JobInstanceTakeLease) through the queries a
// run uses, and returns its row.
func Execution(ctx context.Context, tb testing.TB, db queries.DBTX, opts *ExecutionOpts) *queries.JobExecution {
	tb.Helper()
	if opts == nil {
		opts = &ExecutionOpts{}
	}
	workerID := or(opts.WorkerID, DefaultWorkerID)
	job := opts.Job
	instanceID := opts.InstanceID
	if instanceID == 0 {
		instanceID = Instance(ctx, tb, db, &InstanceOpts{Job: job}).ID
	}
	if job == "" {
		inst, err := q.JobInstanceGetByID(ctx, db, instanceID)
		must(tb, err, "reading instance")
		job = inst.Job
	}
	requestID := opts.RequestID
	if requestID == 0 {
		requestID = Request(ctx, tb, db, &RequestOpts{Job: job, Status: radartype.RequestRunning, WorkerID: workerID}).ID
	}
	epoch, err := q.JobInstanceTakeLease(ctx, db, instanceID)
	must(tb, err, "taking the instance's lease")
	exec, err := q.JobExecutionInsert(ctx, db, &queries.JobExecutionInsertParams{
		InstanceID: instanceID, Job: job, RequestID: requestID, WorkerID: workerID, LeaseEpoch: epoch,
	})
	must(tb, err, "inserting execution")
	if !opts.Unlinked {
		must(tb, q.JobRequestSetExecution(ctx, db, &queries.JobRequestSetExecutionParams{ID: requestID, ExecutionID: &exec.ID}), "linking the request")
	}
	status := opts.Status
	if status == "" {
		status = radartype.ExecutionStarted
	}
	if status != radartype.ExecutionStarting {
		_, err := q.JobExecutionStart(ctx, db, &queries.JobExecutionStartParams{
			ID: exec.ID, WorkerID: workerID, LeaseEpoch: epoch, ChunksTotal: opts.ChunksTotal, Targets: opts.Targets,
		})
		must(tb, err, "starting execution")
	}
	if opts.ItemsWritten != 0 || opts.ExternalCalls != 0 {
		// No query moves the figures without a checkpoint.
		_, err := db.Exec(ctx, `UPDATE job_execution SET items_written = items_written + $2, external_calls = external_calls + $3 WHERE id = $1`,
			exec.ID, opts.ItemsWritten, opts.ExternalCalls)
		must(tb, err, "setting the execution's figures")
	}
	if opts.StopCause != "" {
		_, err := q.JobExecutionSetStopCause(ctx, db, &queries.JobExecutionSetStopCauseParams{ID: exec.ID, StopCause: string(opts.StopCause)})
		must(tb, err, "recording the stop cause")
	}
	switch status {
	case radartype.ExecutionStarting, radartype.ExecutionStarted:
	case radartype.ExecutionStopping:
		_, err := q.JobExecutionRequestStop(ctx, db, job)
		must(tb, err, "asking the execution to stop")
	default:
		FinishExecution(ctx, tb, db, exec.ID, &FinishOpts{Status: status, Message: opts.ExitMessage, DomainRows: opts.DomainRows, KeepRequest: opts.KeepRequest})
	}
	if opts.LastUpdatedAge != 0 {
		// No query backdates progress: a run records it as it makes it.
		_, err := db.Exec(ctx, `UPDATE job_execution SET last_updated = now() - make_interval(secs => $2) WHERE id = $1`, exec.ID, seconds(opts.LastUpdatedAge))
		must(tb, err, "backdating the execution's progress")
	}
	return ExecutionByID(ctx, tb, db, exec.ID)
}

// ExecutionByID reads an execution.
func ExecutionByID(ctx context.Context, tb testing.TB, db queries.DBTX, id int64) *queries.JobExecution {
	tb.Helper()
	exec, err := q.JobExecutionGetByID(ctx, db, id)
	must(tb, err, fmt.Sprintf("reading execution %d", id))
	return exec
}

// FinishOpts say how an execution ends.
type FinishOpts struct {
	// Status is the execution's final status (default COMPLETED).
	Status     radartype.ExecutionStatus
	Message    string
	DomainRows *int64
	// KeepRequest leaves the execution's request as it is; by default it
	// is finished too, with the status its execution's final status gives
	// it, as the run's end records both.
	KeepRequest bool
}

// FinishExecution ends an execution: its owner's end (queries.
// JobExecutionFinish, under the execution's own worker and lease epoch, so
// it fails once a newer execution of the instance took the lease) or, for
// ABANDONED, the reaper's (queries.JobExecutionAbandon).
func FinishExecution(ctx context.Context, tb testing.TB, db queries.DBTX, id int64, opts *FinishOpts) {
	tb.Helper()
	if opts == nil {
		opts = &FinishOpts{}
	}
	status := opts.Status
	if status == "" {
		status = radartype.ExecutionCompleted
	}
	exec := ExecutionByID(ctx, tb, db, id)
	var n int64
	var err error
	if status == radartype.ExecutionAbandoned {
		n, err = q.JobExecutionAbandon(ctx, db, &queries.JobExecutionAbandonParams{ID: id, ExitMessage: opts.Message})
	} else {
		n, err = q.JobExecutionFinish(ctx, db, &queries.JobExecutionFinishParams{
			ID: id, WorkerID: exec.WorkerID, LeaseEpoch: exec.LeaseEpoch, Status: string(status), ExitMessage: opts.Message, DomainRows: opts.DomainRows,
		})
	}
	must(tb, err, "finishing execution")
	if n != 1 {
		tb.Fatalf("testfactory: execution %d is not active under its worker and lease epoch", id)
	}
	if !opts.KeepRequest {
		FinishRequest(ctx, tb, db, exec.RequestID, status.RequestStatus(), opts.Message)
	}
}

// CheckpointOpts are the fields of a chunk's checkpoint.
type CheckpointOpts struct {
	// Chunk defaults to a new key.
	Chunk                             string
	Targets, Written, Skipped, Failed int64
	SkipReason                        string
	ExternalCalls                     int32
	// Unfenced writes the checkpoint and moves the execution's figures
	// whatever the execution's state, as a write that lost its ownership
	// but was not fenced would (raw SQL: no query writes past the fence).
	// By default the checkpoint is the run's own chunk commit
	// (queries.JobExecutionChunkCommit, fenced on the execution's worker and
	// lease epoch): it folds the chunk's parts and moves the figures.
	Unfenced bool
}

// Checkpoint commits a chunk of execution and returns its checkpoint.
func Checkpoint(ctx context.Context, tb testing.TB, db queries.DBTX, exec *queries.JobExecution, opts *CheckpointOpts) *queries.JobCheckpoint {
	tb.Helper()
	if opts == nil {
		opts = &CheckpointOpts{}
	}
	chunk := opts.Chunk
	if chunk == "" {
		chunk = fmt.Sprintf("chunk-%d", next())
	}
	if opts.Unfenced {
		_, err := db.Exec(ctx, `
WITH checkpoint AS (
    INSERT INTO job_checkpoint (instance_id, chunk, execution_id, targets, written, skipped, failed, skip_reason, external_calls)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
)
UPDATE job_execution SET chunks_done = chunks_done + 1, items_written = items_written + $5, items_skipped = items_skipped + $6,
    items_failed = items_failed + $7, external_calls = external_calls + $9, last_updated = now()
WHERE id = $3`, exec.InstanceID, chunk, exec.ID, opts.Targets, opts.Written, opts.Skipped, opts.Failed, opts.SkipReason, opts.ExternalCalls)
		must(tb, err, "writing checkpoint "+chunk)
	} else {
		_, err := q.JobExecutionChunkCommit(ctx, db, &queries.JobExecutionChunkCommitParams{
			ID: exec.ID, WorkerID: exec.WorkerID, LeaseEpoch: exec.LeaseEpoch, Chunk: chunk,
			Targets: opts.Targets, Written: opts.Written, Skipped: opts.Skipped, Failed: opts.Failed,
			SkipReason: opts.SkipReason, ChunkCalls: opts.ExternalCalls, ExternalCalls: opts.ExternalCalls,
		})
		must(tb, err, "committing chunk "+chunk)
	}
	rows, err := db.Query(ctx, `SELECT * FROM job_checkpoint WHERE instance_id = $1 AND chunk = $2`, exec.InstanceID, chunk)
	must(tb, err, "reading checkpoint "+chunk)
	cp, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByPos[queries.JobCheckpoint])
	must(tb, err, "reading checkpoint "+chunk)
	return cp
}

// CheckpointPart commits items of an unfinished chunk of execution, as a
// fan-out chunk does (queries.JobExecutionPartCommit, fenced).
func CheckpointPart(ctx context.Context, tb testing.TB, db queries.DBTX, exec *queries.JobExecution, chunk string, items ...string) {
	tb.Helper()
	_, err := q.JobExecutionPartCommit(ctx, db, &queries.JobExecutionPartCommitParams{
		ID: exec.ID, WorkerID: exec.WorkerID, LeaseEpoch: exec.LeaseEpoch, Chunk: chunk, Items: items,
	})
	must(tb, err, "committing a part of chunk "+chunk)
}

// ScheduleTickOpts are the fields of a schedule's due time.
type ScheduleTickOpts struct {
	// Job defaults to DefaultJob; DueAt to the start of the current hour
	// (UTC); Outcome to enqueued.
	Job           string
	DueAt         time.Time
	Spec          string
	Outcome       string
	Params        []byte
	ParamsHash    string
	RequestID     *int64
	CoalescedInto *time.Time
	Message       string
}

// ScheduleTick records a due time (queries.ScheduleTickInsert).
func ScheduleTick(ctx context.Context, tb testing.TB, db queries.DBTX, opts *ScheduleTickOpts) *queries.ScheduleTick {
	tb.Helper()
	if opts == nil {
		opts = &ScheduleTickOpts{}
	}
	due := opts.DueAt
	if due.IsZero() {
		due = time.Now().UTC().Truncate(time.Hour)
	}
	tick, err := q.ScheduleTickInsert(ctx, db, &queries.ScheduleTickInsertParams{
		Job: or(opts.Job, DefaultJob), DueAt: due, Spec: opts.Spec, Outcome: or(opts.Outcome, "enqueued"),
		Params: opts.Params, ParamsHash: opts.ParamsHash, RequestID: opts.RequestID, CoalescedInto: opts.CoalescedInto, Message: opts.Message,
	})
	must(tb, err, "recording due time")
	return tick
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}
