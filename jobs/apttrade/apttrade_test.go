package apttrade_test

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
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
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
}

// setup builds a runner with the aptTrade job against the fake upstream
// over real HTTP, on a database of its own; configure, when given, changes
// the provider client's and the runner's configs.
func setup(t *testing.T, cfg fakeupstream.Config, configure ...func(*upstream.ClientConfig, *batch.Config)) *testBundle {
	t.Helper()

	b := &testBundle{pool: pgtest.NewPool(t), fake: fakeupstream.New(cfg)}
	server := httptest.NewServer(b.fake)
	t.Cleanup(server.Close)

	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clientCfg := upstream.ClientConfig{
		AllowHTTP:   true, // the fake upstream
		BaseURLs:    map[upstream.Provider]string{upstream.ProviderMOLIT: server.URL},
		Keys:        map[upstream.Provider]string{upstream.ProviderMOLIT: "test-molit-key"},
		Location:    time.UTC,
		Backoff:     time.Millisecond,
		MaxBackoff:  5 * time.Millisecond,
		Instruments: instruments,
	}
	runnerCfg := batch.Config{
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{apttrade.Name: apttrade.Job{}},
		Instruments: instruments, Logger: logger,
	}
	for _, c := range configure {
		c(&clientCfg, &runnerCfg)
	}
	client, err := upstream.NewClient(b.pool, clientCfg)
	require.NoError(t, err)
	b.enqueuer, err = request.NewOwner(b.pool, nil, request.Config{Catalog: catalog.NewCatalog(apttrade.Spec()), Instruments: instruments, Logger: logger})
	require.NoError(t, err)
	runnerCfg.Upstream, runnerCfg.Owner = client, b.enqueuer
	b.runner, err = batch.NewRunner(b.pool, runnerCfg)
	require.NoError(t, err)
	return b
}

// run enqueues an aptTrade request with params and runs it to its end.
func (b *testBundle) run(t *testing.T, params string) *queries.JobExecution {
	t.Helper()

	ctx := context.Background()
	res, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: apttrade.Name, Source: radartype.SourceCLI, Params: []byte(params)})
	require.NoError(t, err)
	out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: res.Request.ID})
	require.NoError(t, err)
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, out.ExecutionID)
	require.NoError(t, err)
	return exec
}

func (b *testBundle) trades(t *testing.T) int64 {
	t.Helper()

	var n int64
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM apt_trade").Scan(&n))
	return n
}

const twoRegionsTwoMonths = `{"regions":["11110","11680"],"from":"2025-01","to":"2025-02"}`

// One call per region×month, every trade MOLIT declares written once and
// counted: targets = written = the rows in apt_trade = the domain count.
func TestAptTrade_OneCallPerRegionMonth(t *testing.T) {
	t.Parallel()

	b := setup(t, fakeupstream.Config{})
	exec := b.run(t, twoRegionsTwoMonths)

	require.Equal(t, "COMPLETED", exec.Status, exec.ExitMessage)
	require.EqualValues(t, 4, exec.ChunksDone)
	require.EqualValues(t, 4, exec.ExternalCalls)
	calls := b.fake.Stats().Calls[fakeupstream.EndpointAptTrade]
	require.Equal(t, map[string]int64{"11110:202501": 1, "11110:202502": 1, "11680:202501": 1, "11680:202502": 1}, calls)

	rows := b.trades(t)
	require.Positive(t, rows, "the fake has trades in these months")
	require.Equal(t, exec.Targets, exec.ItemsWritten)
	require.Equal(t, rows, exec.ItemsWritten)
	require.NotNil(t, exec.DomainRows)
	require.Equal(t, rows, *exec.DomainRows)
}

// Running the same months again rewrites the same trades: the upsert keys
// them by region, month and serial, so no trade is stored twice.
func TestAptTrade_RerunUpsertsTheSameRows(t *testing.T) {
	t.Parallel()

	b := setup(t, fakeupstream.Config{})
	first := b.run(t, twoRegionsTwoMonths)
	require.Equal(t, "COMPLETED", first.Status, first.ExitMessage)
	rows := b.trades(t)

	second := b.run(t, twoRegionsTwoMonths)
	require.Equal(t, "COMPLETED", second.Status, second.ExitMessage)
	require.Equal(t, first.ItemsWritten, second.ItemsWritten)
	require.Equal(t, rows, b.trades(t))
	var restamped int64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM apt_trade WHERE execution_id = $1", second.ID).Scan(&restamped))
	require.Equal(t, rows, restamped, "every row now carries the second execution")
}

// A page shorter than MOLIT's declared total never completes the run: the
// chunk fails instead of writing the trades that arrived.
func TestAptTrade_ShortPageFails(t *testing.T) {
	t.Parallel()

	b := setup(t, fakeupstream.Config{ShortRate: 1})
	exec := b.run(t, `{"regions":["11680"],"from":"2025-01","to":"2025-01"}`)

	require.Equal(t, "FAILED", exec.Status)
	require.Zero(t, b.trades(t))
}

// A stop is bounded like a drain against a provider whose body stalls
// (one sending a byte a second used to leave an execution STOPPING for
// 141 s, then FAILED): the one call in flight gets the stop timeout, is
// then cancelled and not retried, its chunk rolls back (a resume does it
// again), and the execution ends STOPPED with cause operator. The call is
// still counted: it was paid for.
func TestAptTrade_StopAbandonsAStalledCall(t *testing.T) {
	t.Parallel()

	b := setup(t, fakeupstream.Config{HangBodyRate: 1}, func(client *upstream.ClientConfig, runner *batch.Config) {
		client.RequestTimeout = 3 * time.Second // the client's own end of a stalled attempt, far past the stop's
		runner.StopTimeout = 200 * time.Millisecond
		runner.StopCheckInterval = 10 * time.Millisecond
	})
	ctx := context.Background()
	res, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: apttrade.Name, Source: radartype.SourceCLI,
		Params: []byte(`{"regions":["11110"],"from":"2025-01","to":"2025-02"}`)})
	require.NoError(t, err)
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.runner.Run(ctx, batch.RunOpts{RequestID: res.Request.ID})
		done <- result{out, err}
	}()
	apptest.WaitUntil(t, time.Minute, "the first provider call", func() bool { return b.fake.Stats().Total > 0 })
	_, err = queries.New().JobExecutionRequestStop(ctx, b.pool, apttrade.Name)
	require.NoError(t, err)

	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the stopped run did not end within a minute")
	}
	require.NoError(t, r.err)
	require.Equal(t, radartype.ExecutionStopped, r.out.Status, r.out.Message)
	require.Equal(t, batch.MessageStopTimeout, r.out.Message)
	exec, err := queries.New().JobExecutionGetByID(ctx, b.pool, r.out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "operator", exec.StopCause)
	require.Zero(t, exec.ChunksDone, "the chunk of the abandoned call rolled back")
	require.Zero(t, b.trades(t))
	require.Equal(t, map[string]int64{"11110:202501": 1}, b.fake.Stats().Calls[fakeupstream.EndpointAptTrade],
		"one call, cancelled and not retried; no chunk after it")
	require.EqualValues(t, 1, exec.ExternalCalls, "the abandoned call is counted")
}
