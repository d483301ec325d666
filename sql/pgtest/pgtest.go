// Package pgtest gives every test its own PostgreSQL database, cloned from a
// template migrated once per test binary. It is meant for _test.go files
// only:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.NewPool(t) // fresh database with the full schema
//		...
//	}
//
// The server is the one TEST_DATABASE_URL names (its role must be allowed to
// CREATE DATABASE; PostgreSQL 13 or later), or else a private cluster started
// with pglocal for this test binary. A server that merely happens to run on
// this machine is never used.
//
// The server and the template are set up on the first NewDatabase, NewPool or
// AdminURL call, so a test binary whose selected tests need no database (say
// `go test -run TestParse`) pays nothing. Cloning a template is a file copy,
// much faster than migrating each database.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pglocal"
)

// EnvDatabaseURL names the environment variable holding the URL of a server
// to create test databases on instead of starting a local cluster. It must
// point at a maintenance database (typically `postgres`) as a role that may
// create databases.
const EnvDatabaseURL = "TEST_DATABASE_URL"

const (
	// setupTimeout bounds starting the server and migrating the template.
	setupTimeout = 2 * time.Minute

	// dropTimeout bounds dropping one database at cleanup.
	dropTimeout = 30 * time.Second

	// signalTeardownTimeout bounds the cleanup done when the test binary is
	// interrupted, after which it exits anyway.
	signalTeardownTimeout = 20 * time.Second
)

var (
	// mainCalled records that Main runs this test binary.
	mainCalled atomic.Bool

	// mu guards current and its setup and teardown.
	mu sync.Mutex
	// current is the harness of this test binary, set up on first use.
	current *harness
	// setupErr is the error of the failed setup, returned from then on.
	setupErr error
	// tornDown is set once Main has torn the harness down.
	tornDown bool
)

// harness is the server and the template of one test binary.
type harness struct {
	adminURL string
	cluster  *pglocal.Cluster // nil with TEST_DATABASE_URL
	admin    *pgxpool.Pool    // connections to the maintenance database

	// template is the migrated database every test database is cloned from;
	// nobody may be connected to it while it is cloned.
	template string
	// cloneOptions ends every CREATE DATABASE ... TEMPLATE statement.
	cloneOptions string
	// namePrefix starts the name of every test database of this binary.
	namePrefix string
	// seq numbers test databases.
	seq atomic.Int64
	// cloneMu serializes CREATE DATABASE ... TEMPLATE: PostgreSQL rejects a
	// clone while another session, including another clone, uses the
	// template.
	cloneMu sync.Mutex
}

