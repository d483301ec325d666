package dbpool_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgtest"
)

// fenceBundle is a migrated asynchronous primary/standby pair and the
// service's pool on its multi-host URL.
type fenceBundle struct {
	pair *pgtest.Replicated
	url  string
	pool *pgxpool.Pool
}

func setupFence(t *testing.T) *fenceBundle {
	t.Helper()
	ctx := context.Background()
	pair := pgtest.StartReplicated(t, nil)
	url := pair.URL("postgres")
	migrator, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, migrator, nil))
	migrator.Close()
	pool, err := dbpool.Open(ctx, url, 4, 0, false, config.SessionLimits{AppName: "fence-test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &fenceBundle{pair: pair, url: url, pool: pool}
}

// insertRequests inserts n requests on behalf of client through db, as the
// enqueue draws their ids (the column's sequence), and returns the ids.
func insertRequests(t *testing.T, db *pgxpool.Pool, client string, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		var id int64
		require.NoError(t, db.QueryRow(context.Background(),
			`INSERT INTO job_request (job, source, requested_by, status) VALUES ($1, 'api', $2, 'DONE') RETURNING id`,
			fmt.Sprintf("job-%s-%d", client, i), client).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

// reissued counts the ids of client that now name another client's
// request, and those that name nothing (lost: asynchronous replication
// allows it).
func reissued(t *testing.T, db *pgxpool.Pool, client string, ids []int64) (other, lost int) {
	t.Helper()
	for _, id := range ids {
		var by string
		err := db.QueryRow(context.Background(), `SELECT requested_by FROM job_request WHERE id = $1`, id).Scan(&by)
		switch {
		case err == pgx.ErrNoRows:
			lost++
		case err != nil:
			require.NoError(t, err)
		case by != client:
			other++
		}
	}
	return other, lost
}

// Client A draws request ids while the replication link is cut (the
// standby lags), the primary dies and the standby is promoted; client B
// then draws ids on the new timeline. None of A's ids names B's request:
// the first connection to the new timeline moved the sequences past
// anything the lost window could have issued. A's ids drawn after the cut
// are lost (404), as asynchronous replication allows.
func TestTimelineFence_IDsNeverReissued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFence(t)

	a := insertRequests(t, b.pool, "A", 5)
	require.NoError(t, b.pair.CatchUp(ctx))
	require.NoError(t, b.pair.CutReplication(ctx))
	a = append(a, insertRequests(t, b.pool, "A", 200)...)

	require.NoError(t, b.pair.Failover(ctx))
	poolB, err := dbpool.Open(ctx, b.url, 4, 0, false, config.SessionLimits{AppName: "client-b"})
	require.NoError(t, err)
	defer poolB.Close()
	bIDs := insertRequests(t, poolB, "B", 200)
	b.pool.Reset() // A's pool drops the connections the crash broke
	bIDs = append(bIDs, insertRequests(t, b.pool, "B", 50)...)

	other, lost := reissued(t, poolB, "A", a)
	t.Logf("A drew %d ids (%d..%d), B %d (%d..%d): %d of A's ids name another request, %d lost",
		len(a), a[0], a[len(a)-1], len(bIDs), bIDs[0], bIDs[len(bIDs)-1], other, lost)
	require.Zero(t, other, "an id answered to A names B's request")
	require.Equal(t, 200, lost, "the ids drawn after the cut are lost with the primary")
	require.Greater(t, bIDs[0], a[len(a)-1], "ids keep increasing across the failover")
}
