package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/sql/migrations"
)

// runMigrate applies every pending migration; running it twice is a no-op.
// A migration waits for a lock no longer than BUILDRISK_MIGRATE_LOCK_TIMEOUT
// and is retried until BUILDRISK_MIGRATE_LOCK_RETRY_FOR has passed, each
// wait logged to stderr with the sessions it waited behind.
func runMigrate(ctx context.Context, stdout, stderr io.Writer) error {
	env, err := config.LoadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := config.RequireDatabaseURL(env); err != nil {
		return err
	}
	if err := config.RefuseTxPoolingMigrations(env, "radar migrate"); err != nil {
		return err
	}
	logger := observability.NewLogger(stderr, env.LogFormat, slog.LevelInfo).With(slog.String("role", "migrate"))
	// Migrate opens its connections with this pool's configuration plus
	// lock_timeout (so at most 2 more), and looks at pg_locks from this pool
	// while one waits: 4 connections in all, as before. pg_stat_activity
	// shows them as "radar migrate" unless DATABASE_URL or PGAPPNAME names
	// them.
	pool, err := dbpool.Open(ctx, env.DatabaseURL, 2, 0, false, config.SessionLimits{AppName: "radar migrate"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Migrate(ctx, pool, env.MigrateConfig(logger)); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "migrations applied; schema is current")
	return nil
}
