package queries_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
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
			errs[i] = pgtx.InTxOpts(ctx, pool, opts, retries, func(tx pgx.Tx) error {
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
				require.True(t, pgtx.IsRetryable(err), "%v", err)
				failed++
			}
		}
		require.Equal(t, 1, failed, "one of two different jobs fails to start: %v", errs)
	})
	t.Run("SerializableWithRetry_BothStart", func(t *testing.T) {
		t.Parallel()
		errs := startTwoJobs(t, pgtest.NewPool(t), pgx.TxOptions{IsoLevel: pgx.Serializable}, pgtx.TxRetryAttempts)
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
	err := pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
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
	err = pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		return err
	})
	require.Error(t, err)
	require.Equal(t, 1+pgtx.TxRetryAttempts, attempts, "bounded: 3 retries")

	attempts = 0
	err = pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return err
	})
	require.Error(t, err)
	require.Equal(t, 1, attempts, "other errors are not retried")
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
