package batch_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/sql/pgtest"
)

// A job's database handle reads, and refuses every write: Exec and COPY
// without sending anything, and a write sent as a query (an INSERT ...
// RETURNING, as sqlc's :one upserts are) in the server, since each of its
// statements runs in a read-only transaction. Its connections go back to
// the pool once the rows are read.
func TestReader_ReadsAndRefusesWrites(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	db := batch.NewReader(pool)

	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT 41 + $1::int", 1).Scan(&n))
	require.Equal(t, 42, n)
	require.ErrorIs(t, db.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&n), pgx.ErrNoRows)
	ids, err := queries.New().JobExecutionIDsByInstance(ctx, db, 1)
	require.NoError(t, err)
	require.Empty(t, ids)

	_, err = db.Exec(ctx, "DELETE FROM credit_eval_plan")
	require.ErrorIs(t, err, batch.ErrReadOnly)
	_, err = db.CopyFrom(ctx, pgx.Identifier{"credit_eval_plan"}, []string{"execution_id"}, pgx.CopyFromRows(nil))
	require.ErrorIs(t, err, batch.ErrReadOnly)
	err = queries.New().CreditEvalPlanClear(ctx, db, 1)
	require.ErrorIs(t, err, batch.ErrReadOnly)

	var chunk string
	err = db.QueryRow(ctx, "INSERT INTO credit_eval_plan (execution_id, chunk, corp_codes) VALUES (1, 'a-b', '{a,b}') RETURNING chunk").Scan(&chunk)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code, "read_only_sql_transaction")
	rows, err := db.Query(ctx, "DELETE FROM credit_eval_plan RETURNING chunk")
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
	}
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
	var plans int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM credit_eval_plan").Scan(&plans))
	require.Zero(t, plans)

	require.Zero(t, pool.Stat().AcquiredConns(), "a read left its connection acquired")
}
