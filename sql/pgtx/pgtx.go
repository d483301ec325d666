// Package pgtx is the transaction transport every database write of
// buildrisk-radar travels on: transactions with their retry rules (InTx),
// pipelined and implicit transactions for hot commits (InTxBatch,
// InImplicitTx), the per-transaction timeouts a context carries
// (TxSettings), and the classification of database errors (IsTransient,
// IsRetryable, IsNotOwned).
//
// It sits below package queries, which holds the statements: queries may
// import pgtx, and pgtx imports nothing of this module, so the rules for
// how a transaction is run and retried live in one place whatever runs in
// it.
package pgtx

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxRetryAttempts is how many times a metadata transaction is retried after a
// serialization failure or a deadlock: two different jobs started together
// must both run, and a conflict between them is transient.
const TxRetryAttempts = 3

// Beginner starts transactions; *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// BatchSender sends pipelined batches; *pgxpool.Pool and *pgx.Conn satisfy
// it.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
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

// WithTxSettings returns ctx carrying settings for the transactions InTx
// runs under it.
func WithTxSettings(ctx context.Context, settings TxSettings) context.Context {
	return context.WithValue(ctx, txSettingsKey{}, settings)
}

// setLocalSQL sets statement_timeout and lock_timeout (milliseconds) for
// the rest of the current transaction only (set_config's is_local): the one
// way to give statements those timeouts through PgBouncer's transaction
// pooling, which refuses them as startup parameters and would hand a
// session SET to whichever client gets the server connection next. It is
// the transport's own statement, like the BEGIN and COMMIT pgx sends.
const setLocalSQL = `SELECT set_config('statement_timeout', $1::text, true),
       set_config('lock_timeout', $2::text, true)`

// setLocal applies the settings ctx carries, if any, to tx.
func setLocal(ctx context.Context, tx pgx.Tx) error {
	settings, ok := ctx.Value(txSettingsKey{}).(TxSettings)
	if !ok {
		return nil
	}
	_, err := tx.Exec(ctx, setLocalSQL,
		strconv.FormatInt(settings.StatementTimeout.Milliseconds(), 10),
		strconv.FormatInt(settings.LockTimeout.Milliseconds(), 10))
	return err
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
	if err := setLocal(ctx, tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("error setting transaction timeouts: %w", err)
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
// to fail inside the server: a fenced statement raises (NotOwnedCode)
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
