package batch

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// commitChunk commits a chunk's writes and its checkpoint in one
// transaction with the chunk's whole bookkeeping (JobExecutionChunkCommit:
// the counts, the checkpoint, the execution's status). The bookkeeping is
// fenced: it raises (ErrOwnershipLost, everything rolls back) unless the
// execution is still active under this run's worker and lease epoch, and it
// locks the execution row until the commit. A chunk whose writes are
// queued statements (ChunkResult.Queue) commits in one round trip: its
// bookkeeping and writes in one implicit transaction. A chunk with a Write
// function runs it in an explicit transaction whose BEGIN travels with the
// bookkeeping, then commits: a chunk whose writes are one statement takes
// three round trips. Transient errors are retried inside the window; an
// attempt after an error whose commit may have landed first looks for the
// chunk's checkpoint, so a chunk is never counted twice.
func (r *Runner) commitChunk(ctx context.Context, rs *runState, chunk string, res *ChunkResult, chunkCalls, newCalls int32) (radartype.ExecutionStatus, error) {
	if res.Write != nil && res.Queue != nil {
		return "", fmt.Errorf("chunk %s: a ChunkResult sets Write or Queue, not both", chunk)
	}
	var execStatus radartype.ExecutionStatus
	attempt := 0
	params := &queries.JobExecutionChunkCommitParams{
		ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
		Chunk: chunk, Targets: res.Targets, Written: res.Written, Skipped: res.Skipped, Failed: res.Failed,
		SkipReason: res.SkipReason, ExternalCalls: newCalls, ChunkCalls: chunkCalls,
	}
	err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		attempt++
		if attempt > 1 {
			committed, status, err := r.committedBefore(callCtx, rs, chunk)
			if err != nil || committed {
				execStatus = status
				return err
			}
		}
		var status string
		bookkeeping := func(b *pgx.Batch) {
			queries.Queue(b, func(db queries.DBTX) { _, _ = r.queries.JobExecutionChunkCommit(callCtx, db, params) }).
				QueryRow(func(row pgx.Row) error { return row.Scan(&status) })
		}
		var err error
		if res.Write == nil {
			err = pgtx.InImplicitTx(callCtx, r.pool, func(b *pgx.Batch) {
				bookkeeping(b)
				if res.Queue != nil {
					res.Queue(b)
				}
			})
		} else {
			err = pgtx.InTxBatch(callCtx, r.pool, bookkeeping, func(tx pgx.Tx) error {
				if err := res.Write(callCtx, tx); err != nil {
					return fmt.Errorf("error writing chunk: %w", err)
				}
				return nil
			})
		}
		if err == nil {
			err = r.testSignals.committed(commitChunk)
		}
		switch {
		case pgtx.IsNotOwned(err):
			return rs.lost()
		case err != nil:
			return fmt.Errorf("error committing chunk: %w", err)
		}
		execStatus = radartype.ExecutionStatus(status)
		return nil
	})
	return execStatus, err
}

// committedBefore reports whether an earlier attempt of the chunk's commit
// landed although its answer was lost, with the execution's status then. A
// checkpoint of the chunk by another execution, or an execution that is no
// longer the run's, is ErrOwnershipLost.
func (r *Runner) committedBefore(ctx context.Context, rs *runState, chunk string) (bool, radartype.ExecutionStatus, error) {
	owner, err := r.queries.JobCheckpointOwner(ctx, r.pool, &queries.JobCheckpointOwnerParams{InstanceID: rs.exec.InstanceID, Chunk: chunk})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, "", nil
	case err != nil:
		return false, "", err
	case owner != rs.exec.ID:
		return false, "", rs.lost() // another execution committed the chunk
	}
	status, err := r.queries.JobExecutionOwned(ctx, r.pool, &queries.JobExecutionOwnedParams{
		ID: rs.exec.ID, WorkerID: rs.exec.WorkerID, LeaseEpoch: rs.exec.LeaseEpoch,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", rs.lost()
	}
	return err == nil, radartype.ExecutionStatus(status), err
}
