package pgtest

import (
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	url1, url2 := NewDatabase(t), NewDatabase(t)
	require.NotEqual(t, url1, url2)

	pool1, err := pgxpool.New(ctx, url1)
	require.NoError(t, err)
	t.Cleanup(pool1.Close)
	pool2 := NewPool(t)

	// Both carry the whole schema: River's and the application's.
	for _, pool := range []*pgxpool.Pool{pool1, pool2} {
		for _, table := range []string{"job_request", "river_job", "job_execution"} {
			var exists bool
			require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
			require.True(t, exists, "table %s missing", table)
		}
	}

	// What one test writes, the other does not see.
	_, err = pool1.Exec(ctx, "CREATE TABLE pgtest_marker (id int)")
	require.NoError(t, err)
	_, err = queries.New().ProviderCallBudgetLock(ctx, pool1, &queries.ProviderCallBudgetLockParams{Provider: "molit", Day: time.Now()})
	require.NoError(t, err)

	var marker bool
	require.NoError(t, pool2.QueryRow(ctx, "SELECT to_regclass('pgtest_marker') IS NOT NULL").Scan(&marker))
	require.False(t, marker)
	var budgets int
	require.NoError(t, pool2.QueryRow(ctx, "SELECT count(*) FROM provider_call_budget").Scan(&budgets))
	require.Zero(t, budgets)

	var name1, name2 string
	require.NoError(t, pool1.QueryRow(ctx, "SELECT current_database()").Scan(&name1))
	require.NoError(t, pool2.QueryRow(ctx, "SELECT current_database()").Scan(&name2))
	require.NotEqual(t, name1, name2)
}

func TestNewDatabaseDroppedAtCleanup(t *testing.T) {
	t.Parallel()

	var names [2]string
	t.Run("Inner", func(t *testing.T) {
		pool := NewPool(t)
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&names[0]))

		// A connection the test leaves open must not keep its database.
		conn, err := pgx.Connect(t.Context(), NewDatabase(t))
		require.NoError(t, err)
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&names[1]))
	})

	admin, err := pgx.Connect(t.Context(), AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(t.Context()) })
	for _, name := range names {
		var exists bool
		require.NoError(t, admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
		require.False(t, exists, "database %s not dropped", name)
	}
}

func TestNewDatabaseConcurrent(t *testing.T) {
	t.Parallel()

	for i := range 8 {
		t.Run(fmt.Sprintf("Clone%d", i), func(t *testing.T) {
			t.Parallel()

			pool := NewPool(t)
			var jobs int
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM river_job").Scan(&jobs))
			require.Zero(t, jobs)
		})
	}
}

func TestTemplateLocked(t *testing.T) {
	t.Parallel()

	h := get(t)
	templateURL, err := withDatabase(h.adminURL, h.template)
	require.NoError(t, err)
	_, err = pgx.Connect(t.Context(), templateURL)
	require.ErrorContains(t, err, "is not currently accepting connections")
}

func TestAdminURL(t *testing.T) {
	t.Parallel()

	adminURL := AdminURL(t)
	conn, err := pgx.Connect(t.Context(), adminURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	require.NoError(t, conn.Ping(t.Context()))

	if os.Getenv(EnvDatabaseURL) == "" {
		// Never a server that merely happens to run here.
		u, err := url.Parse(adminURL)
		require.NoError(t, err)
		require.NotEqual(t, "5432", u.Port())
		var dataDir string
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting('data_directory')").Scan(&dataDir))
		require.Contains(t, dataDir, "buildrisk-pglocal-")
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()

	got, err := withDatabase("postgres://u:p%40ss@db.example:6543/postgres?sslmode=require", "radar_test_1")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p%40ss@db.example:6543/radar_test_1?sslmode=require", got)

	got, err = withDatabase("postgresql://localhost", "x")
	require.NoError(t, err)
	require.Equal(t, "postgresql://localhost/x", got)

	got, err = withDatabase("host=localhost dbname=postgres", "x")
	require.NoError(t, err)
	config, err := pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, "x", config.Database)
}

func TestRedact(t *testing.T) {
	t.Parallel()

	require.Equal(t, "postgres://u:xxxxx@h/db", redact("postgres://u:secret@h/db"))
	require.Equal(t, "the database", redact("host=h password=secret"))
}

// BenchmarkNewDatabase measures cloning the template; the databases are
// dropped at the end.
func BenchmarkNewDatabase(b *testing.B) {
	get(b) // set up outside the measurement
	for b.Loop() {
		NewDatabase(b)
	}
}
