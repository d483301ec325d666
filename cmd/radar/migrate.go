package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/sql/migrations"
)

// runMigrate applies every pending migration; running it twice is a no-op.
func runMigrate(ctx context.Context, stdout io.Writer) error {
	env, err := app.LoadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := app.RequireDatabaseURL(env); err != nil {
		return err
	}
	if err := app.RefuseTxPoolingMigrations(env, "radar migrate"); err != nil {
		return err
	}
	pool, err := app.OpenPool(ctx, env.DatabaseURL, 4, 0, false, app.SessionLimits{})
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
