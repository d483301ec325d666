package migrations_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtest"
)

// Migration 00019 gives every execution its chunks_before: an execution
// that resumed an instance before the column existed gets the chunks its
// instance had committed when it started (its chunks_done less its own
// checkpoints), an instance's first execution 0.
func TestMigration00019_ChunksBeforeOfEarlierResumes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("goose"))
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 18)
	require.NoError(t, err)

	// One instance of 5 chunks: the first execution committed 2 and
	// stopped, the second (a resume) the other 3; its chunks_done counts
	// all 5, as runs record it. A resume that never started (chunks_done
	// 0) and a single execution of another instance.
	_, err = pool.Exec(ctx, `
INSERT INTO job_request (id, job, params, params_hash, source, status) VALUES (1, 'aptTrade', '{}', 'h', 'api', 'DONE'), (2, 'aptTrade', '{}', 'h', 'api', 'DONE'),
	(3, 'aptTrade', '{}', 'h', 'api', 'FAILED'), (4, 'rules', '{}', 'r', 'api', 'DONE');
INSERT INTO job_instance (id, job, params, params_hash) VALUES (1, 'aptTrade', '{}', 'h'), (2, 'rules', '{}', 'r');
INSERT INTO job_execution (id, instance_id, job, request_id, status, worker_id, chunks_total, chunks_done) VALUES
	(1, 1, 'aptTrade', 1, 'STOPPED', 'w', 5, 2), (2, 1, 'aptTrade', 2, 'COMPLETED', 'w', 5, 5),
	(3, 1, 'aptTrade', 3, 'ABANDONED', 'w', 0, 0), (4, 2, 'rules', 4, 'COMPLETED', 'w', 3, 3);
INSERT INTO job_checkpoint (instance_id, chunk, execution_id) VALUES
	(1, 'a', 1), (1, 'b', 1), (1, 'c', 2), (1, 'd', 2), (1, 'e', 2), (2, 'x', 4), (2, 'y', 4), (2, 'z', 4);`)
	require.NoError(t, err)

	_, err = provider.UpTo(ctx, 19)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT id, chunks_before FROM job_execution ORDER BY id`)
	require.NoError(t, err)
	got := map[int64]int32{}
	for rows.Next() {
		var id int64
		var before int32
		require.NoError(t, rows.Scan(&id, &before))
		got[id] = before
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]int32{1: 0, 2: 2, 3: 0, 4: 0}, got)
}
