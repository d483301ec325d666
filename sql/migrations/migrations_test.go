package migrations_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgtest"
)

// TestMain gives the package's tests their private PostgreSQL (sql/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// waitDeadline bounds every wait of these tests for something the database
// does; only a test that fails ever waits that long.
const waitDeadline = 30 * time.Second

// alterJobExecution is a migration after every real one that needs
// job_execution's ACCESS EXCLUSIVE lock, like the ALTER TABLE that queued
// the fleet behind a pg_dump held open for 30 s.
const alterJobExecution = `-- +goose Up
ALTER TABLE job_execution ADD COLUMN lock_test text;

-- +goose Down
ALTER TABLE job_execution DROP COLUMN lock_test;
`

// withAlterJobExecution returns the application's migrations followed by
// alterJobExecution, the only one pending on a pgtest database.
func withAlterJobExecution(t *testing.T) fs.FS {
	t.Helper()

	fsys := fstest.MapFS{}
	paths, err := filepath.Glob(filepath.Join("goose", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		fsys[filepath.Base(path)] = &fstest.MapFile{Data: data}
	}
	fsys["99999_lock_test.sql"] = &fstest.MapFile{Data: []byte(alterJobExecution)}
	return fsys
}

// Every application migration runs in a transaction of its own (goose's
// default, which no file turns off): a lock timeout rolls back the whole
// migration, and Migrate's retry starts it again from scratch.
func TestMigrations_EachRunsInATransaction(t *testing.T) {
	t.Parallel()

	paths, err := filepath.Glob(filepath.Join("goose", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NotContains(t, string(data), "NO TRANSACTION", "%s: Migrate's retry after a lock timeout needs every migration in a transaction", path)
	}
}

// While a long read transaction (a pg_dump) holds job_execution, the
// migration that must alter it waits at most its lock_timeout, so the
// fleet's statements queued behind it get through; it retries, and succeeds
// once the reader is gone, having logged who it waited on.
func TestMigrate_LockTimeoutLetsTheFleetThrough(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	pool := pgtest.NewPool(t)
	readerPID, commitReader := holdReader(t, pool, "job_execution")
	logs := &syncBuffer{}
	done := migrate(t, pool, &migrations.Config{
		LockTimeout:  500 * time.Millisecond,
		LockRetryFor: 10 * time.Minute, // the test ends it by committing the reader
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		Application:  withAlterJobExecution(t),
	})

	// A heartbeat's UPDATE of job_execution, sent while the ALTER waits,
	// queues behind it; it may also slip in between two attempts, so it is
	// sent again until it was seen queued behind the ALTER.
	for queued := false; !queued; {
		waitFor(t, "the migration to wait for job_execution", func() bool { return waitingFor(t, pool, "job_execution") })
		victim, err := pool.Acquire(ctx)
		require.NoError(t, err)
		victimPID := victim.Conn().PgConn().PID()
		result := make(chan error, 1)
		go func() {
			defer victim.Release()
			_, err := victim.Exec(ctx, "UPDATE job_execution SET last_updated = now() WHERE id = -1")
			result <- err
		}()
		finished := func() bool {
			select {
			case err := <-result:
				require.NoError(t, err)
				return true
			default:
				return false
			}
		}
		var through bool
		waitFor(t, "the UPDATE to finish or queue behind the migration", func() bool {
			if through = finished(); through {
				return true
			}
			queued = blockedByMigrationOf(t, pool, victimPID, "job_execution")
			return queued
		})
		if queued && !through {
			// The reader still holds job_execution: only the migration
			// giving up its place in the lock queue lets the UPDATE run.
			waitFor(t, "the UPDATE queued behind the migration to get through (without a lock_timeout it waits for the reader)", finished)
		}
	}

	// Each wait is logged with the session it waited on.
	waitFor(t, "a logged lock wait naming the reader", func() bool {
		out := logs.String()
		return strings.Contains(out, fmt.Sprintf("pid %d", readerPID)) && strings.Contains(out, "job_execution")
	})

	commitReader()
	require.NoError(t, waitResult(t, done))
	var columns int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'job_execution' AND column_name = 'lock_test'").Scan(&columns))
	require.Equal(t, 1, columns, "the migration was applied")
	require.Contains(t, logs.String(), "AccessShareLock", "the log names the lock the reader holds")
}

// With the reader never committing, Migrate gives up once its retries have
// taken LockRetryFor, with an error naming the lock wait, and leaves nothing
// of the migration behind.
func TestMigrate_GivesUpNamingTheLockWait(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	pool := pgtest.NewPool(t)
	readerPID, _ := holdReader(t, pool, "job_execution")
	done := migrate(t, pool, &migrations.Config{
		LockTimeout:  200 * time.Millisecond,
		LockRetryFor: time.Second,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
		Application:  withAlterJobExecution(t),
	})

	err := waitResult(t, done)
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available")
	require.ErrorContains(t, err, "gave up")
	require.ErrorContains(t, err, "lock timeout")
	require.ErrorContains(t, err, "99999_lock_test.sql", "the error names the migration")
	// It names the lock and its holder too when a look at pg_locks caught a
	// wait, which is all but certain (four looks per lock_timeout, in each
	// attempt) but not a matter of order.
	if !strings.Contains(err.Error(), "the waits ended between two looks") {
		require.ErrorContains(t, err, "AccessExclusiveLock on relation job_execution")
		require.ErrorContains(t, err, fmt.Sprintf("pid %d (holds AccessShareLock", readerPID))
	}
	var columns, versions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'job_execution' AND column_name = 'lock_test'").Scan(&columns))
	require.Zero(t, columns, "the migration was rolled back")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id = 99999").Scan(&versions))
	require.Zero(t, versions, "the migration is still pending")
}

// River's migrations run on the same protected sessions: with River one
// version behind the one that alters river_job and a reader holding
// river_job, Migrate waits, logs the wait, and succeeds once the reader is
// gone.
func TestMigrate_RiverMigrationsWaitNoLongerThanTheLockTimeout(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	pool := pgtest.NewPool(t)
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	require.NoError(t, err)
	// Version 007 alters river_job (ALTER COLUMN max_attempts SET DEFAULT).
	_, err = riverMigrator.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: 6})
	require.NoError(t, err)

	readerPID, commitReader := holdReader(t, pool, "river_job")
	logs := &syncBuffer{}
	done := migrate(t, pool, &migrations.Config{
		LockTimeout:  500 * time.Millisecond,
		LockRetryFor: 10 * time.Minute, // the test ends it by committing the reader
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	waitFor(t, "a logged lock wait naming river_job's reader", func() bool {
		out := logs.String()
		return strings.Contains(out, fmt.Sprintf("pid %d", readerPID)) && strings.Contains(out, "river_job")
	})

	commitReader()
	require.NoError(t, waitResult(t, done))
	res, err := riverMigrator.Validate(ctx, nil)
	require.NoError(t, err)
	require.True(t, res.OK, "river's migrations are all applied: %v", res.Messages)
}

// holdReader opens a transaction that reads table, like a pg_dump, holding
// its ACCESS SHARE lock until commit is called or the test ends; it returns
// the reader's backend pid.
func holdReader(t *testing.T, pool *pgxpool.Pool, table string) (pid uint32, commit func()) {
	t.Helper()

	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT count(*) FROM "+table)
	require.NoError(t, err)
	var once sync.Once
	end := func(commit bool) {
		once.Do(func() {
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				_ = tx.Rollback(context.Background())
			}
			conn.Release()
		})
	}
	t.Cleanup(func() { end(false) })
	return conn.Conn().PgConn().PID(), func() { end(true) }
}

// migrate runs Migrate in the background and returns its result's channel.
// It is waited for at the end of the test, after the test's context is
// canceled.
func migrate(t *testing.T, pool *pgxpool.Pool, config *migrations.Config) <-chan error {
	t.Helper()

	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- migrations.Migrate(t.Context(), pool, config)
	}()
	t.Cleanup(func() { <-finished })
	return done
}

