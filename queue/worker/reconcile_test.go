package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
)

// A RUNNING request whose execution the database no longer holds (lost in
// a failover to an asynchronous replica after it was acknowledged) is
// failed by the reconcile loop, saying so, instead of staying RUNNING for
// ever: no execution will ever record its end.
func TestReconcile_RequestWhoseExecutionVanished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `
INSERT INTO job_request (job, params, source, status, worker_id, execution_id, claimed_at)
VALUES ('aptTrade', '{}', 'api', 'RUNNING', 'w1', 424242, now()) RETURNING id`).Scan(&id))

	n, err := worker.Reconcile(ctx, pool, nil, "w1", batch.NewHeldSet(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var status, message string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, message FROM job_request WHERE id = $1`, id).Scan(&status, &message))
	require.Equal(t, "FAILED", status)
	require.Contains(t, message, "the database lost execution 424242")
}
