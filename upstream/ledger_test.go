package upstream_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
)

// callsThrough makes n calls through caller, each of which must succeed.
func callsThrough(t *testing.T, caller *upstream.Caller, n int) {
	t.Helper()
	q := upstream.AptTradeQuery("11110", "202501", 1, 10)
	for range n {
		_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, q)
		require.NoError(t, err)
	}
}

// callsUsed reads MOLIT's calls_used of today on the database db reaches.
func callsUsed(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var used int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT coalesce(sum(calls_used), 0)::int FROM provider_call_budget WHERE provider = 'MOLIT'`).Scan(&used))
	return used
}

// A worker's leases across an asynchronous failover: one closed before the
// replication link is cut (the standby has it), leases closed and one
// still held while the link is cut (the standby never hears of them), then
// the primary dies and the standby is promoted. The worker re-asserts its
// ledger: the budget on the new primary counts every call the provider
// answered, and the calls charged again are counted by provider.
func TestReassert_LedgerNeverBelowCallsMade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, served := countingServer(t)
	pair := pgtest.StartReplicated(t, nil)
	url := pair.URL("postgres")
	migrator, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, migrator, nil))
	migrator.Close()
	pool, err := dbpool.Open(ctx, url, 4, 0, false, config.SessionLimits{AppName: "ledger-test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, providers := leaseClient(t, pool, server.URL, 10000, 2, func(c *upstream.ClientConfig) { c.Holder = "worker-a" })

	before := client.NewCaller("aptTrade", 0)
	callsThrough(t, before, 10)
	require.NoError(t, before.Release(ctx))
	require.NoError(t, pair.CatchUp(ctx))
	require.NoError(t, pair.CutReplication(ctx))

	lost := client.NewCaller("aptTrade", 0)
	callsThrough(t, lost, 50)
	require.NoError(t, lost.Release(ctx))
	held := client.NewCaller("aptTrade", 0)
	callsThrough(t, held, 7)

	require.NoError(t, pair.Failover(ctx))
	pool.Reset()
	t.Logf("after the failover: calls_used %d for %d calls answered", callsUsed(t, pool), served.Load())
	charged, err := client.Reassert(ctx)
	require.NoError(t, err)
	again, err := client.Reassert(ctx)
	require.NoError(t, err)
	require.Empty(t, again, "re-asserting twice charges nothing more")

	callsThrough(t, held, 5)
	require.NoError(t, held.Release(ctx))
	used := callsUsed(t, pool)
	t.Logf("re-asserted %v; calls_used %d for %d calls answered", charged, used, served.Load())
	require.GreaterOrEqual(t, used, int(served.Load()), "the ledger is below the calls made")
	require.Equal(t, int(served.Load()), used, "and exact")
	metric, err := observabilitytest.MetricValue(providers, observability.MetricLedgerReasserted, map[string]string{"provider": "MOLIT"})
	require.NoError(t, err)
	require.Equal(t, float64(charged[upstream.ProviderMOLIT]), metric)
	require.Equal(t, float64(50+7), metric, "the calls made through the leases the failover lost")
}
