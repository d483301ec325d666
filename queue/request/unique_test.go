package request_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
)

// One active request per job rests on the database beyond the job's
// advisory lock: the partial unique index on active requests refuses a
// second QUEUED or RUNNING row of the job even from a writer that takes no
// lock, and lets one in once the first has ended. River holds no share of
// the rule: the request's River job has a single attempt (a failed run is
// resumed by a new request, never retried by River) and no unique key,
// since River's unique jobs are not used.
func TestEnqueue_DatabaseKeepsOneActiveRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, enqueuer := newStockPriceEnqueuer(t)
	res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI})
	require.NoError(t, err)
	require.NotNil(t, res.Request.RiverJobID)

	var maxAttempts int
	var uniqueKey []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT max_attempts, unique_key FROM river_job WHERE id = $1`,
		*res.Request.RiverJobID).Scan(&maxAttempts, &uniqueKey))
	require.Equal(t, 1, maxAttempts, "a failed run is resumed by a new request, never retried by River")
	require.Nil(t, uniqueKey, "River's unique jobs are not used")

	insertActive := func(status string) error {
		_, err := pool.Exec(ctx, `INSERT INTO job_request (job, source, status) VALUES ('stockPrice', 'api', $1)`, status)
		return err
	}
	for _, status := range []string{"QUEUED", "RUNNING"} {
		var pgErr *pgconn.PgError
		err := insertActive(status)
		require.True(t, errors.As(err, &pgErr), "a second %s request of the job: %v", status, err)
		require.Equal(t, "23505", pgErr.Code)
		require.Equal(t, "job_request_active_job_idx", pgErr.ConstraintName)
	}
	require.NoError(t, insertActive("DONE"), "ended requests are not counted")

	_, err = pool.Exec(ctx, `UPDATE job_request SET status = 'DONE', finished_at = now() WHERE id = $1`, res.Request.ID)
	require.NoError(t, err)
	require.NoError(t, insertActive("QUEUED"), "once the active request ended, the job takes a new one")
}
