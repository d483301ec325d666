package upstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// arrival is one provider call as the fake upstream saw it.
type arrival struct {
	at     time.Time
	status int
}

// recordingFake is the fake upstream behind a recorder of each call's
// arrival time and answer.
type recordingFake struct {
	fake *fakeupstream.Server
	mu   sync.Mutex
	log  []arrival
}

func newRecordingFake(t *testing.T, cfg fakeupstream.Config) (*recordingFake, *httptest.Server) {
	t.Helper()
	rf := &recordingFake{fake: fakeupstream.New(cfg)}
	server := httptest.NewServer(rf)
	t.Cleanup(server.Close)
	return rf, server
}

// ServeHTTP implements http.Handler.
func (rf *recordingFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	rf.fake.ServeHTTP(sw, r)
	rf.mu.Lock()
	defer rf.mu.Unlock()
	rf.log = append(rf.log, arrival{at: at, status: sw.status})
}

// arrivals returns the calls in order of arrival.
func (rf *recordingFake) arrivals() []arrival {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	out := slices.Clone(rf.log)
	slices.SortFunc(out, func(a, b arrival) int { return a.at.Compare(b.at) })
	return out
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// syncBuffer is a bytes.Buffer a logger and the test share.
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

// workerPool is a pool of its own on the database at dbURL, as another
// worker process would have.
func workerPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// withRate sets MOLIT's fleet-wide rate.
func withRate(rate float64, more func(*upstream.ClientConfig)) func(*upstream.ClientConfig) {
	return func(c *upstream.ClientConfig) {
		c.Rates = map[upstream.Provider]float64{upstream.ProviderMOLIT: rate}
		if more != nil {
			more(c)
		}
	}
}

func rateRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM provider_rate").Scan(&n))
	return n
}

var rateQuery = upstream.AptTradeQuery("11110", "202501", 1, 10)

