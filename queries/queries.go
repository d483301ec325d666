// Package queries holds the SQL of buildrisk-radar's own tables: one
// <table>.sql file per table, the code sqlc generates from them (committed,
// never edited by hand), and this small hand-written file that translates
// driver errors into this package's sentinels. The transactions the
// statements run in, with their retry rules and the classification of
// database errors, are package sql/pgtx's.
//
// Nothing else in the module writes SQL of its tables.
package queries

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:generate go tool -modfile=../tools/go.mod sqlc generate -f ../sqlc.yaml

// ErrNotFound is returned in place of pgx.ErrNoRows.
var ErrNotFound = errors.New("not found")

// ErrUniqueViolation is returned in place of SQLSTATE 23505.
var ErrUniqueViolation = errors.New("unique violation")

// Interpret maps driver errors to this package's sentinels, keeping the
// original in the chain.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %w", ErrUniqueViolation, err)
	}
	return err
}

// EnqueueStateTx takes the job's advisory lock unless the job's active
// request is one the stale cleanup could not free (JobLockUnlessSettled;
// staleSeconds <= 0 always locks), then reads JobRequestEnqueueState, both
// in one round trip: a pipelined batch whose statements still run one after
// the other, each with its own snapshot, so the state is read after the
// lock is held, exactly as two separate calls would read it. settled is
// that active request's id when the lock was not taken (the state was then
// read without it: the caller answers a duplicate), 0 when it was. The
// enqueue's latency is mostly round trips; this saves one.
func (q *Queries) EnqueueStateTx(ctx context.Context, tx pgx.Tx, job string, staleSeconds float64) (state *JobRequestEnqueueStateRow, settled int64, err error) {
	batch := &pgx.Batch{}
	q.QueueEnqueueState(ctx, batch, job, staleSeconds, &settled, &state)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, 0, err
	}
	return state, settled, nil
}

// QueueEnqueueState queues on b what EnqueueStateTx sends: the job's
// advisory lock unless its active request is settled (JobLockUnlessSettled,
// whose answer is stored in *settled), then JobRequestEnqueueState, whose
// row is stored in *state when b's results are read.
func (q *Queries) QueueEnqueueState(ctx context.Context, b *pgx.Batch, job string, staleSeconds float64, settled *int64, state **JobRequestEnqueueStateRow) {
	params := &JobLockUnlessSettledParams{Job: job, StaleSeconds: staleSeconds}
	QueueRow(b, func(db DBTX) error {
		var err error
		*settled, err = q.JobLockUnlessSettled(ctx, db, params)
		return err
	})
	QueueRow(b, func(db DBTX) error {
		var err error
		*state, err = q.JobRequestEnqueueState(ctx, db, job)
		return err
	})
}

// batchRow hands a generated query method the row a batch already
// returned, so the batch reuses the generated scan instead of a copy of it.
// It answers nothing but QueryRow.
type batchRow struct {
	DBTX
	row pgx.Row
}

// QueryRow implements DBTX with the batch's row.
func (b batchRow) QueryRow(context.Context, string, ...any) pgx.Row { return b.row }
