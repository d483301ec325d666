package request_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
)

// A completion whose next job already has an active request chains
// nothing and is not refused for it: EnqueueNext answers no request and no
// error, counts a duplicate of source chain, and the completing
// transaction's own writes still commit (the refused insert ran under a
// savepoint). Once the next job is free, the same call inserts its request.
func TestEnqueueNext_ActiveNextIsADuplicateNotAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	enqueuer, err := request.NewEnqueuer(pool, riverClient, request.Config{
		Catalog: jobs.NewCatalog(
			&jobs.Spec[noParams]{JobName: "metrics", Desc: "test job", NextJob: "rules"},
			&jobs.Spec[noParams]{JobName: "rules", Desc: "test job"},
		),
		Instruments: instruments,
		Cleanup:     func(context.Context, pgx.Tx, string) error { return nil },
	})
	require.NoError(t, err)

	active, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "rules", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	completing, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "metrics", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)

	// complete stands for the runner's completion: a write of its own, then
	// the chained request, in one transaction.
	complete := func() int64 {
		t.Helper()
		var next int64
		require.NoError(t, pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE job_request SET message = 'completed' WHERE id = $1`, completing.Request.ID); err != nil {
				return err
			}
			var err error
			next, err = enqueuer.EnqueueNext(ctx, tx, "metrics", []byte("{}"))
			return err
		}))
		return next
	}

	require.Zero(t, complete(), "rules has an active request: nothing is chained")
	var message string
	require.NoError(t, pool.QueryRow(ctx, `SELECT message FROM job_request WHERE id = $1`, completing.Request.ID).Scan(&message))
	require.Equal(t, "completed", message, "the completion commits without its chained request")
	requireMetric(t, providers, 1, observability.MetricRequests, map[string]string{"job": "rules", "source": "chain", "result": "duplicate"})
	var chained int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_request WHERE source = 'chain'`).Scan(&chained))
	require.Zero(t, chained)

	_, err = pool.Exec(ctx, `UPDATE job_request SET status = 'DONE', finished_at = now() WHERE id = $1`, active.Request.ID)
	require.NoError(t, err)
	next := complete()
	require.NotZero(t, next, "rules is free: the completion chains its request")
	var source string
	require.NoError(t, pool.QueryRow(ctx, `SELECT source FROM job_request WHERE id = $1`, next).Scan(&source))
	require.Equal(t, "chain", source)
	requireMetric(t, providers, 1, observability.MetricRequests, map[string]string{"job": "rules", "source": "chain", "result": "accepted"})
}
