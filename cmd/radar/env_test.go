package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every bad value fails at start with a message naming the variable.
func TestEnv_BadValuesNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"BUILDRISK_API_TOKENS":         "admin:x",
		"BUILDRISK_INSECURE_NO_AUTH":   "yes",
		"BUILDRISK_HEARTBEAT_INTERVAL": "10",
		"BUILDRISK_STALE_AFTER":        "-1s",
		"BUILDRISK_REAP_INTERVAL":      "soon",
		"BUILDRISK_DRAIN_TIMEOUT":      "0s",
		"BUILDRISK_FANOUT":             "0",
		"BUILDRISK_DB_MAX_CONNS":       "0",
		"BUILDRISK_WORKER_RETENTION":   "30s",
		"BUILDRISK_MOLIT_URL":          "ftp://x",
		"BUILDRISK_DAILY_CAP_DART":     "many",
		"BUILDRISK_TIMEZONE":           "Mars/Olympus",
		"BUILDRISK_LOG_FORMAT":         "xml",
		"BUILDRISK_SCHEDULE_APTTRADE":  "61 * * * *",
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadEnv(func(k string) string {
				if k == name {
					return value
				}
				return ""
			})
			require.Error(t, err)
			require.Contains(t, err.Error(), name)
			require.True(t, isUsage(err))
		})
	}
	_, err := loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_HEARTBEAT_INTERVAL": "1m", "BUILDRISK_STALE_AFTER": "30s"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_STALE_AFTER")
}

func TestEnv_Defaults(t *testing.T) {
	t.Parallel()
	env, err := loadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, ":8080", env.HTTPAddr)
	require.Equal(t, ":9090", env.AdminAddr)
	require.Equal(t, 10*time.Second, env.HeartbeatInterval)
	require.Equal(t, 60*time.Second, env.StaleAfter)
	require.Equal(t, 30*time.Second, env.ReapInterval)
	require.Equal(t, 45*time.Second, env.DrainTimeout)
	require.Equal(t, 5, env.FanOut)
	require.Equal(t, "Asia/Seoul", env.Location.String())
	require.Equal(t, 20000, env.DailyCaps["DART"])
	require.Equal(t, 10000, env.DailyCaps["MOLIT"])
	require.Equal(t, 10000, env.DailyCaps["KRX"])
	require.Equal(t, 50000, env.DailyCaps["CREDIT"])
	require.Empty(t, env.UpstreamURLs)
	require.Error(t, requireDatabaseURL(env))

	env, err = loadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_UPSTREAM_URL": "http://fake:8090/", "BUILDRISK_DART_URL": "https://dart.example"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "http://fake:8090", string(env.UpstreamURLs["MOLIT"]))
	require.Equal(t, "https://dart.example", env.UpstreamURLs["DART"], "the per-provider URL wins")
}

// Pool sizes follow the concurrency unless BUILDRISK_DB_MAX_CONNS says.
func TestEnv_ConnectionBudgets(t *testing.T) {
	t.Parallel()
	env, err := loadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, int32(2*10+6), env.workerMaxConns(), "two per concurrent job, plus River's and the loops'")
	require.GreaterOrEqual(t, env.apiMaxConns(), int32(8))

	env, err = loadEnv(func(k string) string { return map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "3"}[k] })
	require.NoError(t, err)
	require.Equal(t, int32(2*3+6), env.workerMaxConns())

	env, err = loadEnv(func(k string) string { return map[string]string{"BUILDRISK_DB_MAX_CONNS": "40"}[k] })
	require.NoError(t, err)
	require.Equal(t, int32(40), env.workerMaxConns())
	require.Equal(t, int32(40), env.apiMaxConns())
}

// The API refuses to start without tokens unless explicitly insecure, and
// api/worker refuse to start without DATABASE_URL.
func TestEnv_RolesRefuseToStart(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("BUILDRISK_API_TOKENS", "")
	require.ErrorContains(t, runAPI(t.Context()), "DATABASE_URL")
	require.ErrorContains(t, runWorker(t.Context()), "DATABASE_URL")
	t.Setenv("DATABASE_URL", "postgres://nowhere/x")
	require.ErrorContains(t, runAPI(t.Context()), "BUILDRISK_API_TOKENS")
}
