package request_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
)

// A completion whose next job already has an active request chains
// nothing and is not refused for it: Finish ends the request and counts a
// duplicate of source chain, and the completing transaction's own writes
// still commit (the refused insert ran under a savepoint). Once the next
// job is free, the next completion chains its request in the transaction
// that ends it.
func TestFinish_ActiveNextIsADuplicateNotAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	enqueuer, err := request.NewOwner(pool, riverClient, request.Config{
		Catalog: catalog.NewCatalog(
			&catalog.Spec[noParams]{JobName: "metrics", Desc: "test job", NextJob: "rules"},
			&catalog.Spec[noParams]{JobName: "rules", Desc: "test job"},
		),
		Instruments: instruments,
	})
	require.NoError(t, err)

	active, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "rules", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	// complete enqueues a metrics request and ends it COMPLETED, as the
	// runner's recording does, with a write of its own in the same
	// transaction; it returns the completed request's id.
	complete := func() int64 {
		t.Helper()
		completing, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "metrics", Params: []byte("{}"), Source: radartype.SourceAPI})
		require.NoError(t, err)
		require.NoError(t, pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS completion_write (id bigint)`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO completion_write VALUES ($1)`, completing.Request.ID); err != nil {
				return err
			}
			ended, err := enqueuer.Finish(ctx, tx, &request.End{Request: completing.Request, ExecutionID: 1, Status: radartype.ExecutionCompleted, Message: "completed"})
			require.True(t, ended)
			return err
		}))
		return completing.Request.ID
	}
	chained := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_request WHERE source = 'chain'`).Scan(&n))
		return n
	}

	first := complete()
	var status, message string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, message FROM job_request WHERE id = $1`, first).Scan(&status, &message))
	require.Equal(t, []string{"DONE", "completed"}, []string{status, message}, "the completion commits without its chained request")
	var written int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM completion_write WHERE id = $1`, first).Scan(&written))
	require.Equal(t, 1, written, "the completing transaction's own write commits")
	requireMetric(t, providers, 1, observability.MetricRequests, map[string]string{"job": "rules", "source": "chain", "result": "duplicate"})
	require.Zero(t, chained())

	_, err = pool.Exec(ctx, `UPDATE job_request SET status = 'DONE', finished_at = now() WHERE id = $1`, active.Request.ID)
	require.NoError(t, err)
	complete()
	require.Equal(t, 1, chained(), "rules is free: the completion chains its request")
	requireMetric(t, providers, 1, observability.MetricRequests, map[string]string{"job": "rules", "source": "chain", "result": "accepted"})
}
