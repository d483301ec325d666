package app_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/pgtx"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// Through PgBouncer the api's lock_timeout still fires: a request that waits
// for the job's advisory lock (held by another transaction) answers 503
// after BUILDRISK_API_LOCK_TIMEOUT, cancelled by the server's lock timeout,
// not by the call's deadline; and the SET LOCAL behind it does not leak to
// the next transaction on the same server connection.
func TestPgBouncer_APITimeoutsFire(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	env := map[string]string{}
	for k, v := range apptest.UnavailableEnv {
		env[k] = v
	}
	for k, v := range apptest.PgbouncerEnv {
		env[k] = v
	}
	s := apptest.New(t, &apptest.Opts{PgBouncer: true, Env: env, Logs: logs})

	ctx := t.Context()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.job:' || $1::text, 0))", "aptTrade")
	require.NoError(t, err)

	apptest.Require503(t, s.API.URL, http.MethodPost, "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Contains(t, logs.String(), "lock timeout", "the server's lock_timeout (SET LOCAL) cancelled the wait")

	// Every server connection PgBouncer lends the api is back at the
	// server's defaults outside the api's transactions.
	for range 5 {
		var statementTimeout, lockTimeout string
		require.NoError(t, s.APIPool.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&statementTimeout, &lockTimeout))
		require.Equal(t, "0", statementTimeout)
		require.Equal(t, "0", lockTimeout)
	}

	require.NoError(t, tx.Rollback(ctx))
	status, out := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
}

// The switch: BUILDRISK_DB_PGBOUNCER=transaction gives every pool pgx's
// describe-caching mode and no session parameters, the api per-transaction
// timeouts, and River's workers poll-only; unset, nothing changes.
func TestPgBouncer_Switch(t *testing.T) {
	t.Parallel()
	load := func(extra map[string]string) *config.Config {
		vars := map[string]string{"BUILDRISK_API_TOKENS": "operator:" + apptest.OperatorToken}
		for k, v := range extra {
			vars[k] = v
		}
		env, err := config.LoadEnv(func(k string) string { return vars[k] })
		require.NoError(t, err)
		return env
	}
	_, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_DB_PGBOUNCER": "session"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_DB_PGBOUNCER")

	for _, c := range []struct {
		name      string
		env       *config.Config
		pgbouncer bool
	}{
		{"Direct", load(nil), false},
		{"Off", load(map[string]string{"BUILDRISK_DB_PGBOUNCER": "off"}), false},
		{"Transaction", load(apptest.PgbouncerEnv), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := c.env
			require.Equal(t, c.pgbouncer, env.TxPooling)
			cfg, err := dbpool.Config("postgres://radar@127.0.0.1:1/radar", 4, env.TxPooling)
			require.NoError(t, err)
			if c.pgbouncer {
				require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode)
				require.Equal(t, &pgtx.TxSettings{StatementTimeout: env.APIStatementTimeout, LockTimeout: env.APILockTimeout}, dbpool.APITxSettings(env))
			} else {
				require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.ConnConfig.DefaultQueryExecMode)
				require.Nil(t, dbpool.APITxSettings(env))
			}
			// The api's pool is configured like any other: its reads are
			// planned at every call by the api itself (queries.PlanEachCall),
			// its enqueue keeps cached statements where they may be.
			apiCfg, err := dbpool.APIConfig(env, "postgres://radar@127.0.0.1:1/radar")
			require.NoError(t, err)
			require.Equal(t, cfg.ConnConfig.DefaultQueryExecMode, apiCfg.ConnConfig.DefaultQueryExecMode)
			if c.pgbouncer {
				require.ErrorContains(t, config.RefuseTxPoolingMigrations(env, "radar migrate"), "session-level advisory lock")
			} else {
				require.NoError(t, config.RefuseTxPoolingMigrations(env, "radar migrate"))
			}

			// The worker's config as newWorker builds it (no connection is
			// made: River connects when the worker starts).
			poolCfg, err := dbpool.Config("postgres://radar@127.0.0.1:1/radar", 4, env.TxPooling)
			require.NoError(t, err)
			pool, err := pgxpool.NewWithConfig(t.Context(), poolCfg)
			require.NoError(t, err)
			defer pool.Close()
			providers, _ := observabilitytest.NewProviders()
			instruments, err := observability.NewInstruments(providers.Meter)
			require.NoError(t, err)
			tel := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: slog.New(slog.DiscardHandler)}
			var pollOnly bool
			_, err = app.NewWorker(pool, env, tel, app.WorkerOptions{ID: "1@test#boot", Hostname: "test", Boot: "boot", Tune: func(wc *worker.Config, _ *batch.Config) { pollOnly = wc.PollOnly }})
			require.NoError(t, err)
			require.Equal(t, c.pgbouncer, pollOnly, "River polls instead of LISTEN behind PgBouncer")
		})
	}
}