// Two workers (two Clients, each with its own pool on one database) call
// at fan-out 8 each under a fleet-wide rate of R calls per second: together
// they never get ahead of the shared schedule. Every call is sent at or
// after its slot, the slots are 1/R apart and none begins before the test
// started, so the n-th call the provider sees arrives no earlier than
// (n-1)/R after the start: at most R*T + 1 calls in the first T seconds,
// for every T. (Lateness under load only lowers the counts, so the bound
// does not flake; a sliding one-second window would, since one late call
// can land next to on-time ones.)
func TestRate_TwoWorkersStayUnderTheRate(t *testing.T) {
	t.Parallel()
	const rate, fanOut, callsPerWorker = 100.0, 8, 75
	rf, server := newRecordingFake(t, fakeupstream.Config{Companies: 50})
	dbURL := pgtest.NewDatabase(t)
	workers := make([]*upstream.Caller, 2)
	for i := range workers {
		client, _ := leaseClient(t, workerPool(t, dbURL), server.URL, 100000, fanOut, withRate(rate, nil))
		workers[i] = client.NewCaller("aptTrade", 0)
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*fanOut)
	for _, caller := range workers {
		var left atomic.Int64
		left.Store(callsPerWorker)
		for range fanOut {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for left.Add(-1) >= 0 {
					if _, err := caller.Get(context.Background(), upstream.EndpointAptTrade, rateQuery); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, caller := range workers {
		require.NoError(t, caller.Release(context.Background()))
		require.Equal(t, int64(callsPerWorker), caller.Calls())
	}

	calls := rf.arrivals()
	require.Len(t, calls, 2*callsPerWorker)
	for i, c := range calls {
		earliest := time.Duration(float64(i-1) / rate * float64(time.Second)) // one slot of slack for rounding
		require.GreaterOrEqualf(t, c.at.Sub(t0), earliest,
			"call %d of the fleet arrived %s after the start, ahead of the shared schedule at %v calls/s", i+1, c.at.Sub(t0), rate)
	}
}

// A 429 with Retry-After: 1 seen by worker A holds back worker B's next
// call too: B's call reaches the provider at least a second after A's 429
// did. With a rate configured the 429 is counted as provider_limit_lowered
// (the provider's real limit is below ours), not provider_429, and logged
// as one summary line.
func TestRate_RetryAfterSlowsTheFleet(t *testing.T) {
	t.Parallel()
	rf, server := newRecordingFake(t, fakeupstream.Config{Companies: 50, Rate429: 1, RetryAfter: time.Second})
	dbURL := pgtest.NewDatabase(t)
	var logs syncBuffer
	clientA, providersA := leaseClient(t, workerPool(t, dbURL), server.URL, 100000, 1, withRate(50, func(c *upstream.ClientConfig) {
		c.Attempts = 1
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	clientB, _ := leaseClient(t, workerPool(t, dbURL), server.URL, 100000, 1, withRate(50, nil))

	_, err := clientA.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	var callErr *upstream.CallError
	require.ErrorAs(t, err, &callErr)
	require.Equal(t, http.StatusTooManyRequests, callErr.Status)
	rf.fake.SetConfig(fakeupstream.Config{Companies: 50}) // no more 429s

	_, err = clientB.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	require.NoError(t, err)

	calls := rf.arrivals()
	require.Len(t, calls, 2)
	require.Equal(t, http.StatusTooManyRequests, calls[0].status)
	require.Equal(t, http.StatusOK, calls[1].status)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), time.Second, "worker B waited out worker A's Retry-After")

	lowered, err := observabilitytest.MetricValue(providersA, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": observability.ReasonProviderLimitLowered})
	require.NoError(t, err)
	require.Equal(t, float64(1), lowered)
	plain, err := observabilitytest.MetricValue(providersA, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": observability.ReasonProvider429})
	require.NoError(t, err)
	require.Zero(t, plain, "a 429 under a rate is not counted as a plain provider_429")
	require.Contains(t, logs.String(), "provider answered 429 under its BUILDRISK_RATE_<P>")
	require.Contains(t, logs.String(), "counts.MOLIT=1")
}

// The 429 pauses the worker's own dispenser at once: the next call of the
// same Client does not use the rest of the block it holds (a block of 8
// slots 20 ms apart) but waits out the Retry-After.
func TestRate_RetryAfterPausesTheWorker(t *testing.T) {
	t.Parallel()
	rf, server := newRecordingFake(t, fakeupstream.Config{Companies: 50, Rate429: 1, RetryAfter: time.Second})
	client, _ := leaseClient(t, pgtest.NewPool(t), server.URL, 100000, 8, withRate(50, func(c *upstream.ClientConfig) { c.Attempts = 1 }))
	caller := client.NewCaller("aptTrade", 0)

	_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	require.Error(t, err)
	rf.fake.SetConfig(fakeupstream.Config{Companies: 50})
	_, err = caller.Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	require.NoError(t, err)

	calls := rf.arrivals()
	require.Len(t, calls, 2)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), time.Second, "the rest of the block was dropped")
}

// A call waiting for its slot gives up when its context ends (a drain, a
// stop, a lost ownership): it returns the context's error and is never
// made.
func TestRate_WaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	rf, server := newRecordingFake(t, fakeupstream.Config{Companies: 50, Rate429: 1, RetryAfter: time.Minute})
	dbURL := pgtest.NewDatabase(t)
	long := func(c *upstream.ClientConfig) { c.Attempts, c.MaxBackoff = 1, time.Hour }
	clientA, _ := leaseClient(t, workerPool(t, dbURL), server.URL, 100000, 1, withRate(50, long))
	clientB, _ := leaseClient(t, workerPool(t, dbURL), server.URL, 100000, 1, withRate(50, long))

	_, err := clientA.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	require.Error(t, err) // the 429 pushed the fleet's schedule a minute ahead

	pool := workerPool(t, dbURL)
	tat := func() time.Time {
		var at time.Time
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT tat FROM provider_rate WHERE provider = 'MOLIT'").Scan(&at))
		return at
	}
	pushed := tat()

	ctx, cancel := context.WithCancel(context.Background())
	caller := clientB.NewCaller("aptTrade", 0)
	done := make(chan error, 1)
	go func() {
		_, err := caller.Get(ctx, upstream.EndpointAptTrade, rateQuery)
		done <- err
	}()
	// B has its slot, a minute ahead, once its block moved the schedule.
	for deadline := time.Now().Add(30 * time.Second); tat().Equal(pushed); time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "worker B never reserved its slot")
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the call kept waiting for its slot after its context ended")
	}
	require.Len(t, rf.arrivals(), 1, "the cancelled call was never made")
	require.Equal(t, int64(0), caller.Calls())
}

// Without BUILDRISK_RATE_<P> the rate limit costs nothing: no call, not
// even a 429, touches the provider_rate table.
func TestRate_OffTouchesNoRow(t *testing.T) {
	t.Parallel()
	rf, server := newRecordingFake(t, fakeupstream.Config{Companies: 50, Rate429: 1})
	pool := pgtest.NewPool(t)
	client, providers := leaseClient(t, pool, server.URL, 100000, 4, func(c *upstream.ClientConfig) { c.Attempts = 2 })
	caller := client.NewCaller("aptTrade", 0)

	_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
	require.Error(t, err)
	rf.fake.SetConfig(fakeupstream.Config{Companies: 50})
	for range 10 {
		_, err = caller.Get(context.Background(), upstream.EndpointAptTrade, rateQuery)
		require.NoError(t, err)
	}
	require.NoError(t, caller.Release(context.Background()))
	require.Len(t, rf.arrivals(), 12)
	require.Equal(t, 0, rateRows(t, pool))
	v, err := observabilitytest.MetricValue(providers, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": observability.ReasonProvider429})
	require.NoError(t, err)
	require.Equal(t, float64(2), v, "without a rate a 429 is a plain provider_429")
}

// A rate that is not a positive number is refused when the Client is made.
func TestRate_Validation(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	for _, rate := range []float64{0, -1} {
		_, err := upstream.NewClient(nil, upstream.ClientConfig{Instruments: instruments, Rates: map[upstream.Provider]float64{upstream.ProviderKRX: rate}})
		require.ErrorContains(t, err, "rate of KRX must be a positive number")
	}
}
