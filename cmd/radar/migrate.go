package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/buildrisk/radar/sql/migrations"
)

// runMigrate applies every pending migration; running it twice is a no-op.
func runMigrate(ctx context.Context, stdout io.Writer) error {
	env, err := loadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := requireDatabaseURL(env); err != nil {
		return err
	}
	if err := refuseTxPoolingMigrations(env, "radar migrate"); err != nil {
		return err
	}
	pool, err := openPool(ctx, env.DatabaseURL, 4, 0, false, sessionLimits{})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Migrate(ctx, pool); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "migrations applied; schema is current")
	return nil
}

// refuseTxPoolingMigrations stops a command that migrates when
// BUILDRISK_DB_PGBOUNCER=transaction: goose holds a session-level advisory
// lock for the whole migration (so that concurrent migrators wait), and
// under PgBouncer's transaction pooling the lock and its unlock land on
// different server connections, leaving the lock held for whichever client
// gets that connection next. Migrations connect to PostgreSQL directly.
func refuseTxPoolingMigrations(env *envConfig, command string) error {
	if !env.TxPooling {
		return nil
	}
	return usageError{fmt.Errorf("BUILDRISK_DB_PGBOUNCER=transaction: %s applies migrations under a session-level advisory lock, "+
		"which PgBouncer's transaction pooling cannot keep; run it with DATABASE_URL pointing at PostgreSQL itself and BUILDRISK_DB_PGBOUNCER unset "+
		"(docs/operations.md, \"PgBouncer\")", command)}
}
