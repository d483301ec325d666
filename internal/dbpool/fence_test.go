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

// countOn counts the rows of client on the cluster at url alone.
func countOn(t *testing.T, url, client string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM job_request WHERE requested_by = $1`, client).Scan(&n))
	return n
}

// After a failover the old primary is started again as a standalone
// primary (an operator restarting the host, or a partition that heals):
// both answer read-write, and the URL names the old one first. A pool that
// saw the promoted primary's timeline writes nothing on the old one, also
// after every connection dropped once (pgx then tries the hosts in order);
// a new pool of the same process, or of a process that starts now and
// probes every host first, neither.
func TestTimelineFence_NoWriteOnDemotedPrimary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFence(t)
	insertRequests(t, b.pool, "before", 3)

	require.NoError(t, b.pair.Failover(ctx))
	b.pool.Reset()
	insertRequests(t, b.pool, "promoted", 3) // the pool sees the new timeline
	require.NoError(t, b.pair.Primary.Resume(ctx), "the old primary comes back read-write")
	old := b.pair.Primary.URL("postgres")
	require.Equal(t, 0, countOn(t, old, "split"))

	b.pool.Reset() // every connection drops once
	insertRequests(t, b.pool, "split", 20)
	poolB, err := dbpool.Open(ctx, b.url, 4, 0, false, config.SessionLimits{AppName: "client-b"})
	require.NoError(t, err)
	defer poolB.Close()
	insertRequests(t, poolB, "split", 20)

	onOld, onNew := countOn(t, old, "split"), countOn(t, b.pair.Standby.URL("postgres"), "split")
	t.Logf("rows written while both answer read-write: %d on the old primary, %d on the promoted one", onOld, onNew)
	require.Zero(t, onOld, "rows written on the demoted primary")
	require.Equal(t, 40, onNew)
}

// A pool connected to the standby before it is promoted (a single-host URL
// naming it, no target_session_attrs) draws no id on the new timeline
// before the id fence: its connections made in recovery are replaced at
// their next use once the server has left recovery, and the replacement
// runs the fence.
func TestTimelineFence_ConnectionMadeInRecoveryIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFence(t)
	require.NoError(t, b.pair.CatchUp(ctx))
	standby, err := dbpool.Open(ctx, b.pair.Standby.URL("postgres"), 2, 0, false, config.SessionLimits{AppName: "on-the-standby"})
	require.NoError(t, err)
	defer standby.Close()
	var inRecovery bool
	require.NoError(t, standby.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
	require.True(t, inRecovery, "the pool holds a connection made in recovery")

	require.NoError(t, b.pair.CutReplication(ctx))
	a := insertRequests(t, b.pool, "A", 100)
	require.NoError(t, b.pair.Failover(ctx))
	bIDs := insertRequests(t, standby, "B", 100)

	other, lost := reissued(t, standby, "A", a)
	t.Logf("A drew %d..%d before the failover, B %d..%d on connections of a pool made in recovery: %d of A's ids name another request, %d lost",
		a[0], a[len(a)-1], bIDs[0], bIDs[len(bIDs)-1], other, lost)
	require.Zero(t, other)
}
