package batch

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrReadOnly is what a Reader answers to a statement it cannot send: a
// job writes in its chunks' commits (ChunkResult) or in Run.Fenced, never
// through its reader.
var ErrReadOnly = errors.New("a job's database handle is read-only: write in the chunk's commit (ChunkResult) or in Run.Fenced")

// Reader is the database handle a job reads with (Run.DB). Every statement
// it sends runs in a read-only transaction of its own (BEGIN READ ONLY,
// the statement and COMMIT in one pipelined round trip), so a write sent
// through it fails in the server (SQLSTATE 25006) whatever its SQL, an
// INSERT ... RETURNING read with QueryRow included; Exec and CopyFrom
// refuse with ErrReadOnly without sending anything, and it has no way to
// begin a transaction. It satisfies queries.DBTX, so the generated read
// methods take it as they take a pool. Every write of a run is thereby
// fenced on the run's execution: a run that lost its execution can read,
// but not write.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// Exec refuses: a statement run for its effect is a write.
func (*Reader) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, ErrReadOnly
}

// CopyFrom refuses: COPY FROM is a write.
func (*Reader) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, ErrReadOnly
}

// Query runs sql in a read-only transaction; the transaction commits when
// the rows are closed.
func (r *Reader) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := r.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &readRows{Rows: rows, batch: br}, nil
}

// QueryRow runs sql in a read-only transaction and returns its first row,
// as pgx's QueryRow does: pgx.ErrNoRows when there is none.
func (r *Reader) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := r.Query(ctx, sql, args...)
	return readRow{rows: rows, err: err}
}

// readRows are a Reader's rows: closing them reads the COMMIT's result and
// gives the connection back.
type readRows struct {
	pgx.Rows
	batch    pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *readRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.closeErr = r.batch.Close()
}

func (r *readRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *readRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// readRow is the one row of a Reader's QueryRow.
type readRow struct {
	rows pgx.Rows
	err  error
}

func (r readRow) Scan(dest ...any) error {
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
