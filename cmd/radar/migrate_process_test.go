package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtest"
)

// `radar migrate` behind a long read of the table its pending migration
// alters (00009's ALTER TABLE job_request) waits no longer than
// BUILDRISK_MIGRATE_LOCK_TIMEOUT at a time, retries for
// BUILDRISK_MIGRATE_LOCK_RETRY_FOR, then exits 1 naming the migration and
// the lock timeout; once the reader is gone it applies the migration.
func TestProcess_MigrateGivesUpBehindALongRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildRadar(t)
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The application's schema as of migration 00008, so that 00009 is
	// pending.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("../../sql/migrations/goose"))
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 8)
	require.NoError(t, err)

	reader, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Rollback(context.Background()) })
	_, err = reader.Exec(ctx, "SELECT count(*) FROM job_request")
	require.NoError(t, err)

	env := map[string]string{
		"DATABASE_URL":                     url,
		"BUILDRISK_LOG_FORMAT":             "text",
		"BUILDRISK_MIGRATE_LOCK_TIMEOUT":   "100ms",
		"BUILDRISK_MIGRATE_LOCK_RETRY_FOR": "1s",
	}
	m := startRadar(t, bin, env, "migrate")
	require.Equal(t, exitFailed, m.Wait(t, 60*time.Second), m.Output())
	require.Contains(t, m.Output(), "gave up after")
	require.Contains(t, m.Output(), "00009_request_not_before.sql")
	require.Contains(t, m.Output(), "lock timeout (SQLSTATE 55P03)")

	require.NoError(t, reader.Commit(ctx))
	m = startRadar(t, bin, env, "migrate")
	require.Equal(t, exitOK, m.Wait(t, 60*time.Second), m.Output())
	require.Contains(t, m.Output(), "schema is current")
	pending, err := provider.HasPending(ctx)
	require.NoError(t, err)
	require.False(t, pending)
}
