package queries

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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

// InTxPipelined runs a READ COMMITTED transaction in the fewest round trips
// a transaction with a decision in the middle can take. Its BEGIN travels
// with the statements first queues (and, under WithTxSettings, the SET
// LOCAL of the timeouts, before them) and with the first statement fn runs
// on tx: a library that needs a pgx.Tx (River's insert) thus joins the
// first round trip. While tx.DeferExecs is on, Exec statements after that
// one are not sent but queued to go with the COMMIT (River's NOTIFY, which
// the server delivers at COMMIT anyway). fn then queues on tx.Last the
// statements that end the transaction, and those travel with the COMMIT.
// The enqueue (lock and state read, River's INSERT; River's NOTIFY, the
// request row) thus costs two round trips instead of four. A serialization
// failure or deadlock rolls back and runs the whole transaction again, as
// InTx does.
//
// The results of first's statements are read with their QueuedQuery
// callbacks when the first round trip returns; fn must call tx.Flush before
// it reads them unless it has run a statement on tx, and an error of one
// is returned to the statement that carried them (and by Flush). The
// statements on Last run before the COMMIT in the same pipeline, so an
// error the server raises for one of them (a unique violation, say) skips
// the COMMIT and rolls the transaction back. An error a callback of Last
// returns does not: the server has committed by the time the callback
// runs, so those callbacks should only scan. fn must not keep tx: the
// transaction ends behind it, on the connection, and the connection
// returns to the pool when InTxPipelined returns.
func InTxPipelined(ctx context.Context, pool *pgxpool.Pool, first func(b *pgx.Batch), fn func(tx *PipelinedTx) error) error {
	return retryConflicts(ctx, TxRetryAttempts, func() error {
		return inTxPipelinedOnce(ctx, pool, first, fn)
	})
}

func inTxPipelinedOnce(ctx context.Context, pool *pgxpool.Pool, first func(b *pgx.Batch), fn func(tx *PipelinedTx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("error acquiring a connection: %w", err)
	}
	// Release destroys the connection unless it is idle outside a
	// transaction, so an error path that could not roll back never hands
	// an open transaction to the pool's next user.
	defer conn.Release()
	b := beginBatch(ctx)
	first(b)
	tx := &PipelinedTx{conn: conn.Conn(), lead: b, Last: &pgx.Batch{}}
	if err := fn(tx); err != nil {
		tx.rollback(ctx)
		return err
	}
	if err := tx.Flush(ctx); err != nil {
		tx.rollback(ctx)
		return err
	}
	last := &pgx.Batch{QueuedQueries: append(tx.deferred, tx.Last.QueuedQueries...)}
	queueCommit(last)
	if err := conn.Conn().SendBatch(ctx, last).Close(); err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			// A statement before the COMMIT failed: the COMMIT was skipped.
			tx.rollback(ctx)
		}
		return fmt.Errorf("error committing transaction: %w", err)
	}
	return nil
}

// InOneTrip runs a READ COMMITTED transaction in one round trip: its BEGIN
// travels with the statements lead queues (and, under WithTxSettings, the
// SET LOCAL of the timeouts), the first statement fn runs on tx (River's
// INSERT, which needs a pgx.Tx), the statements trail queues and the
// COMMIT, all sent together when fn runs that first statement (or when fn
// returns without one). Nothing can be decided between the statements, so
// a condition that must undo the transaction has to fail inside the server:
// the first statement that raises rolls everything back, and InOneTrip
// returns that error (its callers then take a slower path that decides in
// the client).
//
// fn sees its first statement's own result; the trail's results are read,
// with their QueuedQuery callbacks, when that result is closed. Statements
// fn runs after the first are sent once the transaction has committed, each
// in an implicit transaction of its own (River's NOTIFY of the insert,
// which the server then delivers at once). After a rollback an Exec is not
// sent and answers with no error (there is nothing to announce), and a
// Query answers with the transaction's error: nothing may run outside the
// transaction as if it had committed. So fn's own view of success is not
// the transaction's: InOneTrip returns the transaction's first error, and
// does not retry; and an error fn returns once the batch has gone undoes
// nothing (InOneTrip returns it all the same). The trail has to check that
// the first statement was the one it follows (the enqueue checks that
// River's INSERT wrote a job).
func InOneTrip(ctx context.Context, pool *pgxpool.Pool, lead, trail func(b *pgx.Batch), fn func(tx pgx.Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("error acquiring a connection: %w", err)
	}
	// Release destroys the connection unless it is idle outside a
	// transaction (see inTxPipelinedOnce).
	defer conn.Release()
	b := beginBatch(ctx)
	lead(b)
	tx := &PipelinedTx{conn: conn.Conn(), lead: b, trail: &pgx.Batch{}}
	trail(tx.trail)
	fnErr := fn(tx)
	if fnErr != nil && tx.lead != nil {
		return fnErr // failed before its first statement: nothing was sent, nothing is
	}
	if err := tx.Flush(ctx); err != nil {
		return err
	}
	return fnErr
}

