// Package migrations holds the embedded schema of buildrisk-radar and applies
// it: River's own tables through rivermigrate, then the application's tables
// through goose. It must not know anything about jobs or HTTP.
//
// Both run under a short lock_timeout and are retried after a lock timeout
// (Migrate), so that a migration behind a long read (a pg_dump) never
// queues the fleet's statements behind it for longer than that.
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
	"log/slog"
	"path"
	"time"

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

// Defaults of Config.
const (
	// LockTimeoutDefault is a few seconds: the statements of the api and the
	// workers that queue behind a migration's lock request wait no longer
	// than that, while a migration still gets past their own short
	// transactions.
	LockTimeoutDefault = 5 * time.Second

	// LockRetryForDefault is how long Migrate keeps trying by default: a
	// nightly pg_dump or a report's long read usually ends within it.
	LockRetryForDefault = 2 * time.Minute
)

// Config tunes Migrate; nil, or a zero field, is the default.
type Config struct {
	// LockTimeout is the lock_timeout of every session that applies a
	// migration, River's and the application's. A migration that waits
	// longer for a lock (an ALTER TABLE behind a long read) gives up its
	// place in the table's lock queue, so the fleet's statements queued
	// behind it go on, and is retried. Default LockTimeoutDefault.
	LockTimeout time.Duration

	// LockRetryFor bounds the retries after lock timeouts: no attempt starts
	// once it has passed since the first, and Migrate then fails with an
	// error naming the lock it waited for and who held it. The waits between
	// attempts start at half of LockTimeout and double up to four times
	// LockTimeout, so the fleet runs unhindered most of the time. Default
	// LockRetryForDefault.
	LockRetryFor time.Duration

	// Logger reports each lock timeout: the lock, the sessions holding it
	// (pid, mode, application_name, state, age and query) and when the next
	// attempt starts. Default slog.Default().
	Logger *slog.Logger

	// Application holds the application's goose migrations, SQL files at its
	// root. Default: the ones embedded in this package; a test gives them
	// with one of its own added.
	Application fs.FS
}

// withDefaults returns a copy of c (which may be nil) with its defaults
// filled in, or an error for a negative duration.
func (c *Config) withDefaults() (*Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.LockTimeout < 0 || out.LockRetryFor < 0 {
		return nil, fmt.Errorf("lock timeout %s and lock retry window %s must not be negative", out.LockTimeout, out.LockRetryFor)
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = LockTimeoutDefault
	}
	if out.LockRetryFor == 0 {
		out.LockRetryFor = LockRetryForDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out, nil
}

// Migrate applies every pending River and application migration. It is
// idempotent and safe to run from several processes at once.
//
// The migrations run on connections of their own, opened with pool's
// configuration plus config's lock_timeout, so that the setting never
// reaches pool's other users; pool itself serves the looks at pg_locks that
// tell what a waiting migration waits for. When a migration times out
// waiting for a lock (SQLSTATE 55P03, lock_not_available), Migrate tries
// again, as Config.LockRetryFor says. That is safe because every migration
// runs in a transaction of its own, its version recorded in the same
// transaction (rivermigrate wraps each version in one; goose does too, and no
// application migration opts out with NO TRANSACTION, as
// TestMigrations_EachRunsInATransaction checks): a lock timeout rolls the
// migration back whole, the ones before it stay committed, and the next
// attempt starts at the first one still pending.
func Migrate(ctx context.Context, pool *pgxpool.Pool, config *Config) error {
	config, err := config.withDefaults()
	if err != nil {
		return err
	}
	sessions := &sessionPIDs{}
	migrationPool, err := lockTimeoutPool(ctx, pool, config.LockTimeout, sessions)
	if err != nil {
		return err
	}
	defer migrationPool.Close()
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(migrationPool), nil)
	if err != nil {
		return fmt.Errorf("error creating river migrator: %w", err)
	}
	provider, closeDB, err := newProvider(migrationPool, config.Application)
	if err != nil {
		return err
	}
	defer closeDB()
	return retryLockTimeouts(ctx, pool, sessions, config, func(ctx context.Context) error {
		if _, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("error applying river migrations: %w", err)
		}
		if _, err := provider.Up(ctx); err != nil {
			// River's errors name the failed version; goose's only its number.
			if partial := (*goose.PartialError)(nil); errors.As(err, &partial) && partial.Failed != nil && partial.Failed.Source != nil {
				return fmt.Errorf("error applying application migration %s: %w", path.Base(partial.Failed.Source.Path), err)
			}
			return fmt.Errorf("error applying application migrations: %w", err)
		}
		return nil
	})
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
	provider, closeDB, err := newProvider(pool, nil)
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

// newProvider returns a goose provider of the migrations in sub (nil: the
// embedded ones) over pool, and the function that closes its connections.
func newProvider(pool *pgxpool.Pool, sub fs.FS) (*goose.Provider, func(), error) {
	if sub == nil {
		var err error
		if sub, err = fs.Sub(embedded, "goose"); err != nil {
			return nil, nil, fmt.Errorf("error reading embedded migrations: %w", err)
		}
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
