package e2e_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pglocal"
)

// An ACCESS EXCLUSIVE lock on job_request makes the calls that read it
// answer 503 when lock_timeout fires, instead of hanging; calls that don't
// read that table still answer.
func TestUnavailable_TableLock(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Env: apptest.UnavailableEnv, Logs: logs})
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))

	var timeout, lockTimeout string
	require.NoError(t, s.APIPool.QueryRow(context.Background(), "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&timeout, &lockTimeout))
	require.Equal(t, "1s", timeout)
	require.Equal(t, "200ms", lockTimeout)

	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE job_request IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	apptest.Require503(t, s.API.URL, http.MethodGet, "/v1/requests", "")
	apptest.Require503(t, s.API.URL, http.MethodGet, "/v1/requests/"+id, "")
	apptest.Require503(t, s.API.URL, http.MethodGet, "/v1/jobs", "")
	apptest.Require503(t, s.API.URL, http.MethodPost, "/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"}}`)
	require.Contains(t, logs.String(), "lock timeout", "the server's lock_timeout cancelled the statements")
	// Each 503 is counted as a refusal.
	require.Equal(t, float64(4), s.Metric(observability.MetricHTTPRefusals, map[string]string{"reason": observability.RefusalUnavailable}))

	for _, path := range []string{"/v1/alerts", "/healthz", "/readyz"} {
		status, _, out := apptest.Call(t, s.API.URL, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, status, "%s does not read job_request: %v", path, out)
	}

	require.NoError(t, tx.Rollback(ctx))
	status, _, _ := apptest.Call(t, s.API.URL, http.MethodGet, "/v1/requests/"+id, "")
	require.Equal(t, http.StatusOK, status)
}

// Every pooled connection taken: a call waits for one until its deadline
// and answers 503, then serves again once connections are back.
func TestUnavailable_PoolExhausted(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: apptest.UnavailableEnv})
	ctx := context.Background()
	var held []*pgxpool.Conn
	release := func() {
		for _, conn := range held {
			conn.Release()
		}
		held = nil
	}
	defer release() // the pool cannot close while a connection is out
	for range s.APIPool.Config().MaxConns {
		conn, err := s.APIPool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, conn)
	}
	apptest.Require503(t, s.API.URL, http.MethodGet, "/v1/requests", "")
	apptest.Require503(t, s.API.URL, http.MethodPost, "/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"}}`)
	release()
	status, _, _ := apptest.Call(t, s.API.URL, http.MethodGet, "/v1/requests", "")
	require.Equal(t, http.StatusOK, status)
}

// With its database stopped, the API answers 503 with Retry-After (never
// 500) on every call that needs it, and /healthz still answers.
func TestUnavailable_DatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pglocal.Start(ctx, pglocal.Config{})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cluster.Stop()
		}
	})
	url := cluster.URL("postgres")
	owner, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, owner, nil))
	owner.Close()

	vars := map[string]string{"BUILDRISK_API_TOKENS": "operator:" + apptest.OperatorToken}
	for k, v := range apptest.UnavailableEnv {
		vars[k] = v
	}
	env, err := config.LoadEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	tel := &app.Telemetry{Providers: providers, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pool, err := dbpool.OpenAPI(ctx, env, url)
	require.NoError(t, err)
	defer pool.Close()
	role := apptest.StartAPI(t, pool, env, tel)
	api := httptest.NewServer(role.Server().Handler())
	defer api.Close()

	status, _, out := apptest.Call(t, api.URL, http.MethodGet, "/v1/requests", "")
	require.Equal(t, http.StatusOK, status, "%v", out)

	require.NoError(t, cluster.Stop())
	stopped = true
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/requests", ""},
		{http.MethodGet, "/v1/requests/1", ""},
		{http.MethodGet, "/v1/jobs", ""},
		{http.MethodGet, "/v1/workers", ""},
		{http.MethodGet, "/v1/alerts", ""},
		{http.MethodPost, "/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"}}`},
		{http.MethodPost, "/v1/jobs/aptTrade/stop", ""},
		{http.MethodPost, "/v1/executions/1/abandon", ""},
		{http.MethodGet, "/readyz", ""},
	} {
		apptest.Require503(t, api.URL, c.method, c.path, c.body)
	}
	status, _, _ = apptest.Call(t, api.URL, http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, status)
}
