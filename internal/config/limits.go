package config

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/migrations"
)

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

// MigrateConfig is the configuration of migrations.Migrate: the lock
// timeout and retry window of BUILDRISK_MIGRATE_LOCK_TIMEOUT and
// BUILDRISK_MIGRATE_LOCK_RETRY_FOR, each lock wait logged to logger.
func (c *Config) MigrateConfig(logger *slog.Logger) *migrations.Config {
	return &migrations.Config{LockTimeout: c.MigrateLockTimeout, LockRetryFor: c.MigrateLockRetryFor, Logger: logger}
}
