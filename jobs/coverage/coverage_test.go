package coverage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/coverage"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// seoul is the jobs' default zone.
var seoul = func() *time.Location {
	loc, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		panic(err)
	}
	return loc
}()

// A Wednesday, 23:30 UTC: already Thursday in Seoul, so every data date is
// Seoul's day, not the process's.
var wednesdayNight = time.Date(2026, 12, 2, 23, 30, 0, 0, time.UTC)

// newReader returns a Reader over pool of every job in the catalog.
func newReader(t *testing.T, pool queries.DBTX, cfg coverage.Config) *coverage.Reader {
	t.Helper()
	cfg.Catalog = jobset.Catalog()
	r, err := coverage.New(pool, cfg)
	require.NoError(t, err)
	return r
}

// The catalog is what says which jobs have coverage: a Reader without
// one is refused.
func TestReader_CatalogRequired(t *testing.T) {
	t.Parallel()
	_, err := coverage.New(nil, coverage.Config{})
	require.ErrorContains(t, err, "Catalog is required")
}

// A coverage definition carries the queries that count it: one without
// them is refused when the Reader is made, not at the first scrape.
func TestReader_CoverageDefinitionNeedsItsQueries(t *testing.T) {
	t.Parallel()
	incomplete := &jobs.Spec[struct{}]{JobName: "half", Desc: "a job whose coverage has no queries",
		CoverageDef: &jobs.Coverage{Targets: "t", Current: "c", DataDate: jobs.DayIn}}
	_, err := coverage.New(nil, coverage.Config{Catalog: jobs.NewCatalog(incomplete)})
	require.ErrorContains(t, err, "job half: a coverage definition needs DataDate, Count and Missing")
}

func TestReader_CountsEachJobFromTheDomainTables(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	thursday := "2026-12-03"
	// creditEval: 10 targets, 2 companies with nothing owed; 7 targets
	// graded on the day, 1 only the day before, 1 non-target graded.
	// stockPrice: 4 listed tracked, 1 unlisted tracked, 1 listed untracked;
	// 3 priced on the day. metrics: 5 tracked, 4 with metrics on the day.
	// rules: of those 4, 2 checked on the day, 1 the day before.
	_, err := pool.Exec(ctx, strings.ReplaceAll(`
INSERT INTO exposure (corp_code, outstanding_krw) SELECT lpad(g::text, 8, '0'), CASE WHEN g > 10 THEN 0 ELSE g END FROM generate_series(1, 12) g;
INSERT INTO credit_grade (corp_code, eval_date, grade, source, execution_id)
SELECT lpad(g::text, 8, '0'), $1::date, 'A', 'lookup', 1 FROM generate_series(1, 7) g;
INSERT INTO credit_grade (corp_code, eval_date, grade, source, execution_id) VALUES ('00000008', $1::date - 1, 'A', 'lookup', 1), ('00000011', $1::date, 'A', 'lookup', 1);
INSERT INTO company (corp_code, name, stock_code, tracked, execution_id) VALUES
  ('10000001', 'a', '000001', true, 1), ('10000002', 'b', '000002', true, 1), ('10000003', 'c', '000003', true, 1),
  ('10000004', 'd', '000004', true, 1), ('10000005', 'e', NULL, true, 1), ('10000006', 'f', '000006', false, 1);
INSERT INTO stock_price (short_code, trade_date, corp_code, close, open, high, low, volume, market_cap, execution_id)
SELECT s, $1::date, 'x', 1, 1, 1, 1, 1, 1, 1 FROM unnest(ARRAY['000001', '000003', '000004', '000006']) s;
INSERT INTO risk_metric (corp_code, metric_date, execution_id) SELECT c, $1::date, 1 FROM unnest(ARRAY['10000001', '10000002', '10000003', '10000005']) c;
INSERT INTO risk_rule_check (alert_date, corp_code, execution_id) VALUES ($1::date, '10000001', 1), ($1::date, '10000005', 1), ($1::date - 1, '10000002', 1);
`, "$1", "'"+thursday+"'"))
	require.NoError(t, err)

	r := newReader(t, pool, coverage.Config{Location: seoul, Now: func() time.Time { return wednesdayNight }})
	require.Equal(t, []string{stockprice.Name, credit.Name, riskmetric.Name, riskrule.Name}, r.Jobs())
	snap, err := r.Snapshot(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for _, c := range snap {
		got[c.Job] = fmt.Sprintf("%s %d/%d missing %d", c.DataDate.Format(time.DateOnly), c.Current, c.Targets, c.Missing())
		require.Equal(t, wednesdayNight, c.AsOf)
	}
	require.Equal(t, map[string]string{
		credit.Name:     thursday + " 7/10 missing 3",
		stockprice.Name: thursday + " 3/4 missing 1",
		riskmetric.Name: thursday + " 4/5 missing 1",
		riskrule.Name:   thursday + " 2/4 missing 2",
	}, got)

	missing := func(job, after string, limit int) []string {
		codes, _, err := r.Missing(ctx, job, after, limit)
		require.NoError(t, err)
		return codes
	}
	require.Equal(t, []string{"00000008", "00000009"}, missing(credit.Name, "", 2))
	require.Equal(t, []string{"00000010"}, missing(credit.Name, "00000009", 2))
	require.Equal(t, []string{"000002"}, missing(stockprice.Name, "", 10))
	require.Equal(t, []string{"10000004"}, missing(riskmetric.Name, "", 10))
	require.Equal(t, []string{"10000002", "10000003"}, missing(riskrule.Name, "", 10))
	_, _, err = r.Missing(ctx, apttrade.Name, "", 10)
	require.ErrorIs(t, err, coverage.ErrNoCoverage)
}

// Counts are served from the cache for MaxAge, then counted again.
func TestReader_SnapshotCachedForMaxAge(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO exposure (corp_code, outstanding_krw) VALUES ('00000001', 5)`)
	require.NoError(t, err)
	now := wednesdayNight
	r := newReader(t, pool, coverage.Config{Location: seoul, MaxAge: time.Minute, Now: func() time.Time { return now }})
	creditEval := func() *coverage.Job {
		snap, err := r.Snapshot(ctx)
		require.NoError(t, err)
		for _, c := range snap {
			if c.Job == credit.Name {
				return c
			}
		}
		t.Fatal("no creditEval coverage")
		return nil
	}
	require.Equal(t, int64(1), creditEval().Targets)
	_, err = pool.Exec(ctx, `INSERT INTO exposure (corp_code, outstanding_krw) VALUES ('00000002', 5)`)
	require.NoError(t, err)
	now = now.Add(59 * time.Second)
	require.Equal(t, int64(1), creditEval().Targets, "cached")
	now = now.Add(time.Second)
	c := creditEval()
	require.Equal(t, int64(2), c.Targets, "counted again")
	require.Equal(t, now, c.AsOf)
}

// A count that cannot run is told to OnError and is not cached.
func TestReader_FailedCountReported(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var failed []string
	r := newReader(t, pool, coverage.Config{Location: seoul, OnError: func(_ context.Context, job string, _ error) { failed = append(failed, job) }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Snapshot(ctx)
	require.Error(t, err)
	require.ElementsMatch(t, []string{stockprice.Name, credit.Name, riskmetric.Name, riskrule.Name}, failed)
	snap, err := r.Snapshot(context.Background())
	require.NoError(t, err)
	require.Len(t, snap, 4)
}
