package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/worker"
)

// The role the api and workers run as reads and writes the application's
// and River's tables but cannot drop, truncate or alter any, nor create
// tables.
func TestPrivilege_AppRoleCannotDropOrTruncate(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	var user string
	require.NoError(t, s.APIPool.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, apptest.APILoginRole, user, "the API connects as the api's role")
	require.NoError(t, s.Pool.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, apptest.AppLoginRole, user, "workers connect as the application role")

	s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")) // writes job_request and river_job
	for _, stmt := range []string{
		"SELECT count(*) FROM job_request", "SELECT count(*) FROM river_job", "SELECT count(*) FROM goose_db_version",
		"UPDATE job_request SET message = message", "DELETE FROM river_job WHERE id < 0",
	} {
		_, err := s.Pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, stmt := range []string{
		"DROP TABLE job_request", "TRUNCATE job_request", "DROP TABLE river_job", "TRUNCATE river_job CASCADE",
		"ALTER TABLE job_request ADD COLUMN x int", "ALTER TABLE river_job DISABLE TRIGGER ALL",
		"CREATE TABLE intruder (i int)", "DROP SCHEMA public CASCADE",
	} {
		_, err := s.APIPool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, stmt)
		require.Equal(t, "42501", pgErr.Code, "%s: %v", stmt, err) // insufficient_privilege
	}
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request"), "nothing was dropped or truncated")
}

// Neither the api nor the workers can rewrite migration bookkeeping: a
// forged goose version would make `radar migrate` skip a real migration, a
// deleted one break the next. They may still read it (the api refuses to
// start on a schema that is behind).
func TestPrivilege_AppRoleCannotWriteMigrationBookkeeping(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	for _, stmt := range []string{"SELECT max(version_id) FROM goose_db_version", "SELECT max(version) FROM river_migration"} {
		_, err := s.APIPool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, stmt := range []string{
		"INSERT INTO goose_db_version (version_id, is_applied) VALUES (86, true)",
		"DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)",
		"UPDATE goose_db_version SET is_applied = false",
		"INSERT INTO river_migration (line, version) VALUES ('main', 999)",
		"DELETE FROM river_migration",
		"UPDATE river_migration SET version = version",
		"LOCK TABLE goose_db_version IN ACCESS EXCLUSIVE MODE",
		"LOCK TABLE river_migration IN ACCESS EXCLUSIVE MODE",
	} {
		for name, pool := range map[string]interface {
			Begin(context.Context) (pgx.Tx, error)
		}{"api": s.APIPool, "worker": s.Pool} {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, stmt)
			_ = tx.Rollback(ctx)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "%s: %s", name, stmt)
			require.Equal(t, "42501", pgErr.Code, "%s: %s: %v", name, stmt, err) // insufficient_privilege
		}
	}
}

// The api and the workers have roles of their own. The api reads every
// table but writes only requests, their River jobs, job instances,
// executions (stop, abandon), console sessions and Idempotency-Key records
// (never deleting one): never a checkpoint, a domain row, a worker row or a
// call budget, and it cannot lock those tables. The workers cannot read or
// write console sessions, and of the Idempotency-Key records may only read
// and delete (the expired ones, in their reap pass).
func TestPrivilege_APIAndWorkerRolesAreSeparate(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	refused := func(name string, pool interface {
		Begin(context.Context) (pgx.Tx, error)
	}, stmt string) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%s: %s", name, stmt)
		require.Equal(t, "42501", pgErr.Code, "%s: %s: %v", name, stmt, err) // insufficient_privilege
	}
	for _, stmt := range []string{
		"SELECT count(*) FROM job_checkpoint", "SELECT count(*) FROM apt_trade", "SELECT count(*) FROM worker",
		"SELECT count(*) FROM river_job", "UPDATE job_request SET message = message",
		"SELECT count(*) FROM idempotency_key", "UPDATE idempotency_key SET status = status",
		`INSERT INTO idempotency_key (token_name, key, fingerprint, operation, status, response, expires_at)
			VALUES ('t', 'k', '\x00', 'POST /v1/jobs/aptTrade/stop', 202, '{}', now())`,
	} {
		_, err := s.APIPool.Exec(ctx, stmt)
		require.NoError(t, err, "api: %s", stmt)
	}
	for _, stmt := range []string{"SELECT count(*) FROM idempotency_key", "DELETE FROM idempotency_key WHERE expires_at <= now()"} {
		_, err := s.Pool.Exec(ctx, stmt)
		require.NoError(t, err, "worker: %s", stmt)
	}
	for _, stmt := range []string{
		"INSERT INTO job_checkpoint DEFAULT VALUES", "UPDATE job_checkpoint SET chunk = chunk", "DELETE FROM job_checkpoint",
		"DELETE FROM job_checkpoint_part", "UPDATE apt_trade SET region = region", "DELETE FROM company", "DELETE FROM risk_alert",
		"UPDATE worker SET heartbeat_at = now()", "DELETE FROM provider_call_budget", "UPDATE provider_call_lease SET provider = provider",
		"DELETE FROM job_request", "DELETE FROM job_execution", "DELETE FROM river_job",
		"LOCK TABLE job_checkpoint IN ACCESS EXCLUSIVE MODE", "LOCK TABLE worker IN EXCLUSIVE MODE",
		"DELETE FROM idempotency_key", "TRUNCATE idempotency_key",
	} {
		refused("api", s.APIPool, stmt)
	}
	for _, stmt := range []string{
		`INSERT INTO idempotency_key (token_name, key, fingerprint, operation, status, response, expires_at)
			VALUES ('t', 'w', '\x00', 'POST /v1/jobs/aptTrade/stop', 202, '{}', now())`,
		"UPDATE idempotency_key SET status = status", "TRUNCATE idempotency_key",
	} {
		refused("worker", s.Pool, stmt)
	}
	for _, stmt := range []string{
		"SELECT count(*) FROM console_session", "DELETE FROM console_session", "UPDATE console_session SET revoked_at = NULL",
		"INSERT INTO console_session (id_hash, role, expires_at) VALUES ('x', 'operator', now() + interval '1 day')",
	} {
		refused("worker", s.Pool, stmt)
	}
}

