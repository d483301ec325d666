package exposure_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// TestMain gives the package's tests their private PostgreSQL (sql/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// `radar dev` seeds an empty ledger deterministically from the fake
// upstream's universe, and never touches a ledger that has rows.
func TestSeedExposure(t *testing.T) {
	t.Parallel()
	companies := fakeupstream.New(fakeupstream.Config{Seed: 1}).Companies()
	first, second := pgtest.NewPool(t), pgtest.NewPool(t)
	n, err := exposure.Seed(context.Background(), first, companies)
	require.NoError(t, err)
	require.Greater(t, n, 1500)
	construction := 0
	for _, c := range companies {
		if c.Construction {
			construction++
		}
	}
	require.GreaterOrEqual(t, n, construction, "every construction company is in")
	_, err = exposure.Seed(context.Background(), second, companies)
	require.NoError(t, err)
	require.Equal(t, ledger(t, first), ledger(t, second), "deterministic")
	repaid := 0
	for _, amount := range ledger(t, first) {
		if amount == 0 {
			repaid++
		}
	}
	require.Positive(t, repaid, "some companies have repaid: not targets")

	// Every amount changed since (a ledger imported meanwhile).
	changed := ledger(t, first)
	for code := range changed {
		changed[code] = 1
	}
	testfactory.Exposure(context.Background(), t, first, changed)
	n, err = exposure.Seed(context.Background(), first, companies)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, countOf(t, first, `SELECT count(*) FROM exposure WHERE outstanding_krw <> 1`), "untouched")
}

func ledger(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT corp_code, outstanding_krw FROM exposure`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var code string
		var amount int64
		require.NoError(t, rows.Scan(&code, &amount))
		out[code] = amount
	}
	require.NoError(t, rows.Err())
	return out
}

func countOf(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}
