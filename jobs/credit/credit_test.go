package credit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/credit"
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

// testChunkSize is the chunk size of the runner setup builds: a few
// thousand targets then make several chunks.
const testChunkSize = 1000

var seoul = func() *time.Location {
	loc, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		panic(err)
	}
	return loc
}()

type testBundle struct {
	pool        *pgxpool.Pool
	fake        *fakeupstream.Server
	fakeURL     string
	providers   *observability.Providers
	instruments *observability.Instruments
	enqueuer    *request.Owner
	runner      *batch.Runner
	client      *upstream.Client
	// targets are the seeded companies with exposure > 0, sorted.
	targets []string
	now     atomic.Pointer[time.Time]
}

type setupOpts struct {
	targets int
	fake    fakeupstream.Config
	fanOut  int
}

// setup seeds `targets` companies of the fake's universe into the exposure
// ledger (plus one repaid company, which is not a target) and builds the
// runner with a creditEval job against the fake over HTTP.
func setup(tb testing.TB, opts setupOpts) *testBundle {
	tb.Helper()
	ctx := context.Background()
	b := &testBundle{pool: pgtest.NewPool(tb)}
	now := time.Now()
	b.now.Store(&now)

	opts.fake.Companies = max(opts.fake.Companies, opts.targets+1, fakeupstream.CompaniesDefault)
	b.fake = fakeupstream.New(opts.fake)
	server := httptest.NewServer(b.fake)
	tb.Cleanup(server.Close)
	b.fakeURL = server.URL

	var providers *observability.Providers
	providers, _ = observabilitytest.NewProviders()
	b.providers = providers
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(tb, err)
	b.instruments = instruments
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	urls := map[upstream.Provider]string{}
	for _, p := range upstream.Providers {
		urls[p] = server.URL
	}
	b.client, err = upstream.NewClient(b.pool, upstream.ClientConfig{
		BaseURLs: urls, Keys: map[upstream.Provider]string{upstream.ProviderCREDIT: "test-credit-key"},
		Location: seoul, Now: func() time.Time { return *b.now.Load() },
		Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Instruments: instruments,
		AllowHTTP: true,
	})
	require.NoError(tb, err)
	b.enqueuer, err = request.NewOwner(b.pool, nil, request.Config{
		Catalog: catalog.NewCatalog(credit.Spec()), Instruments: instruments, Logger: logger,
		Estimators: map[string]request.EstimateFunc{credit.Name: credit.Estimator(b.client.Today)},
	})
	require.NoError(tb, err)
	b.runner, err = batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{credit.Name: credit.NewSized(testChunkSize)},
		Upstream: b.client, Instruments: instruments, Logger: logger, FanOut: opts.fanOut,
	})
	require.NoError(tb, err)

	companies := b.fake.Companies()
	p := &queries.ExposureUpsertParams{}
	for _, c := range companies[:opts.targets] {
		p.CorpCodes = append(p.CorpCodes, c.CorpCode)
		p.OutstandingKrws = append(p.OutstandingKrws, 1_000_000)
		b.targets = append(b.targets, c.CorpCode)
	}
	repaid := companies[opts.targets].CorpCode
	p.CorpCodes = append(p.CorpCodes, repaid)
	p.OutstandingKrws = append(p.OutstandingKrws, 0)
	_, err = queries.New().ExposureUpsert(ctx, b.pool, p)
	require.NoError(tb, err)
	return b
}

// request enqueues a creditEval request and returns its id and estimate.
func (b *testBundle) request(tb testing.TB, params string, maxCalls *int) (int64, int) {
	tb.Helper()
	res, err := b.enqueuer.Enqueue(context.Background(), &request.EnqueueParams{
		Job: credit.Name, Source: radartype.SourceCLI, Params: []byte(params), MaxCalls: maxCalls,
	})
	require.NoError(tb, err)
	return res.Request.ID, res.EstimatedCalls
}

// run enqueues and runs a creditEval request to its end.
func (b *testBundle) run(tb testing.TB, params string, maxCalls *int) (*batch.Outcome, *queries.JobExecution) {
	tb.Helper()
	id, _ := b.request(tb, params, maxCalls)
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(tb, err)
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(tb, err)
	return out, exec
}

func (b *testBundle) count(tb testing.TB, sql string, args ...any) int {
	tb.Helper()
	var n int
	require.NoError(tb, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (b *testBundle) today() time.Time { return b.client.Today() }

// failKeys makes the fake answer 500 to every lookup of codes (nil: none).
func (b *testBundle) failKeys(codes []string) {
	cfg := b.fake.Config()
	cfg.FailKeys = map[string][]string{fakeupstream.EndpointCreditLookup: codes}
	b.fake.SetConfig(cfg)
}

func (b *testBundle) metric(tb testing.TB, name string, labels map[string]string) float64 {
	tb.Helper()
	v, err := observabilitytest.MetricValue(b.providers, name, labels)
	require.NoError(tb, err)
	return v
}

// requireOneGradeEach checks that every target has exactly one grade for
// day, and nothing else was written for it.
func (b *testBundle) requireOneGradeEach(tb testing.TB, day time.Time, targets []string) {
	tb.Helper()
	require.Equal(tb, len(targets), b.count(tb, `SELECT count(*) FROM credit_grade WHERE eval_date = $1`, day))
	require.Equal(tb, len(targets), b.count(tb, `SELECT count(DISTINCT corp_code) FROM credit_grade WHERE eval_date = $1 AND corp_code = ANY($2)`, day, targets))
}

func TestCreditEval_CompletesWithFallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 2500, fake: fakeupstream.Config{EmptyRate: 0.05}, fanOut: 8})
	id, estimate := b.request(t, `{}`, nil)
	require.Equal(t, 2750, estimate, "targets + 10% fallback allowance; the repaid company is no target")
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)

	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(2500), exec.Targets)
	require.Equal(t, exec.Targets, exec.ItemsWritten+exec.ItemsSkipped+exec.ItemsFailed)
	require.NotNil(t, exec.DomainRows)
	require.Equal(t, exec.ItemsWritten, *exec.DomainRows, "the two-way count agrees")
	require.Equal(t, int32(3), exec.ChunksTotal)
	b.requireOneGradeEach(t, b.today(), b.targets)

	stats := b.fake.Stats()
	require.Len(t, stats.Calls[fakeupstream.EndpointCreditLookup], 2500)
	fallbacks := stats.Calls[fakeupstream.EndpointCreditFallback]
	require.Equal(t, len(fallbacks), b.count(t, `SELECT count(*) FROM credit_grade WHERE source = 'fallback'`),
		"one fallback per empty lookup, and its grade is the one written")
	require.InDelta(t, 125, len(fallbacks), 60, "about 5% of lookups answer empty")
	require.Equal(t, int64(exec.ExternalCalls), stats.Total)
	require.Zero(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": credit.Name}))
}

// A daily cap reached mid-run stops at the chunk boundary (STOPPED, counted
// as a cap rejection, no item failed, nothing of the stopped chunk written);
// the next day a resume evaluates only the chunks not committed.
func TestCreditEval_CapStopsThenResumesNextDay(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 2500, fanOut: 4})
	testfactory.ProviderCallBudget(context.Background(), t, b.pool, &testfactory.ProviderCallBudgetOpts{
		Provider: string(upstream.ProviderCREDIT), Day: b.today(), CallsUsed: int32(upstream.DailyCapDefaults[upstream.ProviderCREDIT] - 1500),
	})

	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
	require.Contains(t, out.Message, "daily cap of CREDIT reached")
	// Every call the cap allowed was paid for and is kept: the first chunk
	// and the grades of the second one that came back before the cap.
	paid := len(b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup])
	require.Equal(t, 1500, paid, "the cap's remaining calls")
	require.Equal(t, int64(paid), exec.ItemsWritten, "every paid-for grade committed")
	require.Zero(t, exec.ItemsFailed, "capped calls are not item failures")
	require.Equal(t, paid, b.count(t, `SELECT count(*) FROM credit_grade`))
	require.GreaterOrEqual(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": credit.Name, "reason": observability.ReasonCap}), float64(1))
	firstDay := b.today()

	next := b.now.Load().Add(24 * time.Hour)
	b.now.Store(&next)
	b.fake.Reset()
	out, exec = b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Equal(t, int64(2500-paid), exec.ItemsWritten)
	require.Equal(t, int64(2500), exec.Targets, "the instance's targets: both executions")
	require.Equal(t, int64(2500), *exec.DomainRows)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, 2500-paid)
	var kept []string
	for _, code := range b.targets {
		if _, called := lookups[code]; !called {
			kept = append(kept, code)
		}
	}
	require.Len(t, kept, paid, "a committed grade is not called again")
	b.requireOneGradeEach(t, firstDay, kept)
	require.Equal(t, 2500-paid, b.count(t, `SELECT count(*) FROM credit_grade WHERE eval_date = $1 AND corp_code = ANY($2)`, b.today(), keys(lookups)))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A resume after the ledger changed: a company added inside a committed
// chunk's range waits for the next run; companies added elsewhere join;
// the accounting still holds.
func TestCreditEval_ResumeAfterLedgerChange(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 2000, fanOut: 4})
	maxCalls := 1500
	out, _ := b.run(t, `{}`, &maxCalls)
	require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
	require.Contains(t, out.Message, "maxCalls reached")
	// The first chunk and every grade of the second that came back.
	paid := len(b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup])
	require.GreaterOrEqual(t, paid, maxCalls)
	require.Equal(t, paid, b.count(t, `SELECT count(*) FROM credit_grade`), "every paid-for grade committed")

	n, err := strconv.Atoi(b.targets[5])
	require.NoError(t, err)
	inside := fmt.Sprintf("%08d", n+1) // within the committed chunk's range
	require.NotContains(t, b.targets, inside)
	below := "00000000" // before every target
	after := b.fake.Companies()[2001].CorpCode
	_, err = queries.New().ExposureUpsert(context.Background(), b.pool, &queries.ExposureUpsertParams{
		CorpCodes: []string{inside, below, after}, OutstandingKrws: []int64{5, 5, 5},
	})
	require.NoError(t, err)

	b.fake.Reset()
	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Equal(t, int64(2002), exec.Targets)
	require.Equal(t, int64(2002-paid), exec.ItemsWritten)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, 2002-paid)
	require.NotContains(t, lookups, inside, "waits for the next run")
	b.requireOneGradeEach(t, b.today(), append(append([]string{below}, b.targets...), after))
}

// Failed items under the tolerance are counted and the run completes; over
// it, the execution fails naming the first errors; a backfill repairs only
// the missing ones.
func TestCreditEval_FailureToleranceAndBackfill(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 2000, fanOut: 8})
	failing := []string{b.targets[10], b.targets[1500], b.targets[1999]}
	b.failKeys(failing)

	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	require.Equal(t, int64(3), exec.ItemsFailed)
	require.Equal(t, int64(1997), exec.ItemsWritten)
	require.Equal(t, int64(1997), *exec.DomainRows)

	b.failKeys(nil)
	b.fake.Reset()
	id, estimate := b.request(t, `{"backfill":true}`, nil)
	require.Equal(t, 4, estimate, "3 missing targets + allowance")
	res, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, res.Status, res.Message)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, 3)
	for _, code := range failing {
		require.Contains(t, lookups, code)
	}
	b.requireOneGradeEach(t, b.today(), b.targets)

	// 21 failures over 2000 targets: more than the tolerance of 20 (1%).
	var many []string
	for i := 0; i < 21; i++ {
		many = append(many, b.targets[i*90])
	}
	b.failKeys(many)
	out, exec = b.run(t, `{"backfill":false}`, nil)
	require.Equal(t, radartype.ExecutionFailed, out.Status, out.Message)
	// The first chunk's 12 failures are tolerated and committed; the second
	// chunk's 9 more cross the line: it stops calling at once, fails naming
	// its first errors, and its failed targets are counted although the
	// chunk does not commit.
	require.Contains(t, out.Message, "21 of 2000 targets failed, more than the 20 tolerated")
	require.Contains(t, out.Message, many[12]+": CREDIT creditLookup "+many[12]+": HTTP 500 after 3 attempts")
	require.Equal(t, int64(21), exec.ItemsFailed)
	require.NotNil(t, exec.DomainRows)
	require.Equal(t, *exec.DomainRows, exec.ItemsWritten,
		"the good grades of the failed chunk are kept")
	require.Less(t, exec.ItemsWritten, int64(2000-21), "the second chunk stopped calling at its 9th failure, the 21st of the run")
	require.Equal(t, float64(3+21), b.metric(t, observability.MetricItems, map[string]string{"job": credit.Name, "outcome": observability.OutcomeFailed}),
		"every failed target counted: 3 in the first run, 21 in this one")
}

// A missing key halts at once: FAILED, naming the variable, after no
// call at all instead of 1,200 failed items.
func TestCreditEval_MissingKeyHalts(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 1200, fanOut: 4})
	instruments := mustInstruments(t)
	keyless, err := upstream.NewClient(b.pool, upstream.ClientConfig{
		BaseURLs: map[upstream.Provider]string{upstream.ProviderCREDIT: b.fakeURL}, Instruments: instruments,
		AllowHTTP: true,
	})
	require.NoError(t, err)
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "2@test#boot", Jobs: map[string]batch.Job{credit.Name: credit.New()},
		Upstream: keyless, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	id, _ := b.request(t, `{}`, nil)
	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, out.Status)
	require.Contains(t, out.Message, "no API key configured (set BUILDRISK_KEY_CREDIT)")
	require.Zero(t, b.fake.Stats().Total)
	require.Zero(t, b.count(t, `SELECT count(*) FROM credit_grade`))
}

// A provider answering 429 with a Retry-After past the client's backoff
// halts the fan-out like a cap: the run stops (STOPPED, cause
// provider-rate, resumable) after the calls already in flight, at most
// one per slot, instead of paying for a refusal per target until the
// failure tolerance fails the run.
func TestCreditEval_ProviderRateHalts(t *testing.T) {
	t.Parallel()
	const fanOut = 5
	b := setup(t, setupOpts{targets: 600, fanOut: fanOut, fake: fakeupstream.Config{Rate429: 1, RetryAfter: time.Hour}})

	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
	require.Equal(t, "provider-rate", exec.StopCause)
	require.Contains(t, out.Message, "rate limited by CREDIT")
	calls := b.fake.Stats().Total
	require.LessOrEqual(t, calls, int64(fanOut), "no call after the provider said to wait, beyond those in flight")
	require.Equal(t, int64(exec.ExternalCalls), calls)
	require.Zero(t, exec.ItemsFailed, "a wait the provider asked for fails no target")
	require.Zero(t, exec.ItemsWritten)
	require.NotNil(t, exec.ResumeAt, "the resume's time is recorded with the stop")
	require.WithinDuration(t, time.Now().Add(time.Hour), *exec.ResumeAt, time.Minute)
}

func mustInstruments(t *testing.T) *observability.Instruments {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	i, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	return i
}

func TestCreditEval_ParamsAndEstimate(t *testing.T) {
	t.Parallel()
	spec := credit.Spec()
	p, err := spec.Decode(json.RawMessage(`{}`))
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(p.Canonical))
	q, err := spec.Decode(json.RawMessage(`{"backfill":false}`))
	require.NoError(t, err)
	require.Equal(t, catalog.ParamsHash(p.Canonical), catalog.ParamsHash(q.Canonical), "backfill false is the default run")
	_, err = spec.Decode(json.RawMessage(`{"backfill":"yes"}`))
	require.True(t, catalog.IsParamError(err))
	_, err = spec.Decode(json.RawMessage(`{"date":"2025-01-01"}`))
	require.True(t, catalog.IsParamError(err))
	require.Equal(t, []string{"BUILDRISK_KEY_CREDIT"}, spec.RequiredKeys())
	require.Equal(t, 0, credit.EstimateCalls(0))
	require.Equal(t, 2, credit.EstimateCalls(1))
	require.Equal(t, 44000, credit.EstimateCalls(40000))
	require.Equal(t, int64(0), credit.FailureTolerance(99))
	require.Equal(t, int64(20), credit.FailureTolerance(2000))
	require.Equal(t, int64(50), credit.FailureTolerance(40000))
	require.Equal(t, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), upstream.Day(time.Date(2026, 1, 1, 15, 0, 0, 0, time.UTC), seoul), "midnight in Seoul is 15:00 UTC")
}

// lossyJob injects the lost-events fault: each chunk drops one target
// silently (its result vanishes; nothing says it failed).
type lossyJob struct{ *credit.Job }

func (j lossyJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	res, err := j.Job.Process(ctx, run, chunk)
	if err == nil {
		res.Written--
	}
	return res, err
}

// No silent success: a creditEval whose items vanish ends FAILED with
// "unaccounted" and counts them, however well the rest went.
func TestCreditEval_SilentLossFails(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 1200, fanOut: 4})
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "3@test#boot", Jobs: map[string]batch.Job{credit.Name: lossyJob{credit.New()}},
		Upstream: b.client, Instruments: b.instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	id, _ := b.request(t, `{}`, nil)
	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, out.Status)
	// The first chunk's figures do not add up: it does not commit.
	require.Regexp(t, `^chunk \d{8}-\d{8}: unaccounted: 1 of 0 targets \(written -1, skipped 0, failed 0\)$`, out.Message)
	require.Equal(t, float64(1), b.metric(t, observability.MetricItems, map[string]string{"job": credit.Name, "outcome": observability.OutcomeUnaccounted}))
}

// retriedJob makes the runner do a chunk again: the first Process ends, its
// grades committed in parts, with a transient database error (a restart
// closing the connection), which the runner retries by calling Process again.
type retriedJob struct {
	*credit.Job
	failed atomic.Bool
}

func (j *retriedJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	res, err := j.Job.Process(ctx, run, chunk)
	if err == nil && j.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("commit of chunk %s: %w", chunk, &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"})
	}
	return res, err
}

// A chunk done again after its grades committed in parts calls none of
// them again and counts each once (the soak found the retry calling and
// counting the whole chunk twice: written 461 of 400 targets).
func TestCreditEval_RetriedChunkCallsOnlyUncommitted(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 400, fanOut: 4})
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "4@test#boot", Jobs: map[string]batch.Job{credit.Name: &retriedJob{Job: credit.New()}},
		Upstream: b.client, Instruments: b.instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	id, _ := b.request(t, `{}`, nil)
	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, 400)
	for key, n := range lookups {
		require.Equal(t, int64(1), n, "%s called again", key)
	}
	require.Contains(t, out.Message, "written 400")
}
