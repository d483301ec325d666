package upstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
)

// countingServer answers every call with 200 and counts them.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(server.Close)
	return server, &served
}

// leaseClient is a client of MOLIT with the given cap and fan-out.
func leaseClient(tb testing.TB, pool *pgxpool.Pool, baseURL string, dailyCap, fanOut int, tune func(*upstream.ClientConfig)) (*upstream.Client, *observability.Providers) {
	tb.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(tb, err)
	cfg := upstream.ClientConfig{
		BaseURLs:    map[upstream.Provider]string{upstream.ProviderMOLIT: baseURL},
		Keys:        map[upstream.Provider]string{upstream.ProviderMOLIT: "secret-key-value"},
		DailyCaps:   map[upstream.Provider]int{upstream.ProviderMOLIT: dailyCap},
		Backoff:     time.Millisecond,
		Instruments: instruments,
		FanOut:      fanOut,
		CapWait:     5 * time.Millisecond,
		AllowHTTP:   true,
	}
	if tune != nil {
		tune(&cfg)
	}
	client, err := upstream.NewClient(pool, cfg)
	require.NoError(tb, err)
	return client, providers
}

// fanOutUntilRefused runs fanOut goroutines that call through caller until
// each is refused, released together by a barrier, and returns how many
// calls succeeded and the refusals.
func fanOutUntilRefused(caller *upstream.Caller, fanOut int) (int64, []error) {
	var ok atomic.Int64
	var mu sync.Mutex
	var refusals []error
	start := make(chan struct{})
	var wg sync.WaitGroup
	q := upstream.AptTradeQuery("11110", "202501", 1, 10)
	for range fanOut {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, q)
				if err != nil {
					mu.Lock()
					refusals = append(refusals, err)
					mu.Unlock()
					return
				}
				ok.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok.Load(), refusals
}

// The daily cap is reserved before a call is made: 64 goroutines of one
// execution racing a cap of 100 make exactly 100 calls, and every one of
// them is then refused with ErrCapped.
func TestCaller_DailyCapExactAtFanOut64(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	client, _ := leaseClient(t, pool, server.URL, 100, 64, nil)
	caller := client.NewCaller("aptTrade", 0)

	ok, refusals := fanOutUntilRefused(caller, 64)
	require.NoError(t, caller.Release(context.Background()))
	require.Equal(t, int64(100), ok)
	require.Equal(t, int64(100), served.Load())
	require.Equal(t, int64(100), caller.Calls())
	require.Len(t, refusals, 64)
	for _, err := range refusals {
		require.ErrorIs(t, err, upstream.ErrCapped)
	}
	remaining, err := client.Remaining(context.Background(), upstream.ProviderMOLIT)
	require.NoError(t, err)
	require.Equal(t, 0, remaining)
	requireLeases(t, pool, 0)
}

