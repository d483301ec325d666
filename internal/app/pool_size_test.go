package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
)

// pool_max_conns in DATABASE_URL does not size a role's pool: every role
// sets the size itself (BUILDRISK_DB_MAX_CONNS or its default), as
// docs/operations.md says. Other pool_* parameters are kept.
func TestPoolSize_URLDoesNotSetIt(t *testing.T) {
	t.Parallel()
	url := "postgres://radar@localhost:5432/radar?pool_max_conns=2&pool_min_conns=1"

	env, err := app.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	cfg, err := app.APIPoolConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, env.APIMaxConns(), cfg.MaxConns, "the api's default, not the URL's 2")
	require.GreaterOrEqual(t, cfg.MaxConns, int32(app.APIConnsMin))
	require.Equal(t, int32(1), cfg.MinConns, "other pool_* parameters are honoured")

	cfg, err = app.PoolConfig(url, env.WorkerMaxConns(), false)
	require.NoError(t, err)
	require.Equal(t, int32(app.WorkerConnsPerJob*env.WorkerConcurrency+app.WorkerConnsBase), cfg.MaxConns)

	env, err = app.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_DB_MAX_CONNS": "3"}[k] })
	require.NoError(t, err)
	cfg, err = app.APIPoolConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, int32(3), cfg.MaxConns, "BUILDRISK_DB_MAX_CONNS sets it")
}
