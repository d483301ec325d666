package queries

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchSender sends pipelined batches; *pgxpool.Pool and *pgx.Conn satisfy
// it.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// InTxBatch runs a READ COMMITTED transaction whose BEGIN travels to the
// server in one round trip with the statements first queues, then runs fn
// in it and commits. It saves the round trip of a separate BEGIN on hot,
// short transactions (a chunk's commit). The statements' results are read
// with their QueuedQuery callbacks before fn runs; an error of one (pgx's
// ErrNoRows from a fenced statement that found no row, say) rolls back and
// is returned, like an error of fn. Unlike InTx it does not retry: its
// callers retry the whole transaction themselves.
func InTxBatch(ctx context.Context, db BatchSender, first func(b *pgx.Batch), fn func(tx pgx.Tx) error) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	first(b)
	br := db.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // closed already when the batch failed before its BEGIN
		return err
	}
	return runAndCommit(ctx, tx, fn)
}

// InImplicitTx sends the statements queue adds as one batch, which the
// server runs as one implicit transaction: committed at the batch's end
// when every statement succeeded, rolled back entirely when one failed (the
// statements after it do not run). It is one round trip where InTxBatch
// takes two (the batch with its BEGIN, then COMMIT), so it suits hot commits
// whose statements are all known before sending. Because nothing can be
// decided between the statements, a condition that must undo the batch has
// to fail inside the server: a fenced statement raises (radar_owned)
// instead of returning no row. The statements' results are read with their
// QueuedQuery callbacks; the first error of one is returned. Like InTxBatch
// it does not retry.
func InImplicitTx(ctx context.Context, db BatchSender, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	queue(b)
	if b.Len() == 0 {
		return nil
	}
	return db.SendBatch(ctx, b).Close()
}

// QueueRow queues on b the one-row statement call runs on its DBTX (as
// Queue does) and, when b's results are read, runs call again on the row
// the batch returned: the generated method scans its own result, and call
// handles it as after a direct call. The error call returns while its
// statement is being captured is ignored.
func QueueRow(b *pgx.Batch, call func(db DBTX) error) {
	Queue(b, func(db DBTX) { _ = call(db) }).QueryRow(func(row pgx.Row) error {
		return call(batchRow{row: row})
	})
}

// Queue queues on b the one statement that call runs on its DBTX, with its
// arguments, and returns it so that its result can be read with a
// callback. call is meant to be a generated method: a batch is built from
// the sqlc queries themselves, never from copies of their SQL. The
// statement is only captured while call runs (the method sees an error
// instead of a result, which call must ignore); it is executed when b is
// sent.
func Queue(b *pgx.Batch, call func(db DBTX)) *pgx.QueuedQuery {
	c := &capture{}
	call(c)
	if c.sql == "" {
		panic("queries.Queue: call ran no statement")
	}
	return b.Queue(c.sql, c.args...)
}

// errCaptured is what a captured statement answers: it did not run yet.
var errCaptured = errors.New("statement captured for a batch, not run")

// capture is a DBTX that records the statement run on it.
type capture struct {
	sql  string
	args []any
}

func (c *capture) record(sql string, args []any) {
	if c.sql != "" {
		panic("queries.Queue: call ran more than one statement")
	}
	c.sql, c.args = sql, args
}

func (c *capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.record(sql, args)
	return pgconn.CommandTag{}, errCaptured
}

func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.record(sql, args)
	return nil, errCaptured
}

func (c *capture) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.record(sql, args)
	return capturedRow{}
}

func (c *capture) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	panic("queries.Queue: COPY cannot be queued in a batch")
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }
