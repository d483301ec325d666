package stockprice_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool     *pgxpool.Pool
	fake     *fakeupstream.Server
	enqueuer *request.Owner
	runner   *batch.Runner
	// listed are the stock codes of the seeded listed tracked companies.
	listed []string
	// companies are the seeded companies.
	companies []*testfactory.CompanyOpts
}

// setup seeds the fake's construction companies as tracked (the listed ones
// are stockPrice's targets, plus one unlisted one, which is not) and builds
// a runner with the stockPrice job against the fake over real HTTP.
func setup(t *testing.T) *testBundle {
	t.Helper()

	ctx := context.Background()
	b := &testBundle{pool: pgtest.NewPool(t), fake: fakeupstream.New(fakeupstream.Config{})}
	server := httptest.NewServer(b.fake)
	t.Cleanup(server.Close)

	unlisted := false
	for _, c := range b.fake.Companies() {
		if !c.Construction || (c.StockCode == "" && unlisted) {
			continue
		}
		if c.StockCode != "" {
			b.listed = append(b.listed, c.StockCode)
		} else {
			unlisted = true
		}
		company := &testfactory.CompanyOpts{CorpCode: c.CorpCode, Name: c.Name, StockCode: c.StockCode}
		testfactory.Company(ctx, t, b.pool, company)
		b.companies = append(b.companies, company)
	}
	require.True(t, unlisted, "the fake has an unlisted construction company")
	require.Greater(t, len(b.listed), stockprice.ChunkSize, "more than one chunk")

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := upstream.NewClient(b.pool, upstream.ClientConfig{
		AllowHTTP:   true, // the fake upstream
		BaseURLs:    map[upstream.Provider]string{upstream.ProviderKRX: server.URL},
		Keys:        map[upstream.Provider]string{upstream.ProviderKRX: "test-krx-key"},
		Location:    time.UTC,
		Backoff:     time.Millisecond,
		MaxBackoff:  5 * time.Millisecond,
		Instruments: instruments,
	})
	require.NoError(t, err)
	b.enqueuer, err = request.NewOwner(b.pool, nil, request.Config{
		Catalog: catalog.NewCatalog(stockprice.Spec()), Instruments: instruments, Logger: logger,
		Estimators: map[string]request.EstimateFunc{stockprice.Name: stockprice.Estimate},
	})
	require.NoError(t, err)
	b.runner, err = batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{stockprice.Name: stockprice.Job{}},
		Upstream: client, Instruments: instruments, Logger: logger,
	})
	require.NoError(t, err)
	return b
}

// run enqueues a stockPrice request for date and runs it to its end. It
// returns the execution and the request's estimate.
func (b *testBundle) run(t *testing.T, date string) (*queries.JobExecution, int) {
	t.Helper()

	ctx := context.Background()
	res, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: stockprice.Name, Source: radartype.SourceCLI, Params: []byte(`{"date":"` + date + `"}`)})
	require.NoError(t, err)
	out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: res.Request.ID})
	require.NoError(t, err)
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	return exec, res.EstimatedCalls
}

func (b *testBundle) prices(t *testing.T) int64 {
	t.Helper()

	var n int64
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM stock_price").Scan(&n))
	return n
}

// On a trading day every listed tracked company is asked once, unlisted
// ones never, and every company is accounted for: its price written, or
// skipped when KRX reports no trading for it.
func TestStockPrice_TradingDayOneCallPerListedCompany(t *testing.T) {
	t.Parallel()

	b := setup(t)
	exec, estimate := b.run(t, "2025-03-14") // a Friday

	require.Equal(t, "COMPLETED", exec.Status, exec.ExitMessage)
	require.Equal(t, len(b.listed), estimate)
	require.EqualValues(t, len(b.listed), exec.ExternalCalls)
	calls := b.fake.Stats().Calls[fakeupstream.EndpointStockPrice]
	require.Len(t, calls, len(b.listed))
	for _, code := range b.listed {
		require.EqualValues(t, 1, calls[code+":20250314"], "calls of %s", code)
	}

	rows := b.prices(t)
	require.Positive(t, rows)
	require.Equal(t, rows, exec.ItemsWritten)
	require.EqualValues(t, len(b.listed), exec.ItemsWritten+exec.ItemsSkipped)
	require.Zero(t, exec.ItemsFailed)
	require.NotNil(t, exec.DomainRows)
	require.Equal(t, rows, *exec.DomainRows)
}

// A weekend costs no call: the estimate is 0 and every company is skipped.
func TestStockPrice_WeekendCallsNothing(t *testing.T) {
	t.Parallel()

	b := setup(t)
	exec, estimate := b.run(t, "2025-03-15") // a Saturday

	require.Equal(t, "COMPLETED", exec.Status, exec.ExitMessage)
	require.Zero(t, estimate)
	require.Zero(t, b.fake.Stats().Total)
	require.EqualValues(t, len(b.listed), exec.ItemsSkipped)
	require.Zero(t, b.prices(t))
}

// A holiday on a weekday is not a failure: KRX answers every company with
// no items, and each is skipped.
func TestStockPrice_HolidaySkipsEveryCompany(t *testing.T) {
	t.Parallel()

	b := setup(t)
	exec, _ := b.run(t, "2025-05-05") // Children's Day, a Monday

	require.Equal(t, "COMPLETED", exec.Status, exec.ExitMessage)
	require.EqualValues(t, len(b.listed), b.fake.Stats().Total)
	require.EqualValues(t, len(b.listed), exec.ItemsSkipped)
	require.Zero(t, exec.ItemsWritten)
	require.Zero(t, b.prices(t))
}

// Without a listed tracked company the run fails at its plan, saying what
// to run first.
func TestStockPrice_NoCompaniesFails(t *testing.T) {
	t.Parallel()

	b := setup(t)
	for _, c := range b.companies {
		c.Untracked = true
		testfactory.Company(context.Background(), t, b.pool, c)
	}
	exec, _ := b.run(t, "2025-03-14")

	require.Equal(t, "FAILED", exec.Status)
	require.Contains(t, exec.ExitMessage, stockprice.ErrNoCompanies.Error())
	require.Zero(t, b.fake.Stats().Total)
}
