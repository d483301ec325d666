package coverage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/catalog/coverage"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
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
	incomplete := &catalog.Spec[struct{}]{JobName: "half", Desc: "a job whose coverage has no queries",
		CoverageDef: &catalog.Coverage{Targets: "t", Current: "c", DataDate: catalog.DayIn}}
	_, err := coverage.New(nil, coverage.Config{Catalog: catalog.NewCatalog(incomplete)})
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
	day, err := time.Parse(time.DateOnly, thursday)
	require.NoError(t, err)
	dayBefore := day.AddDate(0, 0, -1)
	ledger := map[string]int64{}
	for g := 1; g <= 12; g++ {
		owed := int64(g)
		if g > 10 {
			owed = 0 // repaid: not a target
		}
		ledger[fmt.Sprintf("%08d", g)] = owed
	}
	testfactory.Exposure(ctx, t, pool, ledger)
	for g := 1; g <= 7; g++ {
		testfactory.CreditGrade(ctx, t, pool, &testfactory.CreditGradeOpts{CorpCode: fmt.Sprintf("%08d", g), EvalDate: day, ExecutionID: 1})
	}
	testfactory.CreditGrade(ctx, t, pool, &testfactory.CreditGradeOpts{CorpCode: "00000008", EvalDate: dayBefore, ExecutionID: 1})
	testfactory.CreditGrade(ctx, t, pool, &testfactory.CreditGradeOpts{CorpCode: "00000011", EvalDate: day, ExecutionID: 1})
	for _, c := range []testfactory.CompanyOpts{
		{CorpCode: "10000001", StockCode: "000001"}, {CorpCode: "10000002", StockCode: "000002"}, {CorpCode: "10000003", StockCode: "000003"},
		{CorpCode: "10000004", StockCode: "000004"}, {CorpCode: "10000005"}, {CorpCode: "10000006", StockCode: "000006", Untracked: true},
	} {
		c.ExecutionID = 1
		testfactory.Company(ctx, t, pool, &c)
	}
	for _, code := range []string{"000001", "000003", "000004", "000006"} {
		testfactory.StockPrice(ctx, t, pool, &testfactory.StockPriceOpts{ShortCode: code, TradeDate: day, ExecutionID: 1})
	}
	for _, corp := range []string{"10000001", "10000002", "10000003", "10000005"} {
		testfactory.RiskMetric(ctx, t, pool, corp, day, 1)
	}
	testfactory.RiskRuleCheck(ctx, t, pool, "10000001", day, 1)
	testfactory.RiskRuleCheck(ctx, t, pool, "10000005", day, 1)
	testfactory.RiskRuleCheck(ctx, t, pool, "10000002", dayBefore, 1)

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
	testfactory.Exposure(ctx, t, pool, map[string]int64{"00000001": 5})
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
	testfactory.Exposure(ctx, t, pool, map[string]int64{"00000002": 5})
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
