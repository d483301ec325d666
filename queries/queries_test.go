package queries_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startTwoJobs runs, for two different jobs at once, what creating an
// execution does: read the job's executions, then insert one. A barrier
// makes both transactions read before either writes, the interleaving
// that makes SERIALIZABLE fail one of the two starts.
func startTwoJobs(t *testing.T, pool *pgxpool.Pool, opts pgx.TxOptions, retries int) []error {
	t.Helper()
	ctx := context.Background()
	q := queries.New()
	var barrier sync.WaitGroup
	barrier.Add(2)
	var once [2]sync.Once
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, job := range []string{"filingParse", "stockPrice"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = queries.InTxOpts(ctx, pool, opts, retries, func(tx pgx.Tx) error {
				var id int64
				if err := tx.QueryRow(ctx, "SELECT nextval(pg_get_serial_sequence('job_request', 'id'))").Scan(&id); err != nil {
					return err
				}
				req, err := q.JobRequestInsert(ctx, tx, &queries.JobRequestInsertParams{ID: id, Job: job, Params: []byte("{}"), Source: "api"})
				if err != nil {
					return err
				}
				if _, err := q.JobExecutionRunningByJob(ctx, tx, job); err != nil && !errors.Is(queries.Interpret(err), queries.ErrNotFound) {
					return err
				}
				once[i].Do(func() { barrier.Done(); barrier.Wait() }) // first attempt only
				inst, err := q.JobInstanceInsert(ctx, tx, &queries.JobInstanceInsertParams{Job: job, Params: []byte("{}"), ParamsHash: "h"})
				if err != nil {
					return err
				}
				_, err = q.JobExecutionInsert(ctx, tx, &queries.JobExecutionInsertParams{InstanceID: inst.ID, Job: job, RequestID: req.ID, WorkerID: "w"})
				return err
			})
		}()
	}
	wg.Wait()
	return errs
}

func TestInTx_DifferentJobsStartTogether(t *testing.T) {
	t.Parallel()

	t.Run("SerializableWithoutRetry_Fails", func(t *testing.T) {
		// The negative control: SERIALIZABLE without a retry loses one start.
		t.Parallel()
		errs := startTwoJobs(t, pgtest.NewPool(t), pgx.TxOptions{IsoLevel: pgx.Serializable}, 0)
		failed := 0
		for _, err := range errs {
			if err != nil {
				require.True(t, queries.IsRetryable(err), "%v", err)
				failed++
			}
		}
		require.Equal(t, 1, failed, "one of two different jobs fails to start: %v", errs)
	})
	t.Run("SerializableWithRetry_BothStart", func(t *testing.T) {
		t.Parallel()
		errs := startTwoJobs(t, pgtest.NewPool(t), pgx.TxOptions{IsoLevel: pgx.Serializable}, queries.TxRetryAttempts)
		require.Equal(t, []error{nil, nil}, errs)
	})
	t.Run("ReadCommitted_BothStart", func(t *testing.T) {
		t.Parallel()
		for rep := range 5 {
			pool := pgtest.NewPool(t)
			errs := startTwoJobs(t, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, 0)
			require.Equal(t, []error{nil, nil}, errs, "rep %d", rep)
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM job_execution").Scan(&n))
			require.Equal(t, 2, n, fmt.Sprint("rep ", rep))
		}
	})
}