// maxCalls is reserved the same way: 64 goroutines of one execution with
// maxCalls 100 make exactly 100 calls, and the unspent lease goes back to
// the day's budget when the execution releases it.
func TestCaller_MaxCallsExactAtFanOut64(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	client, providers := leaseClient(t, pool, server.URL, 10000, 64, nil)
	caller := client.NewCaller("aptTrade", 100)

	ok, refusals := fanOutUntilRefused(caller, 64)
	require.Equal(t, int64(100), ok)
	require.Equal(t, int64(100), served.Load())
	require.Equal(t, int64(100), caller.Calls())
	for _, err := range refusals {
		require.ErrorIs(t, err, upstream.ErrMaxCalls)
	}
	// Each refusal is counted as the runbook says: reason "cap", like the
	// daily cap's.
	rejected, err := observabilitytest.MetricValue(providers, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": "cap"})
	require.NoError(t, err)
	require.Equal(t, float64(len(refusals)), rejected)
	require.NoError(t, caller.Release(context.Background()))
	remaining, err := client.Remaining(context.Background(), upstream.ProviderMOLIT)
	require.NoError(t, err)
	require.Equal(t, 10000-100, remaining, "the unspent part of the lease is back")
	requireLeases(t, pool, 0)
}

// Calls cost no round trip each: a run of 1,000 calls at fan-out 8 takes a
// handful of leases and claims, not one budget update per call.
func TestCaller_LeasesAmortizeRoundTrips(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	client, _ := leaseClient(t, pool, server.URL, 1000, 8, nil)
	caller := client.NewCaller("aptTrade", 0)

	ok, _ := fanOutUntilRefused(caller, 8)
	require.NoError(t, caller.Release(context.Background()))
	require.Equal(t, int64(1000), ok)
	require.Equal(t, int64(1000), served.Load())
	// The lease ids count the leases taken.
	var leasesTaken int64
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT last_value FROM provider_call_lease_id_seq").Scan(&leasesTaken))
	require.Less(t, leasesTaken, int64(50), "leases are blocks of calls, not one per call")
}

// A dead worker's lease expires: the calls it never claimed go back to the
// day's budget for the other workers, the claimed ones stay spent (they may
// have been made), so the cap is still never exceeded.
func TestCaller_DeadHoldersLeaseExpires(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	short := func(c *upstream.ClientConfig) { c.LeaseTTL = 200 * time.Millisecond }
	dead, _ := leaseClient(t, pool, server.URL, 100, 4, short)
	q := upstream.AptTradeQuery("11110", "202501", 1, 10)

	// The "dead" execution makes a call and never releases its lease.
	abandoned := dead.NewCaller("aptTrade", 0)
	_, err := abandoned.Get(context.Background(), upstream.EndpointAptTrade, q)
	require.NoError(t, err)
	var granted, claimed int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT granted, claimed FROM provider_call_lease").Scan(&granted, &claimed))
	require.Greater(t, granted, claimed, "the lease holds calls not yet claimed")
	require.GreaterOrEqual(t, claimed, 1)

	// A live worker spends the cap to the end; once the dead lease has
	// expired it gets the unclaimed part back.
	live, _ := leaseClient(t, pool, server.URL, 100, 4, short)
	caller := live.NewCaller("aptTrade", 0)
	ok, refusals := fanOutUntilRefused(caller, 4)
	require.NoError(t, caller.Release(context.Background()))
	for _, err := range refusals {
		require.ErrorIs(t, err, upstream.ErrCapped)
	}
	require.Equal(t, int64(100-claimed), ok, "every call the dead lease never claimed came back")
	require.Equal(t, int64(1)+ok, served.Load())
	require.LessOrEqual(t, served.Load(), int64(100))
	requireLeases(t, pool, 0)
}

// A new day takes a new lease: yesterday's is returned, today's budget
// applies in full.
func TestCaller_NewDayNewLease(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	var now atomic.Pointer[time.Time]
	day1 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	now.Store(&day1)
	client, _ := leaseClient(t, pool, server.URL, 10, 2, func(c *upstream.ClientConfig) { c.Now = func() time.Time { return *now.Load() } })
	caller := client.NewCaller("aptTrade", 0)
	ok, _ := fanOutUntilRefused(caller, 2)
	require.Equal(t, int64(10), ok)
	day2 := day1.Add(24 * time.Hour)
	now.Store(&day2)
	ok, _ = fanOutUntilRefused(caller, 2)
	require.Equal(t, int64(10), ok)
	require.NoError(t, caller.Release(context.Background()))
	require.Equal(t, int64(20), served.Load())
	requireLeases(t, pool, 0)
}

// Two workers whose clocks disagree by days (one skewed 36 h ahead, one
// 36 h behind) charge the same day's budget at the same moment: the
// database's day in the time zone, never a process's; together they make
// exactly the one cap of that day.
func TestCaller_DayIsTheDatabasesWhateverTheProcessClock(t *testing.T) {
	t.Parallel()
	server, served := countingServer(t)
	pool := pgtest.NewPool(t)
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	skewed := func(by time.Duration) func(*upstream.ClientConfig) {
		return func(c *upstream.ClientConfig) {
			c.Location = seoul
			c.ProcessClock = func() time.Time { return time.Now().Add(by) }
		}
	}
	ahead, _ := leaseClient(t, pool, server.URL, 10, 2, skewed(36*time.Hour))
	behind, _ := leaseClient(t, pool, server.URL, 10, 2, skewed(-36*time.Hour))

	var dbDay time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT (now() AT TIME ZONE 'Asia/Seoul')::date`).Scan(&dbDay))
	require.Equal(t, dbDay, ahead.Today(), "the day is the database's")
	require.Equal(t, dbDay, behind.Today(), "the day is the database's")

	aheadCaller, behindCaller := ahead.NewCaller("aptTrade", 0), behind.NewCaller("aptTrade", 0)
	okAhead, _ := fanOutUntilRefused(aheadCaller, 2)
	okBehind, _ := fanOutUntilRefused(behindCaller, 2)
	require.NoError(t, aheadCaller.Release(context.Background()))
	require.NoError(t, behindCaller.Release(context.Background()))
	require.Equal(t, int64(10), okAhead+okBehind, "one day's cap between them")
	require.Equal(t, int64(10), served.Load())
	var days []time.Time
	rows, err := pool.Query(context.Background(), `SELECT day FROM provider_call_budget ORDER BY day`)
	require.NoError(t, err)
	days, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Equal(t, []time.Time{dbDay}, days, "both charged the database's day")
}

func requireLeases(t *testing.T, pool *pgxpool.Pool, want int) {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM provider_call_lease").Scan(&n))
	require.Equal(t, want, n)
}

// Environment of the lease-race helper process.
const (
	envLeaseHelperDB  = "BUILDRISK_TEST_LEASE_HELPER_DB"
	envLeaseHelperURL = "BUILDRISK_TEST_LEASE_HELPER_URL"
)

// Four worker processes, each an execution calling at fan-out 64, race a
// daily cap of 1,000 on one database: the provider sees exactly 1,000 calls,
// every process is refused with the cap, and no budget is left in leases.
func TestCaller_FourProcessesRaceTheCap(t *testing.T) {
	t.Parallel()
	const processes, fanOut, dailyCap = 4, 64, 1000
	server, served := countingServer(t)
	dbURL := pgtest.NewDatabase(t)

	type child struct {
		cmd   *exec.Cmd
		stdin interface{ Close() error }
		out   *bufio.Scanner
	}
	children := make([]child, processes)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseRaceHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), envLeaseHelperDB+"="+dbURL, envLeaseHelperURL+"="+server.URL)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[i] = child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	}
	// Each child says "ready" once connected; then all start at once.
	for _, c := range children {
		require.True(t, scanUntil(c.out, "ready"), "helper process did not get ready")
	}
	for _, c := range children {
		require.NoError(t, c.stdin.Close()) // EOF on stdin is the start signal
	}
	var total int64
	for _, c := range children {
		line, found := scanPrefix(c.out, "made ")
		require.True(t, found, "helper process did not report")
		n, err := strconv.ParseInt(strings.TrimPrefix(line, "made "), 10, 64)
		require.NoError(t, err)
		total += n
		require.NoError(t, c.cmd.Wait())
	}
	require.Equal(t, int64(dailyCap), served.Load(), "the provider saw exactly the cap")
	require.Equal(t, int64(dailyCap), total)

	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var used int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT calls_used FROM provider_call_budget WHERE provider = 'MOLIT'").Scan(&used))
	require.Equal(t, dailyCap, used)
	requireLeases(t, pool, 0)
}

func scanUntil(s *bufio.Scanner, want string) bool {
	_, ok := scanPrefix(s, want)
	return ok
}

func scanPrefix(s *bufio.Scanner, prefix string) (string, bool) {
	for s.Scan() {
		if strings.HasPrefix(s.Text(), prefix) {
			return s.Text(), true
		}
	}
	return "", false
}

// TestLeaseRaceHelper is one worker process of
// TestCaller_FourProcessesRaceTheCap; it does nothing in a normal run.
func TestLeaseRaceHelper(t *testing.T) {
	dbURL := os.Getenv(envLeaseHelperDB)
	if dbURL == "" {
		t.Skip("helper process of TestCaller_FourProcessesRaceTheCap")
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pool.Ping(context.Background()))
	client, _ := leaseClient(t, pool, os.Getenv(envLeaseHelperURL), 1000, 64, nil)
	caller := client.NewCaller("aptTrade", 0)
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // start on EOF
	ok, refusals := fanOutUntilRefused(caller, 64)
	require.NoError(t, caller.Release(context.Background()))
	for _, err := range refusals {
		if !errors.Is(err, upstream.ErrCapped) {
			t.Fatalf("refused with %v, want the daily cap", err)
		}
	}
	fmt.Printf("made %d\n", ok)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the provider lives in the parent process
}

// A lease id drawn again for another holder (a failover to an asynchronous
// replica lost the lease and the sequence handed its id out anew) is never
// claimed nor returned by the first holder: its claims find no row of its
// own and it takes a new lease; the other holder's row stays as it was.
func TestCaller_LeaseIsClaimedOnlyByItsHolder(t *testing.T) {
	t.Parallel()
	server, _ := countingServer(t)
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	client, _ := leaseClient(t, pool, server.URL, 1000, 1, func(c *upstream.ClientConfig) { c.Holder = "worker-a" })
	q := upstream.AptTradeQuery("11110", "202501", 1, 10)
	caller := client.NewCaller("aptTrade", 0)
	_, err := caller.Get(ctx, upstream.EndpointAptTrade, q)
	require.NoError(t, err)
	id, granted := testfactory.ReissueLease(ctx, t, pool, "worker-b")

	for range int(granted) + 1 {
		_, err := caller.Get(ctx, upstream.EndpointAptTrade, q)
		require.NoError(t, err)
	}
	require.NoError(t, caller.Release(ctx))
	var claimed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT claimed FROM provider_call_lease WHERE id = $1 AND holder = 'worker-b'`, id).Scan(&claimed),
		"the other holder's lease is still there")
	require.Zero(t, claimed, "and nothing claimed on it")
}