// beginBatch starts a batch with the BEGIN of a READ COMMITTED transaction
// and, under WithTxSettings, the SET LOCAL of its timeouts.
func beginBatch(ctx context.Context) *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if params, ok := txSettings(ctx); ok {
		Queue(b, func(db DBTX) { _ = New().TxSettingsSetLocal(ctx, db, params) })
	}
	return b
}

// queueCommit queues the COMMIT that ends a pipelined transaction; it fails
// with pgx.ErrTxCommitRollback when the server answers that it rolled back.
func queueCommit(b *pgx.Batch) {
	b.Queue("commit").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback // the transaction had failed already
		}
		return nil
	})
}

// PipelinedTx is the transaction InTxPipelined (and InOneTrip) hands to its
// fn: a pgx.Tx whose first statement travels with the BEGIN and the
// statements queued ahead of it, and whose later Execs can be deferred to
// the COMMIT (under InOneTrip: the COMMIT travels with the first statement).
type PipelinedTx struct {
	conn *pgx.Conn
	lead *pgx.Batch // BEGIN and the statements queued ahead; nil once sent
	tx   pgx.Tx     // the transaction once lead was sent
	err  error      // the error of the lead's round trip

	// trail, under InOneTrip, holds the statements that follow the first
	// one, before the COMMIT that travels with them; ended is set once
	// their results were read (the transaction is over, err its failure).
	trail *pgx.Batch
	ended bool

	// Last holds the statements that end the transaction; they travel with
	// the COMMIT.
	Last *pgx.Batch
	// DeferExecs, while true, queues each Exec run after the first round
	// trip to go with the COMMIT, before Last's statements, instead of
	// sending it: for statements whose result nothing waits for. An error
	// of one fails the COMMIT.
	DeferExecs bool
	deferred   []*pgx.QueuedQuery
}

var _ pgx.Tx = (*PipelinedTx)(nil)

// Flush sends the statements queued ahead, with the BEGIN, when no
// statement has carried them yet, and reads their results.
func (t *PipelinedTx) Flush(ctx context.Context) error {
	if t.lead == nil {
		return t.err
	}
	if br := t.sendWith(ctx, "", nil); br != nil {
		t.err = br.Close()
		t.endWith(t.err)
	}
	return t.err
}

// endWith records how the batch that carried the statements ended (its
// results closed with err). Under InOneTrip that ends the transaction: a
// failure before the COMMIT leaves it aborted on the connection, and it is
// rolled back here.
func (t *PipelinedTx) endWith(err error) {
	if t.trail == nil {
		return // InTxPipelined: the error goes to the statement that carried the batch
	}
	if err != nil && t.err == nil {
		t.err = err
	}
	t.ended = true
	if t.conn.PgConn().TxStatus() != 'I' {
		t.rollback(context.Background()) // the statement that ended it may have been cancelled
	}
}

// sendWith sends the lead batch, with the statement sql appended unless it
// is empty, and reads the results of the statements queued ahead. It
// returns the results positioned at sql's, for the caller to read and
// close, or nil when the round trip failed (t.err).
func (t *PipelinedTx) sendWith(ctx context.Context, sql string, args []any) pgx.BatchResults {
	b := t.lead
	t.lead = nil
	ahead := b.Len()
	if sql != "" {
		b.Queue(sql, args...)
	}
	if t.trail != nil {
		b.QueuedQueries = append(b.QueuedQueries, t.trail.QueuedQueries...)
		queueCommit(b)
	}
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	for _, qq := range b.QueuedQueries[:ahead] {
		var err error
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			t.err = err
			_ = br.Close()
			t.endWith(err)
			return nil
		}
	}
	return br
}