func TestInTx_RetriesOnlyConflicts(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()

	attempts := 0
	err := queries.InTx(ctx, pool, func(tx pgx.Tx) error {
		attempts++
		if attempts < 3 {
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40P01'; END $$`)
			return err
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, attempts, "two deadlocks absorbed")

	attempts = 0
	err = queries.InTx(ctx, pool, func(tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		return err
	})
	require.Error(t, err)
	require.Equal(t, 1+queries.TxRetryAttempts, attempts, "bounded: 3 retries")

	attempts = 0
	err = queries.InTx(ctx, pool, func(tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return err
	})
	require.Error(t, err)
	require.Equal(t, 1, attempts, "other errors are not retried")
}

// InTxPipelined sends the BEGIN and the statements queued ahead with the
// first statement fn runs, and ends the transaction with the deferred Execs,
// the statements queued on Last and the COMMIT in one round trip; a server
// error of one of them skips the COMMIT, so nothing of the transaction
// stays, and the connection goes back to the pool outside any transaction.
// A conflict runs the transaction again, as InTx does.
func TestInTxPipelined_CommitsWithTheLastStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	pool := pgtest.NewTracedPool(t, pgtest.NewPool(t), tracer)
	_, err := pool.Exec(ctx, `CREATE TABLE pipelined (id int PRIMARY KEY, note text)`)
	require.NoError(t, err)
	insert := `INSERT INTO pipelined (id, note) VALUES ($1, $2) RETURNING id`
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pipelined`).Scan(&n))
		return n
	}

	t.Run("committed in two round trips", func(t *testing.T) {
		tracer.Reset()
		var read, returned, written int
		err := queries.InTxPipelined(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 41`).QueryRow(func(row pgx.Row) error { return row.Scan(&read) })
		}, func(tx *queries.PipelinedTx) error {
			// A library's statement (a Query, as River's insert is) carries
			// the lead and gets its own rows back.
			rows, err := tx.Query(ctx, `INSERT INTO pipelined (id, note) VALUES (1, 'in fn') RETURNING id`)
			if err != nil {
				return err
			}
			if returned, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int]); err != nil {
				return err
			}
			tx.DeferExecs = true
			if _, err := tx.Exec(ctx, `SELECT pg_notify('pipelined', 'deferred')`); err != nil {
				return err
			}
			tx.Last.Queue(insert, read+1, "last").QueryRow(func(row pgx.Row) error { return row.Scan(&written) })
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{
			"batch: begin isolation level read committed; SELECT 41; INSERT INTO pipelined (id, note) VALUES (1, 'in fn') RETURNING id",
			"batch: SELECT pg_notify('pipelined', 'deferred'); " + insert + "; commit",
		}, tracer.Log())
		require.Equal(t, 1, returned)
		require.Equal(t, 42, written)
		require.Equal(t, 2, count())
	})

	t.Run("a failed statement queued ahead fails the one that carried it", func(t *testing.T) {
		err := queries.InTxPipelined(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 1/0`)
		}, func(tx *queries.PipelinedTx) error {
			_, err := tx.Exec(ctx, `INSERT INTO pipelined (id, note) VALUES (3, 'after a failure')`)
			return err
		})
		require.ErrorContains(t, err, "division by zero")
		require.Equal(t, 2, count())
	})

	t.Run("Flush sends what is queued ahead when fn runs nothing on tx", func(t *testing.T) {
		tracer.Reset()
		var read int
		err := queries.InTxPipelined(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 7`).QueryRow(func(row pgx.Row) error { return row.Scan(&read) })
		}, func(tx *queries.PipelinedTx) error {
			if err := tx.Flush(ctx); err != nil {
				return err
			}
			require.Equal(t, 7, read, "read once Flush returns")
			tx.Last.Queue(`SELECT 8`)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{"batch: begin isolation level read committed; SELECT 7", "batch: SELECT 8; commit"}, tracer.Log())
	})

	t.Run("a failed last statement rolls back", func(t *testing.T) {
		connsBefore := pool.Stat().NewConnsCount()
		err := queries.InTxPipelined(ctx, pool, func(*pgx.Batch) {}, func(tx *queries.PipelinedTx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO pipelined (id, note) VALUES (2, 'in fn')`); err != nil {
				return err
			}
			tx.Last.Queue(insert, 42, "duplicate key")
			return nil
		})
		require.ErrorIs(t, queries.Interpret(err), queries.ErrUniqueViolation)
		require.Equal(t, 2, count(), "the statement of fn rolled back with the transaction")
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "the connection is back outside a transaction")
		require.Equal(t, connsBefore, pool.Stat().NewConnsCount(), "the connection was rolled back and reused, not destroyed")
	})

	t.Run("an aborted transaction reports its rollback", func(t *testing.T) {
		err := queries.InTxPipelined(ctx, pool, func(*pgx.Batch) {}, func(tx *queries.PipelinedTx) error {
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // swallowed: the transaction is aborted
			return nil
		})
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
	})

	t.Run("conflicts are retried", func(t *testing.T) {
		attempts := 0
		err := queries.InTxPipelined(ctx, pool, func(*pgx.Batch) {}, func(tx *queries.PipelinedTx) error {
			attempts++
			if attempts < 3 {
				tx.Last.Queue(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40P01'; END $$`)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, attempts, "two deadlocks absorbed")
	})

	t.Run("the transaction's settings travel with its BEGIN", func(t *testing.T) {
		settingsCtx := queries.WithTxSettings(ctx, queries.TxSettings{StatementTimeout: 4 * time.Second, LockTimeout: 3 * time.Second})
		var lockTimeout string
		err := queries.InTxPipelined(settingsCtx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT current_setting('lock_timeout')`).QueryRow(func(row pgx.Row) error { return row.Scan(&lockTimeout) })
		}, func(*queries.PipelinedTx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, "3s", lockTimeout)
	})
}

// InOneTrip sends BEGIN, the statements queued ahead, the first statement
// fn runs, the trail and COMMIT as one batch; a statement of fn after the
// first runs after the COMMIT, outside the transaction. A server error in
// the trail rolls everything back and is returned even when fn saw its own
// statement succeed, and the connection goes back to the pool clean.
func TestInOneTrip_CommitsWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &pgtest.RoundTripTracer{}
	pool := pgtest.NewTracedPool(t, pgtest.NewPool(t), tracer)
	_, err := pool.Exec(ctx, `CREATE TABLE one_trip (id int PRIMARY KEY, note text)`)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM one_trip`).Scan(&n))
		return n
	}

	t.Run("one round trip, then the statements after it on their own", func(t *testing.T) {
		tracer.Reset()
		var read, returned, trailed int
		var afterTx byte
		err := queries.InOneTrip(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 41`).QueryRow(func(row pgx.Row) error { return row.Scan(&read) })
		}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO one_trip (id, note) VALUES (2, 'trail') RETURNING id`).QueryRow(func(row pgx.Row) error { return row.Scan(&trailed) })
		}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO one_trip (id, note) VALUES (1, 'first') RETURNING id`)
			if err != nil {
				return err
			}
			if returned, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int]); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_notify('one_trip', 'after')`); err != nil {
				return err
			}
			afterTx = tx.Conn().PgConn().TxStatus()
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{
			"batch: begin isolation level read committed; SELECT 41; INSERT INTO one_trip (id, note) VALUES (1, 'first') RETURNING id; " +
				"INSERT INTO one_trip (id, note) VALUES (2, 'trail') RETURNING id; commit",
			"SELECT pg_notify('one_trip', 'after')",
		}, tracer.Log())
		require.Equal(t, 41, read)
		require.Equal(t, 1, returned)
		require.Equal(t, 2, trailed)
		require.Equal(t, byte('I'), afterTx, "the statement after the first ran outside the transaction")
		require.Equal(t, 2, count())
	})

	t.Run("a failed trail rolls back what fn saw succeed", func(t *testing.T) {
		connsBefore := pool.Stat().NewConnsCount()
		var firstErr error
		err := queries.InOneTrip(ctx, pool, func(*pgx.Batch) {}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO one_trip (id, note) VALUES (2, 'duplicate key')`)
		}, func(tx pgx.Tx) error {
			_, firstErr = tx.Exec(ctx, `INSERT INTO one_trip (id, note) VALUES (3, 'first')`)
			return nil
		})
		require.ErrorIs(t, queries.Interpret(err), queries.ErrUniqueViolation)
		require.True(t, queries.IsUndecided(err), "the server refused: the caller decides again")
		require.ErrorIs(t, queries.Interpret(firstErr), queries.ErrUniqueViolation, "the Exec that carried the batch reads the whole batch")
		require.Equal(t, 2, count(), "the first statement rolled back with the transaction")
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "the connection is back outside a transaction")
		require.Equal(t, connsBefore, pool.Stat().NewConnsCount(), "the connection was rolled back and reused, not destroyed")
	})

	t.Run("after a rollback a Query of fn is refused and an Exec not sent", func(t *testing.T) {
		var afterErr, execErr error
		err := queries.InOneTrip(ctx, pool, func(*pgx.Batch) {}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO one_trip (id, note) VALUES (2, 'duplicate key')`)
		}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT 1`)
			if err != nil {
				return err
			}
			rows.Close() // the trail's failure is read here
			rows, afterErr = tx.Query(ctx, `INSERT INTO one_trip (id, note) VALUES (6, 'after the rollback') RETURNING id`)
			if afterErr == nil {
				rows.Close()
			}
			_, execErr = tx.Exec(ctx, `INSERT INTO one_trip (id, note) VALUES (7, 'an Exec after the rollback')`)
			return nil
		})
		require.ErrorIs(t, queries.Interpret(err), queries.ErrUniqueViolation)
		require.ErrorIs(t, queries.Interpret(afterErr), queries.ErrUniqueViolation, "the Query answers with the transaction's error")
		require.NoError(t, execErr, "an Exec is not sent: nothing to announce, the failure is InOneTrip's to report")
		require.Equal(t, 2, count(), "nothing ran after the rollback")
	})

	t.Run("an error of fn before its first statement sends nothing", func(t *testing.T) {
		tracer.Reset()
		failed := errors.New("refused before the insert")
		err := queries.InOneTrip(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 7`)
		}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO one_trip (id, note) VALUES (5, 'trail of a failed fn')`)
		}, func(pgx.Tx) error { return failed })
		require.ErrorIs(t, err, failed)
		require.Empty(t, tracer.Log(), "no round trip")
		require.Equal(t, 2, count(), "the trail did not run")
	})

	t.Run("without a statement of fn the batch goes when fn returns", func(t *testing.T) {
		tracer.Reset()
		err := queries.InOneTrip(ctx, pool, func(b *pgx.Batch) {
			b.Queue(`SELECT 7`)
		}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO one_trip (id, note) VALUES (4, 'trail only')`)
		}, func(pgx.Tx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, []string{"batch: begin isolation level read committed; SELECT 7; INSERT INTO one_trip (id, note) VALUES (4, 'trail only'); commit"}, tracer.Log())
		require.Equal(t, 3, count())
	})
}

// PlanEachCall sends its statements unnamed, planned at each call, on a
// connection whose default caches them as prepared statements (whose plans
// would outlive the data they were chosen for).
func TestPlanEachCall_LeavesNoPreparedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	require.Equal(t, pgx.QueryExecModeCacheStatement, pool.Config().ConnConfig.DefaultQueryExecMode)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	prepared := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%radar_marker%'`, pgx.QueryExecModeSimpleProtocol).Scan(&n))
		return n
	}

	var one int
	require.NoError(t, queries.PlanEachCall(conn).QueryRow(ctx, `SELECT $1::int /* radar_marker */`, 1).Scan(&one))
	_, err = queries.PlanEachCall(conn).Exec(ctx, `SELECT $1::int /* radar_marker exec */`, 1)
	require.NoError(t, err)
	require.Zero(t, prepared(), "planned at each call: nothing kept on the connection")

	require.NoError(t, conn.QueryRow(ctx, `SELECT $1::int /* radar_marker */`, 1).Scan(&one))
	require.Equal(t, 1, prepared(), "the connection's default keeps the statement prepared")
}
