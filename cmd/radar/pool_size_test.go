package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// pool_max_conns in DATABASE_URL does not size a role's pool: every role
// sets the size itself (BUILDRISK_DB_MAX_CONNS or its default), as
// docs/operations.md says. Other pool_* parameters are kept.
func TestPoolSize_URLDoesNotSetIt(t *testing.T) {
	t.Parallel()
	url := "postgres://radar@localhost:5432/radar?pool_max_conns=2&pool_min_conns=1"

	env, err := loadEnv(func(string) string { return "" })
	require.NoError(t, err)
	cfg, err := apiPoolConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, env.apiMaxConns(), cfg.MaxConns, "the api's default, not the URL's 2")
	require.GreaterOrEqual(t, cfg.MaxConns, int32(apiConnsMin))
	require.Equal(t, int32(1), cfg.MinConns, "other pool_* parameters are honoured")

	cfg, err = poolConfig(url, env.workerMaxConns(), false)
	require.NoError(t, err)
	require.Equal(t, int32(workerConnsPerJob*env.WorkerConcurrency+workerConnsBase), cfg.MaxConns)

	env, err = loadEnv(func(k string) string { return map[string]string{"BUILDRISK_DB_MAX_CONNS": "3"}[k] })
	require.NoError(t, err)
	cfg, err = apiPoolConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, int32(3), cfg.MaxConns, "BUILDRISK_DB_MAX_CONNS sets it")
}