// rollback ends the transaction when it was begun.
func (t *PipelinedTx) rollback(ctx context.Context) {
	if t.tx != nil {
		_ = t.tx.Rollback(context.WithoutCancel(ctx)) // closed already when the batch failed before its BEGIN
	}
}

// Query implements pgx.Tx; the first statement carries the lead.
func (t *PipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.lead == nil {
		if t.err != nil {
			return nil, t.err
		}
		if t.trail != nil {
			if !t.ended {
				return nil, errOneTripOpen
			}
			return t.conn.Query(ctx, sql, args...) // committed (a rollback returned its error above)
		}
		return t.tx.Query(ctx, sql, args...)
	}
	br := t.sendWith(ctx, sql, args)
	if br == nil {
		return nil, t.err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br, tx: t}, nil
}

// QueryRow implements pgx.Tx.
func (t *PipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return rowsRow{rows: rows, err: err}
}

// Exec implements pgx.Tx; the first statement carries the lead, and later
// ones wait for the COMMIT while DeferExecs is on.
func (t *PipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case t.lead != nil:
		br := t.sendWith(ctx, sql, args)
		if br == nil {
			return pgconn.CommandTag{}, t.err
		}
		tag, err := br.Exec()
		closeErr := br.Close()
		t.endWith(closeErr)
		return tag, errors.Join(err, closeErr)
	case t.trail != nil:
		if !t.ended {
			return pgconn.CommandTag{}, errOneTripOpen
		}
		if t.err != nil {
			return pgconn.CommandTag{}, nil // rolled back: nothing to announce; InOneTrip reports the failure
		}
		return t.conn.Exec(ctx, sql, args...)
	case t.err != nil:
		return pgconn.CommandTag{}, t.err
	case t.DeferExecs:
		t.deferred = append(t.deferred, &pgx.QueuedQuery{SQL: sql, Arguments: args})
		return pgconn.CommandTag{}, nil
	}
	return t.tx.Exec(ctx, sql, args...)
}

// SendBatch implements pgx.Tx.
func (t *PipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.Flush(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// CopyFrom implements pgx.Tx.
func (t *PipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.Flush(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

// Prepare implements pgx.Tx.
func (t *PipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// Begin implements pgx.Tx (a savepoint).
func (t *PipelinedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// LargeObjects implements pgx.Tx.
func (t *PipelinedTx) LargeObjects() pgx.LargeObjects {
	_ = t.Flush(context.Background()) // an error shows on the first use
	return t.tx.LargeObjects()
}

// errOneTripOpen refuses a statement while the first statement's rows of an
// InOneTrip transaction are still open.
var errOneTripOpen = errors.New("queries: close the first statement's rows before running another")

// errEndsWithFn is what Commit and Rollback answer: the transaction of
// InTxPipelined ends with its fn.
var errEndsWithFn = errors.New("queries: an InTxPipelined transaction commits when its fn returns nil and rolls back when it returns an error")

// Commit implements pgx.Tx; InTxPipelined commits.
func (t *PipelinedTx) Commit(context.Context) error { return errEndsWithFn }

// Rollback implements pgx.Tx; InTxPipelined rolls back.
func (t *PipelinedTx) Rollback(context.Context) error { return errEndsWithFn }

// Conn implements pgx.Tx.
func (t *PipelinedTx) Conn() *pgx.Conn { return t.conn }

// batchRows are the rows of a statement that carried a lead: closing them
// closes the batch's results, which frees the connection.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	tx       *PipelinedTx
	closeErr error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.closeErr = r.br.Close()
		r.br = nil
		r.tx.endWith(r.closeErr)
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// rowsRow is a pgx.Row over rows.
type rowsRow struct {
	rows pgx.Rows
	err  error
}

func (r rowsRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
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
