// Package queries holds the SQL of buildrisk-radar's own tables: one
// <table>.sql file per table, the code sqlc generates from them (committed,
// never edited by hand), and this small hand-written file that translates
// driver errors and runs metadata transactions with their retry rules.
//
// Nothing else in the module writes SQL.
package queries

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

//go:generate go tool -modfile=../tools/go.mod sqlc generate -f ../sqlc.yaml

// ErrNotFound is returned in place of pgx.ErrNoRows.
var ErrNotFound = errors.New("not found")

// ErrUniqueViolation is returned in place of SQLSTATE 23505.
var ErrUniqueViolation = errors.New("unique violation")

// NotOwnedCode is the SQLSTATE radar_owned raises when a fenced statement
// found no execution: the run lost its ownership (see migration 00082).
const NotOwnedCode = "BR001"

// IsNotOwned reports whether err is a fenced statement's refusal
// (NotOwnedCode), which rolled back everything sent with it.
func IsNotOwned(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == NotOwnedCode
}

// TxRetryAttempts is how many times a metadata transaction is retried after a
// serialization failure or a deadlock: two different jobs started together
// must both run, and a conflict between them is transient.
const TxRetryAttempts = 3

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

// Beginner starts transactions; *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// IsRetryable reports whether err is a serialization failure (40001) or a
// deadlock (40P01), the conflicts a short retry resolves.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// transientCodes are the SQLSTATEs of a database that is briefly away or
// busy rather than of a wrong statement: admin shutdown (57P01, a fast
// restart), crash shutdown (57P02), cannot connect now (57P03, starting up
// or shutting down), serialization failure (40001), deadlock (40P01),
// statement timeout or cancel (57014), lock timeout (55P03), too many
// connections (53300), and the connection exceptions (class 08).
var transientCodes = map[string]bool{
	"57P01": true, "57P02": true, "57P03": true,
	"40001": true, "40P01": true,
	"57014": true, "55P03": true, "53300": true,
}

// ProviderError is the provider side of the error classification: an error
// from calling a provider or reading its answer (upstream.CallError). Its
// retries are the provider client's; IsTransient is false for any error
// chain that holds one, so a provider's broken answer is never retried as a
// database outage nor reported as one.
type ProviderError interface {
	error
	// ProviderName names the provider whose answer failed.
	ProviderName() string
}

// IsTransient reports whether err is a database error that waiting and
// trying again can cure: a server that restarts, refuses or resets
// connections, or times a statement out, and the conflicts of IsRetryable.
// It is THE classification of transient database errors: the worker retries
// these inside its fencing window, and the API answers them with 503 and
// Retry-After instead of 500 (a pool exhausted until the call's deadline,
// a lock_timeout, a database restarting or gone).
//
// A deadline of the caller's context counts (a call that timed out), a
// cancellation does not (the caller gave up), and neither does an HTTP
// client error nor any error chain holding a ProviderError (a provider, not
// the database, even when a network error or an unexpected EOF from
// reading its answer lies underneath).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var urlErr *url.Error
	var providerErr ProviderError
	if errors.As(err, &urlErr) || errors.As(err, &providerErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exceptions; class 53: insufficient resources
		// (too many connections, out of memory or disk).
		return transientCodes[pgErr.Code] || len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "53")
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		return true // a pool closed under the call (a process shutting down)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// A connection the server closed under a query ("conn closed") is safe
	// to retry by pgx's own judgement.
	return pgconn.SafeToRetry(err)
}

// TxSettings are the statement_timeout and lock_timeout that InTx applies
// with SET LOCAL at the start of every transaction it runs under a context
// carrying them (WithTxSettings). Behind PgBouncer's transaction pooling a
// connection's session settings cannot be relied on (PgBouncer refuses them
// as startup parameters, and a session SET would follow the server
// connection to other clients), so the api carries its timeouts this way
// for its transactions: a lock wait under a job's advisory lock still ends
// with a lock timeout.
type TxSettings struct {
	StatementTimeout time.Duration
	LockTimeout      time.Duration
}

type txSettingsKey struct{}

// txSettings returns the settings ctx carries for its transactions as the
// arguments of TxSettingsSetLocal, and whether it carries any.
func txSettings(ctx context.Context) (*TxSettingsSetLocalParams, bool) {
	settings, ok := ctx.Value(txSettingsKey{}).(TxSettings)
	if !ok {
		return nil, false
	}
	return &TxSettingsSetLocalParams{
		StatementTimeoutMs: strconv.FormatInt(settings.StatementTimeout.Milliseconds(), 10),
		LockTimeoutMs:      strconv.FormatInt(settings.LockTimeout.Milliseconds(), 10),
	}, true
}

// WithTxSettings returns ctx carrying settings for the transactions InTx
// runs under it.
func WithTxSettings(ctx context.Context, settings TxSettings) context.Context {
	return context.WithValue(ctx, txSettingsKey{}, settings)
}

// InTx runs fn in a READ COMMITTED transaction and commits it. A
// serialization failure or deadlock rolls back and runs fn again, up to
// TxRetryAttempts more times with a short jittered backoff; any other error
// rolls back and is returned.
func InTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	return InTxOpts(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, TxRetryAttempts, fn)
}

// InTxOpts is InTx with explicit transaction options and retry count (0
// disables retries; the tests use it to show the conflict the retry
// absorbs). Metadata transactions use READ COMMITTED: under SERIALIZABLE,
// two different jobs started together read each other's execution tables
// and one of them failed to start with a serialization error.
func InTxOpts(ctx context.Context, db Beginner, opts pgx.TxOptions, retries int, fn func(tx pgx.Tx) error) error {
	return retryConflicts(ctx, retries, func() error { return inTxOnce(ctx, db, opts, fn) })
}

// retryConflicts runs attempt and, while it fails with a serialization
// failure or a deadlock, runs it again up to retries more times with a
// short jittered backoff.
func retryConflicts(ctx context.Context, retries int, attempt func() error) error {
	for n := 0; ; n++ {
		err := attempt()
		if err == nil || !IsRetryable(err) || n >= retries {
			return err
		}
		backoff := time.Duration(10*(n+1))*time.Millisecond + rand.N(10*time.Millisecond)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

func inTxOnce(ctx context.Context, db Beginner, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("error beginning transaction: %w", err)
	}
	if params, ok := txSettings(ctx); ok {
		if err := New().TxSettingsSetLocal(ctx, tx, params); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("error setting transaction timeouts: %w", err)
		}
	}
	return runAndCommit(ctx, tx, fn)
}

// runAndCommit runs fn in tx and commits, or rolls back when fn fails.
func runAndCommit(ctx context.Context, tx pgx.Tx, fn func(tx pgx.Tx) error) error {
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing transaction: %w", err)
	}
	return nil
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
