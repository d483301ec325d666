package main

import (
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// pgbouncerEnv turns on the PgBouncer transaction-pooling mode.
var pgbouncerEnv = map[string]string{"BUILDRISK_DB_PGBOUNCER": "transaction"}

// Through PgBouncer in transaction pooling mode, with the api and two worker
// processes: the README's walk-through, a duplicate burst (one 202, the
// rest 409, one execution) and a stop that a new request resumes to
// COMPLETED without a repeated provider call. Without BUILDRISK_DB_PGBOUNCER
// the same system does not even start (see the commit that added this
// test for what each missing piece breaks).
func TestPgBouncer_TransactionPooling(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{pgbouncer: true, env: pgbouncerEnv})
	for range 2 {
		w := startRadar(t, bin, s.processEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
	}

	// The README's walk-through.
	{
		body := aptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03")
		s.gate.arm(1) // the run holds its second call: the duplicate below meets a running request
		status, out := s.post("/v1/jobs/aptTrade/requests", body)
		require.Equal(t, http.StatusAccepted, status, "%v", out)
		require.Equal(t, float64(6), out["estimatedCalls"])
		require.Equal(t, "QUEUED", out["status"])
		id := out["requestId"].(string)
		within(t, time.Minute, s.gate.blocked, "the run's second provider call")

		status, dup := s.post("/v1/jobs/aptTrade/requests", aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
		require.Equal(t, http.StatusConflict, status, "%v", dup)
		require.Equal(t, id, dup["activeRequestId"])
		s.gate.open()

		done := s.waitRequest(id, "DONE", "FAILED")
		require.Equal(t, "DONE", done["status"], "%v", done)
		exec := execution(t, done)
		require.Equal(t, "COMPLETED", exec["status"])
		require.Equal(t, float64(6), exec["chunksDone"])
		require.Equal(t, float64(6), exec["externalCalls"])

		status, jobs := s.get("/v1/jobs")
		require.Equal(t, http.StatusOK, status, "%v", jobs)
		status, list := s.get("/v1/requests?job=aptTrade&limit=10")
		require.Equal(t, http.StatusOK, status, "%v", list)
		require.Len(t, list["requests"], 1)
		status, workers := s.get("/v1/workers")
		require.Equal(t, http.StatusOK, status, "%v", workers)
		alive := 0
		for _, w := range workers["workers"].([]any) {
			if w.(map[string]any)["alive"] == true {
				alive++
			}
		}
		require.Equal(t, 2, alive, "both worker processes registered and beat through PgBouncer: %v", workers)

		status, bad := s.post("/v1/jobs/aptTrade/requests", aptTradeBody([]string{"1111"}, "2025-01", "2025-03"))
		require.Equal(t, http.StatusBadRequest, status, "%v", bad)
	}

	// A duplicate burst: one 202, the rest 409 naming it, one execution.
	{
		body := aptTradeBody([]string{"11170"}, "2025-01", "2025-02")
		s.gate.arm(0) // the winner's run holds its first call until every POST is answered
		accepted := s.postBurst(t, body, 30)
		s.gate.open()
		done := s.waitRequest(accepted, "DONE", "FAILED")
		require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
		require.Equal(t, 1, s.count(`SELECT count(*) FROM job_request WHERE params->'regions' = '["11170"]'`))
		require.Equal(t, 1, s.count(`SELECT count(*) FROM job_execution e JOIN job_request r ON r.execution_id = e.id WHERE r.params->'regions' = '["11170"]'`))
	}

	// Stop at a chunk boundary; a new request resumes it to COMPLETED.
	{
		body := aptTradeBody([]string{"11200", "11215"}, "2024-01", "2024-06")
		s.gate.arm(5)
		id := s.requestAptTrade(body)
		within(t, time.Minute, s.gate.blocked, "the sixth provider call") // chunk 6 is in flight, 5 are committed
		status, stop := s.post("/v1/jobs/aptTrade/stop", "")
		require.Equal(t, http.StatusAccepted, status, "%v", stop)
		require.Equal(t, "STOPPING", stop["status"])
		s.gate.open()
		done := s.waitRequest(id, "DONE", "FAILED")
		exec := execution(t, done)
		require.Equal(t, "STOPPED", exec["status"], "%v", done)
		require.Equal(t, batch.MessageStopRequested, exec["exitMessage"])

		status, again := s.post("/v1/jobs/aptTrade/requests", body)
		require.Equal(t, http.StatusAccepted, status, "%v", again)
		require.Equal(t, exec["id"], again["resumesExecutionId"])
		resumed := s.waitRequest(again["requestId"].(string), "DONE", "FAILED")
		resumedExec := execution(t, resumed)
		require.Equal(t, "COMPLETED", resumedExec["status"], "%v", resumed)
		require.Equal(t, float64(12), resumedExec["chunksDone"])
	}

	// 6 + 2 + 12 combinations, each fetched exactly once: no chunk was
	// fetched twice, whichever worker ran it.
	requireEachKeyOnce(t, s, 20)
	require.Zero(t, s.count(`SELECT count(*) FROM job_request WHERE status = 'FAILED'`))

	// Pickup is River's fetch poll without LISTEN (docs/operations.md,
	// "PgBouncer"): logged, not asserted.
	var n int
	var median, slowest float64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*),
		coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - created_at)), 0),
		coalesce(max(extract(epoch FROM claimed_at - created_at)), 0)
		FROM job_request WHERE claimed_at IS NOT NULL`).Scan(&n, &median, &slowest))
	t.Logf("pickup (claimed_at - created_at) of %d requests: median %.0f ms, slowest %.0f ms", n, median*1000, slowest*1000)
}

// Through PgBouncer the api's lock_timeout still fires: a request that waits
// for the job's advisory lock (held by another transaction) answers 503
// after BUILDRISK_API_LOCK_TIMEOUT, cancelled by the server's lock timeout,
// not by the call's deadline; and the SET LOCAL behind it does not leak to
// the next transaction on the same server connection.
func TestPgBouncer_APITimeoutsFire(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	env := map[string]string{}
	for k, v := range unavailableEnv {
		env[k] = v
	}
	for k, v := range pgbouncerEnv {
		env[k] = v
	}
	s := newTestSystem(t, &testSystemOpts{pgbouncer: true, env: env, logs: logs})

	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.job:' || $1::text, 0))", "aptTrade")
	require.NoError(t, err)

	require503(t, s.api.URL, http.MethodPost, "/v1/jobs/aptTrade/requests", aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Contains(t, logs.String(), "lock timeout", "the server's lock_timeout (SET LOCAL) cancelled the wait")

	// Every server connection PgBouncer lends the api is back at the
	// server's defaults outside the api's transactions.
	for range 5 {
		var statementTimeout, lockTimeout string
		require.NoError(t, s.apiPool.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&statementTimeout, &lockTimeout))
		require.Equal(t, "0", statementTimeout)
		require.Equal(t, "0", lockTimeout)
	}

	require.NoError(t, tx.Rollback(ctx))
	status, out := s.post("/v1/jobs/aptTrade/requests", aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
}

// The switch: BUILDRISK_DB_PGBOUNCER=transaction gives every pool pgx's
// describe-caching mode and no session parameters, the api per-transaction
// timeouts, and River's workers poll-only; unset, nothing changes.
func TestPgBouncer_Switch(t *testing.T) {
	t.Parallel()
	load := func(extra map[string]string) *envConfig {
		vars := map[string]string{"BUILDRISK_API_TOKENS": "operator:" + testOperatorToken}
		for k, v := range extra {
			vars[k] = v
		}
		env, err := loadEnv(func(k string) string { return vars[k] })
		require.NoError(t, err)
		return env
	}
	_, err := loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_DB_PGBOUNCER": "session"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_DB_PGBOUNCER")

	for _, c := range []struct {
		name      string
		env       *envConfig
		pgbouncer bool
	}{
		{"Direct", load(nil), false},
		{"Off", load(map[string]string{"BUILDRISK_DB_PGBOUNCER": "off"}), false},
		{"Transaction", load(pgbouncerEnv), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := c.env
			require.Equal(t, c.pgbouncer, env.TxPooling)
			cfg, err := poolConfig("postgres://radar@127.0.0.1:1/radar", 4, env.TxPooling)
			require.NoError(t, err)
			if c.pgbouncer {
				require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode)
				require.Equal(t, &queries.TxSettings{StatementTimeout: env.APIStatementTimeout, LockTimeout: env.APILockTimeout}, apiTxSettings(env))
			} else {
				require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.ConnConfig.DefaultQueryExecMode)
				require.Nil(t, apiTxSettings(env))
			}
			// The api's pool is configured like any other: its reads are
			// planned at every call by the api itself (queries.PlanEachCall),
			// its enqueue keeps cached statements where they may be.
			apiCfg, err := apiPoolConfig(env, "postgres://radar@127.0.0.1:1/radar")
			require.NoError(t, err)
			require.Equal(t, cfg.ConnConfig.DefaultQueryExecMode, apiCfg.ConnConfig.DefaultQueryExecMode)
			if c.pgbouncer {
				require.ErrorContains(t, refuseTxPoolingMigrations(env, "radar migrate"), "session-level advisory lock")
			} else {
				require.NoError(t, refuseTxPoolingMigrations(env, "radar migrate"))
			}

			// The worker's config as newWorker builds it (no connection is
			// made: River connects when the worker starts).
			poolCfg, err := poolConfig("postgres://radar@127.0.0.1:1/radar", 4, env.TxPooling)
			require.NoError(t, err)
			pool, err := pgxpool.NewWithConfig(t.Context(), poolCfg)
			require.NoError(t, err)
			defer pool.Close()
			providers, _ := observabilitytest.NewProviders()
			instruments, err := observability.NewInstruments(providers.Meter)
			require.NoError(t, err)
			tel := &telemetry{providers: providers, instruments: instruments, logger: slog.New(slog.DiscardHandler)}
			var pollOnly bool
			_, _, err = newWorker(pool, env, tel, "1@test#boot", "test", "boot", func(wc *worker.Config, _ *batch.Config) { pollOnly = wc.PollOnly })
			require.NoError(t, err)
			require.Equal(t, c.pgbouncer, pollOnly, "River polls instead of LISTEN behind PgBouncer")
		})
	}
}
