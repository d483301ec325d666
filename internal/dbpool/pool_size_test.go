package dbpool_test

import (
	"testing"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/stretchr/testify/require"
)

// pool_max_conns in DATABASE_URL does not size a role's pool: every role
// sets the size itself (BUILDRISK_DB_MAX_CONNS or its default), as
// docs/operations.md says. Other pool_* parameters are kept.
func TestPoolSize_URLDoesNotSetIt(t *testing.T) {
	t.Parallel()
	url := "postgres://radar@localhost:5432/radar?pool_max_conns=2&pool_min_conns=1"

	env, err := config.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	cfg, err := dbpool.APIConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, env.APIMaxConns(), cfg.MaxConns, "the api's default, not the URL's 2")
	require.GreaterOrEqual(t, cfg.MaxConns, int32(config.APIConnsMin))
	require.Equal(t, int32(1), cfg.MinConns, "other pool_* parameters are honoured")

	cfg, err = dbpool.Config(url, env.WorkerMaxConns(), false)
	require.NoError(t, err)
	require.Equal(t, int32(config.WorkerConnsPerJob*env.WorkerConcurrency+config.WorkerConnsBase), cfg.MaxConns)

	env, err = config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_DB_MAX_CONNS": "3"}[k] })
	require.NoError(t, err)
	cfg, err = dbpool.APIConfig(env, url)
	require.NoError(t, err)
	require.Equal(t, int32(3), cfg.MaxConns, "BUILDRISK_DB_MAX_CONNS sets it")
}
