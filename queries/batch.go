package queries

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