// The api's and the workers' roles read the database's identity (system
// identifier, timeline, recovery, replication settings) with no grant of
// their own: failover detection needs no privilege beyond theirs. A plain
// test database is a primary on timeline 1 without synchronous replication.
func TestPrivilege_AppRolesReadTheDatabaseIdentity(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	for name, pool := range map[string]*pgxpool.Pool{"api": s.APIPool, "worker": s.Pool} {
		row, err := queries.New().DatabaseIdentity(ctx, pool)
		require.NoError(t, err, name)
		require.NotZero(t, row.SystemIdentifier, name)
		require.Equal(t, int64(1), row.Timeline, name)
		require.False(t, row.InRecovery, name)
		require.False(t, worker.SynchronousReplication(row.SynchronousStandbyNames, row.SynchronousCommit), name)
	}
	require.Equal(t, float64(0), s.Metric(observability.MetricDatabaseSyncRepl, nil), "the api's probe recorded the setting at its start")
	require.Equal(t, float64(0), s.Metric(observability.MetricDatabaseFailovers, nil))
}

// Neither the api nor the workers can move a sequence: setval on
// job_request_id_seq made every new request collide with request 1's key,
// on audit_event_id_seq every later audit insert fail. They take values
// (nextval: USAGE) and nothing more, and the workers not even that from the
// audit trail's sequence. A request, its run and a login still write.
func TestPrivilege_AppRolesCannotMoveSequences(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	rows, err := s.Pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND n.nspname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	sequences, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, sequences, "job_request_id_seq")
	require.Contains(t, sequences, "audit_event_id_seq")
	require.Contains(t, sequences, "river_job_id_seq")

	refused := func(name string, pool *pgxpool.Pool, stmt string) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%s: %s", name, stmt)
		require.Equal(t, "42501", pgErr.Code, "%s: %s: %v", name, stmt, err) // insufficient_privilege
	}
	for name, pool := range map[string]*pgxpool.Pool{"api": s.APIPool, "worker": s.Pool} {
		for _, seq := range sequences {
			refused(name, pool, "SELECT setval('"+seq+"', 1)")
			refused(name, pool, "ALTER SEQUENCE "+seq+" RESTART")
		}
	}
	refused("worker", s.Pool, "SELECT nextval('audit_event_id_seq')")

	// What the roles do with sequences still works: the api inserts a
	// request and its River job, a worker runs it, a login is audited.
	s.StartWorker()
	s.RunJob("aptTrade", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusSeeOther, apptest.NewConsoleClient(t, s.API).Login(apptest.OperatorToken).StatusCode)
	var audited int
	require.NoError(t, s.APIPool.QueryRow(ctx, "SELECT count(*) FROM audit_event WHERE action = 'login'").Scan(&audited))
	require.Equal(t, 1, audited)
}