// waitResult waits for Migrate's result.
func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()

	select {
	case err := <-done:
		return err
	case <-time.After(waitDeadline):
		t.Fatalf("migrate has not returned after %s", waitDeadline)
		return nil
	}
}

// waitingFor reports whether a session waits for an ACCESS EXCLUSIVE lock
// on table, as a migration altering it does.
func waitingFor(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()

	var waiting bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (
		SELECT FROM pg_locks
		WHERE locktype = 'relation' AND relation = $1::regclass
		  AND mode = 'AccessExclusiveLock' AND NOT granted)`, table).Scan(&waiting))
	return waiting
}

// blockedByMigrationOf reports whether backend pid waits behind a session
// that waits for an ACCESS EXCLUSIVE lock on table.
func blockedByMigrationOf(t *testing.T, pool *pgxpool.Pool, pid uint32, table string) bool {
	t.Helper()

	var blocked bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (
		SELECT FROM pg_locks
		WHERE pid = ANY (pg_blocking_pids($1))
		  AND locktype = 'relation' AND relation = $2::regclass
		  AND mode = 'AccessExclusiveLock' AND NOT granted)`, int32(pid), table).Scan(&blocked))
	return blocked
}

// waitFor polls cond until it holds, and fails the test past waitDeadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitDeadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer that a logger writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
