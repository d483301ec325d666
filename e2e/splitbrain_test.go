package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/sql/pglocal"
)

// startFencedSystem is the whole service on an asynchronous pair through
// the multi-host URL, with one worker whose pool is built as `radar worker`
// builds it (dbpool: fenced), not the harness's plain pool.
func startFencedSystem(t *testing.T, env map[string]string) *failoverSystem {
	t.Helper()
	pair, url := apptest.ReplicatedCluster(t, false)
	vars := map[string]string{}
	for k, v := range failoverEnv {
		vars[k] = v
	}
	for k, v := range env {
		vars[k] = v
	}
	s := apptest.New(t, &apptest.Opts{DBURL: url, Env: vars})
	pool, err := dbpool.Open(context.Background(), s.DBURL, 8, s.Env.DBTimeout, false, s.Env.SessionLimits("split-brain-worker"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.StartWorkerWith(pool, nil)
	return &failoverSystem{System: s, pair: pair}
}

// nextXID returns the transaction id the cluster c will assign next: every
// row written from then on carries an xmin at or above it.
func nextXID(t *testing.T, c *pglocal.Cluster) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var xid int64
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xid))
	return xid
}

// rowsWrittenSince counts the rows of every table of the public schema
// (the service's and River's) on c inserted or updated by a transaction
// at or after xid.
func rowsWrittenSince(t *testing.T, c *pglocal.Cluster, xid int64) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	total := 0
	for _, table := range tables {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE xmin::text::bigint >= $1`, xid).Scan(&n))
		if n > 0 {
			t.Logf("%s: %d rows written", table, n)
		}
		total += n
	}
	return total
}

// dropConnections ends every client connection to c but its own, as a
// network flap does, and returns how many it ended.
func dropConnections(t *testing.T, c *pglocal.Cluster) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n))
	return n
}

// requestRules posts body as a rules request with token until n were
// answered 202 (a 409 while the previous one runs, a 503 while
// connections move, are asked again), within a minute, and returns their
// ids.
func requestRules(t *testing.T, s *apptest.System, token, body string, n int) []string {
	t.Helper()
	var ids []string
	apptest.WaitUntil(t, time.Minute, fmt.Sprintf("%d rules requests accepted", n), func() bool {
		if status, out := s.Do(http.MethodPost, "/v1/jobs/rules/requests", token, body); status == http.StatusAccepted {
			ids = append(ids, out["requestId"].(string))
		}
		return len(ids) >= n
	})
	return ids
}

// The old primary of an asynchronous pair is started again, read-write,
// after the standby was promoted (an operator restarting the host, a
// partition that heals): two hosts of one system answer read-write, and
// DATABASE_URL names the old one first. While a client keeps requesting,
// and after every connection of every process dropped once (pgx then
// tries the old host first), no process writes a row there: each refuses
// a host on a timeline below one it has seen. Every process sets
// buildrisk_database_split_brain to 1 while both answer, and back to 0
// once the old one is gone.
func TestSplitBrain_NothingWrittenOnDemotedPrimary(t *testing.T) {
	t.Parallel()
	f := startFencedSystem(t, nil)
	ctx := context.Background()
	requestRules(t, f.System, apptest.OperatorToken, `{}`, 2)

	require.NoError(t, f.pair.Failover(ctx))
	apptest.WaitUntil(t, time.Minute, "the system to see the failover", func() bool {
		return f.Metric(observability.MetricDatabaseFailovers, nil) == 1
	})
	require.NoError(t, f.pair.Primary.Resume(ctx), "the old primary comes back as a primary")
	mark := nextXID(t, f.pair.Primary)
	apptest.WaitUntil(t, time.Minute, "buildrisk_database_split_brain 1", func() bool {
		return f.Metric(observability.MetricDatabaseSplitBrain, nil) == 1
	})

	ids := requestRules(t, f.System, apptest.OperatorToken, `{}`, 5)
	// Every connection of every process drops once.
	terminated := dropConnections(t, f.pair.Standby)
	t.Logf("%d connections dropped on the promoted primary", terminated)
	ids = append(ids, requestRules(t, f.System, apptest.OperatorToken, `{}`, 5)...)
	for _, id := range ids {
		f.WaitRequestAfterOutage(id, "DONE", "FAILED") // rules fails without metrics: it ended
	}
	require.Equal(t, float64(1), f.Metric(observability.MetricDatabaseSplitBrain, nil), "split brain while both answer")

	written := rowsWrittenSince(t, f.pair.Primary, mark)
	t.Logf("%d requests answered and done while both answered read-write; %d rows written on the old primary", len(ids), written)
	require.Zero(t, written, "rows written on the demoted primary")

	f.pair.Primary.Kill()
	apptest.WaitUntil(t, time.Minute, "buildrisk_database_split_brain 0", func() bool {
		return f.Metric(observability.MetricDatabaseSplitBrain, nil) == 0
	})
	requireAllEndedAgreeing(t, f.System)
}

// A run of 12 MOLIT calls goes on across an asynchronous failover: the
// replication link is cut after its third chunk, four more chunks (and the
// leases their calls came from) commit on the
// primary alone (a cap of 20 keeps leases at two calls), which dies; the standby is promoted without them. The
// worker re-asserts its call ledger after the failover: on the new
// primary, provider_call_budget counts at least every call the fake
// upstream answered (the lost chunks' calls made again included), and
// buildrisk_ledger_reasserted_calls_total says how many it charged again.
func TestLedger_AsyncFailoverChargesEveryCall(t *testing.T) {
	t.Parallel()
	f := startFencedSystem(t, map[string]string{"BUILDRISK_FANOUT": "1", "BUILDRISK_DAILY_CAP_MOLIT": "20"})
	ctx := context.Background()

	f.Gate.Arm(3)
	id := f.RequestAptTrade(apptest.AptTradeBody([]string{failoverRegion}, failoverFrom, failoverTo))
	apptest.Within(t, time.Minute, f.Gate.Blocked, "the fourth provider call")
	f.WaitChunksDone(id, 3)
	require.NoError(t, f.pair.CatchUp(ctx))
	require.NoError(t, f.pair.CutReplication(ctx))
	f.Gate.Rearm(3)
	apptest.Within(t, time.Minute, f.Gate.Blocked, "the eighth provider call")
	f.WaitChunksDone(id, 7)

	require.NoError(t, f.pair.Failover(ctx))
	apptest.WaitUntil(t, time.Minute, "the system to see the failover", func() bool {
		return f.Metric(observability.MetricDatabaseFailovers, nil) == 1
	})
	f.Gate.Open()
	done := f.WaitRequestAfterOutage(id, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)

	answered := int(f.Fake.Stats().Total)
	used := func() int {
		return f.Count(`SELECT coalesce(sum(calls_used), 0)::int FROM provider_call_budget WHERE provider = 'MOLIT'`)
	}
	t.Logf("MOLIT at the run's end: %d calls answered, provider_call_budget %d", answered, used())
	apptest.WaitUntil(t, 30*time.Second, "provider_call_budget to count every MOLIT call answered", func() bool {
		return used() >= answered
	})
	reasserted := f.Metric(observability.MetricLedgerReasserted, map[string]string{"provider": "MOLIT"})
	t.Logf("MOLIT: %d calls answered, provider_call_budget %d, %v calls charged again after the failover", answered, used(), reasserted)
	require.Positive(t, reasserted)
	// After the load every request has ended, none over a live River job.
	requireAllEndedAgreeing(t, f.System)
}

// requireAllEndedAgreeing waits (a minute at most) for every request to
// end, then checks that none ended over a live River job and that no
// QUEUED request's River job is gone (requesttest).
func requireAllEndedAgreeing(t *testing.T, s *apptest.System) {
	t.Helper()
	apptest.WaitUntil(t, time.Minute, "every request to end", func() bool {
		return s.Count(`SELECT count(*) FROM job_request WHERE status IN ('QUEUED', 'RUNNING')`) == 0
	})
	s.RequireRequestsAgreeWithRiver()
}

// Tokens of the two clients of TestIDs_NeverReissuedAcrossFailover.
const (
	clientAToken = "client-a-token-for-tests-0123456789abcdef"
	clientBToken = "client-b-token-for-tests-0123456789abcdef"
)

// rulesFor is the body of a rules request for date.
func rulesFor(date string) string { return `{"params":{"date":"` + date + `"}}` }

// Client A gets request ids while the replication link is cut (the
// standby lags; more than the 32 values a sequence logs ahead, so that the
// promoted standby's sequence stands below A's last ids), the primary dies and the standby is promoted; client B
// then gets ids from the promoted primary. Each of A's ids, read back,
// names A's own request or nothing (404: lost with the primary, which
// asynchronous replication allows), never one of B's.
func TestIDs_NeverReissuedAcrossFailover(t *testing.T) {
	t.Parallel()
	f := startFencedSystem(t, map[string]string{
		"BUILDRISK_API_TOKENS": "operator:a:" + clientAToken + ",operator:b:" + clientBToken + ",operator:" + apptest.OperatorToken + ",viewer:" + apptest.ViewerToken,
	})
	ctx := context.Background()
	const dateA, dateB = "2025-01-01", "2025-02-02"

	a := requestRules(t, f.System, clientAToken, rulesFor(dateA), 3)
	f.WaitRequestAfterOutage(a[len(a)-1], "DONE", "FAILED") // none active on the standby
	require.NoError(t, f.pair.CatchUp(ctx))
	require.NoError(t, f.pair.CutReplication(ctx))
	a = append(a, requestRules(t, f.System, clientAToken, rulesFor(dateA), 60)...)
	require.NoError(t, f.pair.Failover(ctx))
	b := requestRules(t, f.System, clientBToken, rulesFor(dateB), 60)

	other, lost := 0, 0
	for _, id := range a {
		status, out := f.Get("/v1/requests/" + id)
		switch {
		case status == http.StatusNotFound:
			lost++
		case status != http.StatusOK:
			t.Fatalf("GET /v1/requests/%s: %d %v", id, status, out)
		case out["params"].(map[string]any)["date"] != dateA:
			other++
		}
	}
	t.Logf("A got %d ids (%s..%s), B %d (%s..%s): %d of A's ids name another request, %d are 404",
		len(a), a[0], a[len(a)-1], len(b), b[0], b[len(b)-1], other, lost)
	require.Zero(t, other, "an id answered to A names another request")
	require.Positive(t, lost, "the requests acknowledged after the cut are lost with the primary")
	requireAllEndedAgreeing(t, f.System)
}
