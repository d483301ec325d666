package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pglocal"
)

// unavailableEnv shortens the api's database timeouts for these tests.
var unavailableEnv = map[string]string{
	"BUILDRISK_API_STATEMENT_TIMEOUT": "1s",
	"BUILDRISK_API_LOCK_TIMEOUT":      "200ms",
}

// require503 sends a call and requires a 503 with Retry-After and a
// problem body.
func require503(t *testing.T, baseURL, method, path, body string) {
	t.Helper()
	status, header, out := call(t, baseURL, method, path, body)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %v", method, path, out)
	require.Equal(t, "2", header.Get("Retry-After"), "%s %s", method, path)
	if strings.HasPrefix(path, "/v1/") {
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		require.Equal(t, float64(503), out["status"])
		require.NotEmpty(t, out["detail"])
	}
}

// call sends a call with the operator token and decodes the answer.
func call(t *testing.T, baseURL, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, baseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// An ACCESS EXCLUSIVE lock on job_request makes the calls that read it
// answer 503 when lock_timeout fires, instead of hanging; calls that don't
// read that table still answer.
func TestUnavailable_TableLock(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	s := newTestSystem(t, &testSystemOpts{env: unavailableEnv, logs: logs})
	id := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-01"))

	var timeout, lockTimeout string
	require.NoError(t, s.apiPool.QueryRow(context.Background(), "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&timeout, &lockTimeout))
	require.Equal(t, "1s", timeout)
	require.Equal(t, "200ms", lockTimeout)

	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE job_request IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	require503(t, s.api.URL, http.MethodGet, "/v1/requests", "")
	require503(t, s.api.URL, http.MethodGet, "/v1/requests/"+id, "")
	require503(t, s.api.URL, http.MethodGet, "/v1/jobs", "")
	require503(t, s.api.URL, http.MethodPost, "/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"}}`)
	require.Contains(t, logs.String(), "lock timeout", "the server's lock_timeout cancelled the statements")
	// Each 503 is counted as a refusal.
	require.Equal(t, float64(4), s.metric(observability.MetricHTTPRefusals, map[string]string{"reason": observability.RefusalUnavailable}))

	for _, path := range []string{"/v1/alerts", "/healthz", "/readyz"} {
		status, _, out := call(t, s.api.URL, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, status, "%s does not read job_request: %v", path, out)
	}

	require.NoError(t, tx.Rollback(ctx))
	status, _, _ := call(t, s.api.URL, http.MethodGet, "/v1/requests/"+id, "")
	require.Equal(t, http.StatusOK, status)
}

// Every pooled connection taken: a call waits for one until its deadline
// and answers 503, then serves again once connections are back.
func TestUnavailable_PoolExhausted(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: unavailableEnv})
	ctx := context.Background()
	var held []*pgxpool.Conn
	release := func() {
		for _, conn := range held {
			conn.Release()
		}
		held = nil
	}
	defer release() // the pool cannot close while a connection is out
	for range s.apiPool.Config().MaxConns {
		conn, err := s.apiPool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, conn)
	}
	require503(t, s.api.URL, http.MethodGet, "/v1/requests", "")
	require503(t, s.api.URL, http.MethodPost, "/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"}}`)
	release()
	status, _, _ := call(t, s.api.URL, http.MethodGet, "/v1/requests", "")
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
	require.NoError(t, migrations.Migrate(ctx, owner))
	owner.Close()

	vars := map[string]string{"BUILDRISK_API_TOKENS": "operator:" + testOperatorToken}
	for k, v := range unavailableEnv {
		vars[k] = v
	}
	env, err := loadEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	tel := &telemetry{providers: providers, instruments: instruments, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pool, err := openAPIPool(ctx, env, url)
	require.NoError(t, err)
	defer pool.Close()
	server, err := newAPIServer(t.Context(), pool, env, tel)
	require.NoError(t, err)
	api := httptest.NewServer(server.Handler())
	defer api.Close()

	status, _, out := call(t, api.URL, http.MethodGet, "/v1/requests", "")
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
		require503(t, api.URL, c.method, c.path, c.body)
	}
	status, _, _ = call(t, api.URL, http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, status)
}
