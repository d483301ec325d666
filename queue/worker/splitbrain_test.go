package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgfence"
	"github.com/buildrisk/radar/sql/pgtest"
)

// serverPort returns the port of the server a statement on pool runs on.
func serverPort(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var port int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT inet_server_port()`).Scan(&port))
	return port
}

// A partition: the standby is promoted while the primary, cut off from it
// but alive, still serves the process's connections; both answer
// read-write. The watch's next check probes every host of the URL: it
// logs the split brain once, sets buildrisk_database_split_brain, and the
// process's pool moves to the promoted primary (the higher timeline) at
// its next statement, without a connection error. When the old primary
// goes, the gauge is 0 again.
func TestDatabaseWatch_SplitBrainMovesToTheHigherTimeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := pgtest.StartReplicated(t, nil)
	url := pair.URL("postgres")
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pgfence.Process().Install(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Migrate(ctx, pool, nil))

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	var logs bytes.Buffer
	watch := worker.NewDatabaseWatch(instruments, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, watch.Check(ctx, pool))
	require.Equal(t, pair.Primary.Port(), serverPort(t, pool))

	require.NoError(t, pair.CutReplication(ctx))
	require.NoError(t, pgtest.Promote(ctx, pair.Standby)) // the primary lives on
	require.Equal(t, pair.Primary.Port(), serverPort(t, pool), "the pool still writes to the old primary")

	require.NoError(t, watch.Check(ctx, pool))
	require.NoError(t, watch.Check(ctx, pool))
	split, err := observabilitytest.MetricValue(providers, observability.MetricDatabaseSplitBrain, nil)
	require.NoError(t, err)
	require.Equal(t, float64(1), split)
	require.Equal(t, 1, strings.Count(logs.String(), "database split brain"), "logged once: %s", logs.String())
	require.Contains(t, logs.String(), net.JoinHostPort("127.0.0.1", strconv.Itoa(pair.Standby.Port())))
	for range 8 { // every connection the pool hands out
		require.Equal(t, pair.Standby.Port(), serverPort(t, pool), "a statement after the check runs on the promoted primary")
	}

	pair.Primary.Kill()
	require.NoError(t, watch.Check(ctx, pool))
	split, err = observabilitytest.MetricValue(providers, observability.MetricDatabaseSplitBrain, nil)
	require.NoError(t, err)
	require.Zero(t, split)
}
