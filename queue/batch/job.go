package batch

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/upstream"
)

// Job is one runnable job. Plan and Process must not hold a database
// transaction open; they read through Run.DB, which cannot write, and the
// runner commits what ChunkResult.Write or Queue writes together with the
// chunk's checkpoint. A write outside a chunk (a plan frozen in the
// database) goes through Run.Fenced.
type Job interface {
	// Plan lists the job's chunks (stable keys: a resume skips the keys
	// already committed) and declares its targets.
	Plan(ctx context.Context, run *Run) (*Plan, error)
	// Process does one chunk's reading and external calls.
	Process(ctx context.Context, run *Run, chunk string) (*ChunkResult, error)
}

// DomainRowCounter is implemented by jobs that can count, with a query, the
// domain rows their executions wrote: a second count, independent of the
// runner's own, so that a loss can be proved from the data and not only
// from the counters.
type DomainRowCounter interface {
	DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error)
}

// RunEnder is implemented by jobs that keep state for an execution between
// its chunks (an open parse of a file): the runner calls EndRun once the
// execution's chunks are over, whatever the outcome.
type RunEnder interface {
	EndRun(run *Run)
}

// TargetsUnknown declares that a job learns its targets chunk by chunk.
const TargetsUnknown = -1

// Plan is a job's work list.
type Plan struct {
	Chunks []string
	// Targets is the number of items the whole instance must account for,
	// or TargetsUnknown when each chunk declares its own.
	Targets int64
}

// ChunkResult is one processed chunk.
type ChunkResult struct {
	// Targets is how many items the chunk was responsible for; every one of
	// them must be written, skipped or failed.
	Targets, Written, Skipped, Failed int64
	// SkipReason says why the chunk's items were skipped ("holiday");
	// the execution's final message totals skipped items by reason.
	SkipReason string
	// Write runs in the checkpoint transaction. It may be nil.
	Write func(ctx context.Context, tx pgx.Tx) error
	// Queue, in place of Write, adds the chunk's writes to the commit's
	// batch as statements (queries.Queue): the chunk then commits in one
	// round trip, its writes and its bookkeeping in one implicit
	// transaction (pgtx.InImplicitTx). A statement that fails rolls the
	// chunk back; a statement's result callback runs once the batch has
	// committed, so an error it returns fails the run but undoes nothing.
	// Set at most one of Write and Queue.
	Queue func(b *pgx.Batch)
}

// Run is what a job sees of its execution.
type Run struct {
	Job         string
	RequestID   int64
	ExecutionID int64
	InstanceID  int64
	Params      json.RawMessage
	Calls       *upstream.Caller
	// DB is the run's read-only handle: a job reads with it, and writes
	// only in its chunks' commits (ChunkResult) or in Fenced, both fenced
	// on the run's execution. Fenced and the part commits write through
	// its pool.
	//
	// A Run built outside a runner (a test of a job's own Plan and Process,
	// execution id 0, DB set to NewReader of the test's pool) is detached:
	// its Fenced writes are plain transactions, fenced on nothing, and its
	// fan-out's values are only written, accounted to no execution. A
	// runner never gives one.
	DB          *Reader
	Logger      *slog.Logger
	FanOut      int
	Instruments *observability.Instruments

	// fence is the run's execution, worker and lease epoch, which Fenced
	// fences on; nil for a detached run.
	fence *runFence
	// parts commits the finished items of a fan-out chunk (FanOutCommit).
	parts *partCommitter
}

// pool is what Fenced and the part commits write with: DB's pool (nil
// when the Run has no DB).
func (run *Run) pool() *pgxpool.Pool {
	if run.DB == nil {
		return nil
	}
	return run.DB.pool
}