// Main is called from a package's TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// It runs the tests and, once they are done, drops what it created on a
// TEST_DATABASE_URL server or stops the local cluster, then exits with the
// tests' exit code. On SIGINT or SIGTERM it cleans up the same way before
// exiting. The server and the template database (named
// radar_tmpl_<pid>_<random>) are set up lazily, by the first test that needs
// them.
func Main(m *testing.M) {
	mainCalled.Store(true)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "pgtest: %s received, cleaning up\n", sig)
		done := make(chan struct{})
		go func() {
			if err := teardown(); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(signalTeardownTimeout):
		}
		os.Exit(1)
	}()

	code := m.Run()

	signal.Stop(signals)
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	// Like River's test mains: a goroutine still running after every test
	// and its cleanups is a leak (an unstopped worker, pool or server).
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/buildrisk/radar/sql/pgtest.Main.func1"),
			goleak.IgnoreTopFunction("os/signal.signal_recv"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase creates a fresh database, a clone of the migrated template, and
// returns its URL. The database is dropped at the end of the test (WITH
// (FORCE), so connections left open do not matter).
func NewDatabase(t testing.TB) string {
	t.Helper()

	h := get(t)
	name := fmt.Sprintf("%s_%d", h.namePrefix, h.seq.Add(1))
	databaseURL, err := withDatabase(h.adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	ctx := t.Context()
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{h.template}.Sanitize() + h.cloneOptions
	h.cloneMu.Lock()
	_, err = h.admin.Exec(ctx, create)
	h.cloneMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: error creating database %s: %v", name, err)
	}

	t.Cleanup(func() {
		// The test's context is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if err := dropDatabase(ctx, h.admin, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return databaseURL
}

// NewPool creates a fresh database like NewDatabase and returns a pool
// connected to it, closed at the end of the test (before the database is
// dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()

	databaseURL := NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), databaseURL)
	if err != nil {
		t.Fatalf("pgtest: error creating pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// AdminURL returns the URL of the server's maintenance database, for tests
// that need to act on the server itself, such as terminating connections.
// Tests must not use it to connect to the template.
func AdminURL(t testing.TB) string {
	t.Helper()

	return get(t).adminURL
}

// get returns the harness, setting it up on first use, or fails the test.
func get(t testing.TB) *harness {
	t.Helper()

	if !mainCalled.Load() {
		t.Fatal("pgtest: Main was not called: add `func TestMain(m *testing.M) { pgtest.Main(m) }` to the package's tests")
	}

	mu.Lock()
	defer mu.Unlock()
	switch {
	case tornDown:
		t.Fatal("pgtest: used after Main finished")
	case current != nil:
		return current
	case setupErr != nil:
		t.Fatalf("pgtest: %v", setupErr) // the first test reported it in full
	}

	h, timing, err := setup()
	if err != nil {
		setupErr = err
		t.Fatalf("pgtest: %v", err)
	}
	current = h
	t.Logf("pgtest: %s", timing)
	return h
}

// setup starts or connects to the server and creates the migrated template.
// It returns a line describing what it did and how long it took.
func setup() (*harness, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	suffix := randomSuffix()
	h := &harness{
		template:   fmt.Sprintf("radar_tmpl_%d_%s", os.Getpid(), suffix),
		namePrefix: fmt.Sprintf("radar_test_%d_%s", os.Getpid(), suffix),
	}

	var timing strings.Builder
	begin := time.Now()
	if h.adminURL = os.Getenv(EnvDatabaseURL); h.adminURL != "" {
		fmt.Fprintf(&timing, "using the server of %s;", EnvDatabaseURL)
	} else {
		var err error
		var logger *slog.Logger
		if testing.Verbose() {
			logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		h.cluster, err = pglocal.Start(ctx, pglocal.Config{Logger: logger})
		if err != nil {
			return nil, "", fmt.Errorf("error starting local postgres (or set %s): %w", EnvDatabaseURL, err)
		}
		h.adminURL = h.cluster.URL("postgres")
		fmt.Fprintf(&timing, "local postgres on port %d started in %s;", h.cluster.Port(), time.Since(begin).Round(time.Millisecond))
	}

	templateBegin := time.Now()
	if err := h.createTemplate(ctx); err != nil {
		if closeErr := h.close(context.Background()); closeErr != nil {
			err = errors.Join(err, closeErr)
		}
		return nil, "", err
	}
	fmt.Fprintf(&timing, " template %s created and migrated in %s; setup took %s",
		h.template, time.Since(templateBegin).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return h, timing.String(), nil
}

// createTemplate connects to the maintenance database, creates the template
// and migrates it, leaving no connection to it open.
func (h *harness) createTemplate(ctx context.Context) error {
	var err error
	if h.admin, err = pgxpool.New(ctx, h.adminURL); err != nil {
		return fmt.Errorf("error connecting to %s: %w", redact(h.adminURL), err)
	}
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{h.template}.Sanitize()); err != nil {
		return fmt.Errorf("error creating template database on %s: %w", redact(h.adminURL), err)
	}

	templateURL, err := withDatabase(h.adminURL, h.template)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, templateURL)
	if err != nil {
		return fmt.Errorf("error connecting to template database: %w", err)
	}
	err = migrations.Migrate(ctx, pool, nil)
	// Close returns once every connection is closed: CREATE DATABASE ...
	// TEMPLATE fails while anyone is connected to the template.
	pool.Close()
	if err != nil {
		return fmt.Errorf("error migrating template database: %w", err)
	}

	// From now on nobody can connect to the template by mistake.
	if _, err := h.admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{h.template}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("error locking template database: %w", err)
	}

	// On our own cluster, copying the files (with a checkpoint, cheap without
	// fsync) clones about twice as fast as PostgreSQL 15's default WAL_LOG
	// strategy. A server given by TEST_DATABASE_URL keeps its default.
	if h.cluster != nil {
		var version int
		if err := h.admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
			return fmt.Errorf("error querying server version: %w", err)
		}
		if version >= 150000 {
			h.cloneOptions = " STRATEGY FILE_COPY"
		}
	}
	return nil
}

// teardown drops what the harness created and stops the local cluster. It is
// idempotent, and waits for a setup in progress.
func teardown() error {
	mu.Lock()
	defer mu.Unlock()
	tornDown = true
	h := current
	current = nil
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return h.close(ctx)
}

// close releases everything the harness holds. On a local cluster, stopping
// it removes every database at once; on a TEST_DATABASE_URL server, the
// template and any test database left behind are dropped.
func (h *harness) close(ctx context.Context) error {
	var errs []error
	if h.cluster == nil && h.admin != nil {
		if err := h.dropAll(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if h.admin != nil {
		h.admin.Close()
	}
	if h.cluster != nil {
		if err := h.cluster.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("error stopping local postgres: %w", err))
		}
	}
	return errors.Join(errs...)
}

// dropAll drops the template and every test database of this test binary.
func (h *harness) dropAll(ctx context.Context) error {
	rows, err := h.admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname = $1 OR starts_with(datname, $2)", h.template, h.namePrefix+"_")
	if err != nil {
		return fmt.Errorf("error listing test databases: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("error listing test databases: %w", err)
	}
	var errs []error
	for _, name := range names {
		if err := dropDatabase(ctx, h.admin, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropDatabase drops database name, terminating its connections.
func dropDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("error dropping database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns connString with its database replaced by database. It
// accepts both URLs and keyword/value connection strings.
func withDatabase(connString, database string) (string, error) {
	if !strings.HasPrefix(connString, "postgres://") && !strings.HasPrefix(connString, "postgresql://") {
		// In a keyword/value string, the last occurrence of a keyword wins.
		return connString + " dbname=" + database, nil
	}
	u, err := url.Parse(connString)
	if err != nil {
		return "", fmt.Errorf("error parsing database url %s: %w", redact(connString), err)
	}
	u.Path = "/" + database
	u.RawPath = ""
	return u.String(), nil
}

// redact hides the password of a database URL for error messages.
func redact(connString string) string {
	u, err := url.Parse(connString)
	if err != nil || u.Scheme == "" {
		return "the database"
	}
	return u.Redacted()
}

// randomSuffix returns a short random hex string that keeps the databases of
// concurrent test binaries on one server apart.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// WaitServerUptime returns once the database server has been up for longer
// than d by its own clock, failing the test when it is not a minute past
// that. A reaper counts a heartbeat from the server's start at the earliest
// (a worker cannot beat while the server is down), so a worker is stale
// only on a server up for longer than the stale window; the cluster of a
// test binary may have just started.
func WaitServerUptime(t testing.TB, pool *pgxpool.Pool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d + time.Minute)
	for {
		var up bool
		if err := pool.QueryRow(context.Background(),
			`SELECT now() - pg_postmaster_start_time() > make_interval(secs => $1)`, d.Seconds()).Scan(&up); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: the database server is not up for %s after a minute more", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
