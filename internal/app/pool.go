package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgtx"
)

// OpenPool opens a process's main pool of at most maxConns connections (0:
// pgxpool's default). statementTimeout, when set, becomes the connections'
// statement_timeout, so no statement of the process (a lock wait included)
// can outlast it, whatever its caller does, and bounds the time to open a
// connection. txPooling (BUILDRISK_DB_PGBOUNCER=transaction) adapts the
// pool to PgBouncer's transaction pooling (poolConfig).
// limits are the server-side limits of its sessions (SessionLimits).
func OpenPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits SessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "main", limits)
}

// OpenHeartbeatPool opens the small pool a worker's or CLI's heartbeats use,
// so they never wait behind chunk work for a connection.
func OpenHeartbeatPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits SessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "heartbeat", limits)
}

// openNamedPool opens a pool; name tells its statistics apart from another
// pool's.
func openNamedPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, name string, limits SessionLimits) (*pgxpool.Pool, error) {
	cfg, err := PoolConfig(url, maxConns, txPooling)
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

// SessionLimits are the server-side limits every connection of a process
// carries, so that the server itself ends the transaction of a process that
// went silent inside it (SIGSTOP, a network partition that keeps the
// socket open, a node gone) instead of keeping it, and its row locks, for
// as long as TCP takes to notice (7200 s + 9 × 75 s by default). They
// derive from the fencing window (Config.SessionLimits), so a dead
// worker's transaction ends before any reaper can find it stale.
type SessionLimits struct {
	// AppName becomes application_name unless DATABASE_URL or PGAPPNAME
	// set one: a worker's id, by which the reaper finds (and ends) the
	// backends of a stale worker.
	AppName string
	// IdleInTransaction is idle_in_transaction_session_timeout.
	IdleInTransaction time.Duration
	// TransactionTimeout is transaction_timeout, set after connecting on
	// PostgreSQL 17 and later only (older servers refuse the name).
	TransactionTimeout time.Duration
	// Keepalive bounds how long a dead peer goes unnoticed on an idle
	// connection, on both sides: the server's tcp_keepalives_* and
	// tcp_user_timeout, and the client's socket keepalives.
	Keepalive time.Duration
}

// SessionLimits returns the limits of a process's connections: idle in a
// transaction for no longer than BUILDRISK_FENCE_AFTER (no transaction of
// the service waits on anything but the database), no transaction older
// than FENCE_AFTER + HEARTBEAT_INTERVAL + DB_STATEMENT_TIMEOUT (less than
// STALE_AFTER, by CheckFencing), and a dead peer noticed within about
// FENCE_AFTER.
func (c *Config) SessionLimits(appName string) SessionLimits {
	return SessionLimits{
		AppName:            appName,
		IdleInTransaction:  c.FenceAfter,
		TransactionTimeout: c.FenceAfter + c.HeartbeatInterval + c.DBTimeout,
		Keepalive:          c.FenceAfter,
	}
}

// Apply sets the limits on cfg. Behind PgBouncer's transaction pooling only
// application_name and the client's keepalives are set: PgBouncer refuses
// other startup parameters, and a session SET would follow the server
// connection to other clients; the operator sets them on the role instead
// (docs/operations.md, "Server-side limits").
func (l SessionLimits) Apply(cfg *pgxpool.Config, txPooling bool) {
	cc := cfg.ConnConfig
	if l.AppName != "" && cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = l.AppName
	}
	var idle, interval time.Duration
	if l.Keepalive > 0 {
		idle, interval = max(l.Keepalive/3, time.Second), max(l.Keepalive/9, time.Second)
		dialer := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: 3}}
		cc.DialFunc = dialer.DialContext
	}
	if txPooling {
		return
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
	if l.IdleInTransaction > 0 {
		cc.RuntimeParams["idle_in_transaction_session_timeout"] = ms(l.IdleInTransaction)
	}
	if l.Keepalive > 0 {
		secs := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
		cc.RuntimeParams["tcp_keepalives_idle"] = secs(idle)
		cc.RuntimeParams["tcp_keepalives_interval"] = secs(interval)
		cc.RuntimeParams["tcp_keepalives_count"] = "3"
		cc.RuntimeParams["tcp_user_timeout"] = ms(l.Keepalive)
	}
	if l.TransactionTimeout > 0 {
		timeout := ms(l.TransactionTimeout)
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if serverMajor(conn.PgConn().ParameterStatus("server_version")) >= 17 {
				if err := queries.New().SessionTransactionTimeoutSet(ctx, conn, timeout); err != nil {
					return fmt.Errorf("error setting transaction_timeout: %w", err)
				}
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	}
}

// serverMajor returns the major version of a server_version such as
// "17.2 (Debian 17.2-1)", 0 when it cannot tell.
func serverMajor(version string) int {
	end := strings.IndexFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(version)
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}

// OpenAPIPool opens the api's pool: every connection runs with the api's
// statement_timeout and lock_timeout, so a locked table or a runaway query
// costs a call a few seconds and a 503, never a hang. Behind PgBouncer's
// transaction pooling the api sets them per transaction instead
// (apiTxSettings).
func OpenAPIPool(ctx context.Context, env *Config, url string) (*pgxpool.Pool, error) {
	cfg, err := APIPoolConfig(env, url)
	if err != nil {
		return nil, err
	}
	return connectPool(ctx, cfg, "api")
}

// APIPoolConfig is the configuration of the api's pool.
func APIPoolConfig(env *Config, url string) (*pgxpool.Config, error) {
	cfg, err := PoolConfig(url, env.APIMaxConns(), env.TxPooling)
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
func setAPITimeouts(cfg *pgx.ConnConfig, env *Config) {
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(env.APIStatementTimeout.Milliseconds(), 10)
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(env.APILockTimeout.Milliseconds(), 10)
}

// APITxSettings returns the api's timeouts as per-transaction settings
// behind PgBouncer's transaction pooling, nil otherwise (they are the
// connections' session settings then).
func APITxSettings(env *Config) *pgtx.TxSettings {
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

// PoolConfig parses url into a pool of at most maxConns connections (0:
// pgxpool's default), traced; txPooling selects txPoolingExecMode.
func PoolConfig(url string, maxConns int32, txPooling bool) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, UsageError{fmt.Errorf("DATABASE_URL: %w", err)}
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if txPooling {
		cfg.ConnConfig.DefaultQueryExecMode = txPoolingExecMode
	}
	return cfg, nil
}

// connectPool opens the pool and checks the database answers; name labels
// the pool's statistics.
func connectPool(ctx context.Context, cfg *pgxpool.Config, name string) (*pgxpool.Pool, error) {
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

// MigrateConfig is the configuration of migrations.Migrate: the lock
// timeout and retry window of BUILDRISK_MIGRATE_LOCK_TIMEOUT and
// BUILDRISK_MIGRATE_LOCK_RETRY_FOR, each lock wait logged to logger.
func (c *Config) MigrateConfig(logger *slog.Logger) *migrations.Config {
	return &migrations.Config{LockTimeout: c.MigrateLockTimeout, LockRetryFor: c.MigrateLockRetryFor, Logger: logger}
}

// CheckSchema refuses to serve on a schema that is behind.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrations.Check(ctx, pool); err != nil {
		if errors.Is(err, migrations.ErrSchemaBehind) {
			return UsageError{err}
		}
		return err
	}
	return nil
}
