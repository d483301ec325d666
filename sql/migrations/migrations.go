// Package migrations holds the embedded schema of buildrisk-radar and applies
// it: River's own tables through rivermigrate, then the application's tables
// through goose. It must not know anything about jobs or HTTP.
//
// goose was chosen over tern and golang-migrate because it keeps up and down
// in one SQL file, reads from an embed.FS through a small Provider API, takes a
// PostgreSQL advisory lock so concurrent migrators are safe, and sqlc reads its
// files natively.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed goose/*.sql
var embedded embed.FS

// ErrSchemaBehind is returned by Check when either River's or the
// application's migrations are not all applied.
var ErrSchemaBehind = errors.New("database schema is behind: run `radar migrate`")

// Migrate applies every pending River and application migration. It is
// idempotent and safe to run from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("error creating river migrator: %w", err)
	}
	if _, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("error applying river migrations: %w", err)
	}
	provider, closeDB, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer closeDB()
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("error applying application migrations: %w", err)
	}
	return nil
}

// Check returns ErrSchemaBehind (wrapped with the detail) when a migration is
// pending, so that api and worker refuse to serve on an old schema.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("error creating river migrator: %w", err)
	}
	res, err := riverMigrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("error validating river migrations: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w (river: %v)", ErrSchemaBehind, res.Messages)
	}
	provider, closeDB, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer closeDB()
	hasPending, err := provider.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("error checking application migrations: %w", err)
	}
	if hasPending {
		return fmt.Errorf("%w (application migrations pending)", ErrSchemaBehind)
	}
	return nil
}

func newProvider(pool *pgxpool.Pool) (*goose.Provider, func(), error) {
	sub, err := fs.Sub(embedded, "goose")
	if err != nil {
		return nil, nil, fmt.Errorf("error reading embedded migrations: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, nil, fmt.Errorf("error creating migration locker: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("error creating migration provider: %w", err)
	}
	return provider, func() { _ = db.Close() }, nil
}
