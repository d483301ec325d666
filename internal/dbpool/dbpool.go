// Package dbpool opens the database pools of each process role, with the
// limits and timeouts each needs, and checks the schema before serving.
package dbpool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/buildrisk/radar/internal/config"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgfence"
	"github.com/buildrisk/radar/sql/pgtx"
)

// Open opens a process's main pool of at most maxConns connections (0:
// pgxpool's default). statementTimeout, when set, becomes the connections'
// statement_timeout, so no statement of the process (a lock wait included)
// can outlast it, whatever its caller does, and bounds the time to open a
// connection. txPooling (BUILDRISK_DB_PGBOUNCER=transaction) adapts the
// pool to PgBouncer's transaction pooling (poolConfig).
// limits are the server-side limits of its sessions (SessionLimits).
func Open(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits config.SessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "main", limits)
}

// OpenHeartbeat opens the small pool a worker's or CLI's heartbeats use,
// so they never wait behind chunk work for a connection.
func OpenHeartbeat(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits config.SessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "heartbeat", limits)
}

// openNamedPool opens a pool; name tells its statistics apart from another
// pool's.
func openNamedPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, name string, limits config.SessionLimits) (*pgxpool.Pool, error) {
	cfg, err := Config(url, maxConns, txPooling)
	if err != nil {
		return nil, err
	}
	limits.Apply(cfg, txPooling)
	if statementTimeout > 0 {
		// Behind PgBouncer's transaction pooling a startup parameter is
		// refused; the worker's and the CLI's calls each carry a deadline
		// of the same length (worker.Config.DBTimeout), which pgx enforces
		// with a cancel request that PgBouncer forwards.
		if !txPooling {
			cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(statementTimeout.Milliseconds(), 10)
		}
		// A database that does not answer at all (a dropped network) must
		// not hold a new connection longer than a statement either.
		if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > statementTimeout {
			cfg.ConnConfig.ConnectTimeout = statementTimeout
		}
	}
	return connectPool(ctx, cfg, name)
}

// OpenAPI opens the api's pool: every connection runs with the api's
// statement_timeout and lock_timeout, so a locked table or a runaway query
// costs a call a few seconds and a 503, never a hang. Behind PgBouncer's
// transaction pooling the api sets them per transaction instead
// (apiTxSettings).
func OpenAPI(ctx context.Context, env *config.Config, url string) (*pgxpool.Pool, error) {
	cfg, err := APIConfig(env, url)
	if err != nil {
		return nil, err
	}
	return connectPool(ctx, cfg, "api")
}

// APIConfig is the configuration of the api's pool.
func APIConfig(env *config.Config, url string) (*pgxpool.Config, error) {
	cfg, err := Config(url, env.APIMaxConns(), env.TxPooling)
	if err != nil {
		return nil, err
	}
	if !env.TxPooling {
		setAPITimeouts(cfg.ConnConfig, env)
	}
	limits := env.SessionLimits("")
	// An api transaction may run statements up to its statement_timeout.
	limits.TransactionTimeout = max(limits.TransactionTimeout, 2*env.APIStatementTimeout)
	limits.Apply(cfg, env.TxPooling)
	// The api's reads are planned at every call (queries.PlanEachCall in
	// the api), never from a plan cached on a long-lived connection, which
	// outlives the history it was chosen for. The enqueue's statements
	// (lookups by key, River's INSERT, the request row) keep pgx's cached
	// statements: planning them at every call cost each request's pickup
	// about 0.7 ms (BENCHMARKS.md).
	return cfg, nil
}

// setAPITimeouts sets the api's statement and lock timeouts as session
// parameters of every connection (sent in the startup message).
func setAPITimeouts(cfg *pgx.ConnConfig, env *config.Config) {
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(env.APIStatementTimeout.Milliseconds(), 10)
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(env.APILockTimeout.Milliseconds(), 10)
}

// APITxSettings returns the api's timeouts as per-transaction settings
// behind PgBouncer's transaction pooling, nil otherwise (they are the
// connections' session settings then).
func APITxSettings(env *config.Config) *pgtx.TxSettings {
	if !env.TxPooling {
		return nil
	}
	return &pgtx.TxSettings{StatementTimeout: env.APIStatementTimeout, LockTimeout: env.APILockTimeout}
}

// txPoolingExecMode is the pgx query mode behind PgBouncer's transaction
// pooling. pgx's default caches named prepared statements per connection,
// but PgBouncer 1.18 (Debian bookworm) hands each transaction whichever
// server connection is free and has no protocol-level support for prepared
// statements (max_prepared_statements came in 1.21): a statement prepared
// on one server connection "does not exist" on the next, or "already
// exists" there. CacheDescribe caches only the statements' parameter and
// result types and runs every query as an unnamed statement, parse to
// result in one round trip, so nothing outlives the message exchange.
const txPoolingExecMode = pgx.QueryExecModeCacheDescribe

// Config parses url into a pool of at most maxConns connections (0:
// pgxpool's default), traced and fenced (pgfence: no connection to a
// demoted primary, no id drawn on a new timeline before the id fence);
// txPooling selects txPoolingExecMode.
func Config(url string, maxConns int32, txPooling bool) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, config.Usage(fmt.Errorf("DATABASE_URL: %w", err))
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if txPooling {
		cfg.ConnConfig.DefaultQueryExecMode = txPoolingExecMode
	}
	pgfence.Process().Install(cfg)
	return cfg, nil
}

// connectPool opens the pool and checks the database answers; name labels
// the pool's statistics.
func connectPool(ctx context.Context, cfg *pgxpool.Config, name string) (*pgxpool.Pool, error) {
	learnTimelines(ctx, cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("error creating database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("error connecting to the database: %w", err)
	}
	_ = otelpgx.RecordStats(pool, otelpgx.WithStatsAttributes(attribute.String("pool", name)))
	return pool, nil
}

// learnTimelines reads the identity of every host of a multi-host URL
// before the pool's first connection, so that a process starting while a
// demoted primary still answers read-write (a split brain) knows the
// promoted one's timeline and never writes to the other, whichever host
// the URL names first.
func learnTimelines(ctx context.Context, cfg *pgxpool.Config) {
	if len(cfg.ConnConfig.Fallbacks) == 0 {
		return
	}
	_, _ = pgfence.Process().Probe(ctx, &cfg.ConnConfig.Config)
}

// CheckSchema refuses to serve on a schema that is behind.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrations.Check(ctx, pool); err != nil {
		if errors.Is(err, migrations.ErrSchemaBehind) {
			return config.Usage(err)
		}
		return err
	}
	return nil
}
