package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

const (
	testOperatorToken = "op-token-for-tests-0123456789abcdef"
	testViewerToken   = "view-token-for-tests-0123456789abcdef"
)

// testSystem is the whole service in one test: a private database, the fake
// upstream over real HTTP, the API over real HTTP, and workers on demand.
type testSystem struct {
	t testing.TB
	// dbURL connects as the application role (what api and workers use);
	// ownerURL as the schema owner (migrations, tests that need DDL).
	dbURL    string
	ownerURL string
	pool     *pgxpool.Pool
	// serviceURL is what the api and worker processes connect to: dbURL,
	// or PgBouncer's URL of the same database (testSystemOpts.pgbouncer).
	serviceURL string
	bouncer    *pgtest.PgBouncer
	// apiPool is the API's pool (statement and lock timeouts set).
	apiPool *pgxpool.Pool
	env     *envConfig
	tel     *telemetry
	fake    *fakeupstream.Server
	fakeURL string
	api     *httptest.Server
	// vars is the environment the system was built from.
	vars map[string]string
	// gate can hold provider calls to make a chunk boundary deterministic.
	gate *callGate
	// spans records every finished span of the system (API and workers).
	spans *tracetest.SpanRecorder
}

// callGate lets the first `allow` provider calls through and holds the next
// ones until release is closed; blocked is closed when the first call is
// held, abandoned when a held call is given up by its caller (its request
// context ends). With allow < 0 (the zero state after newTestSystem)
// nothing is held.
type callGate struct {
	mu        sync.Mutex
	allow     int
	calls     int
	armed     bool
	blocked   chan struct{}
	release   chan struct{}
	abandoned chan struct{}
}

// arm holds every provider call after the next allow ones.
func (g *callGate) arm(allow int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allow, g.calls, g.armed = allow, 0, true
	g.blocked, g.release, g.abandoned = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// open releases held calls and disarms the gate.
func (g *callGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		close(g.release)
	}
}

func (g *callGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/__fake/") {
			g.mu.Lock()
			var wait, abandoned chan struct{}
			if g.armed {
				g.calls++
				if g.calls > g.allow {
					if g.calls == g.allow+1 {
						close(g.blocked)
					}
					wait, abandoned = g.release, g.abandoned
				}
			}
			g.mu.Unlock()
			if wait != nil {
				select {
				case <-wait:
				case <-r.Context().Done():
					g.mu.Lock()
					select {
					case <-abandoned:
					default:
						close(abandoned)
					}
					g.mu.Unlock()
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

type testSystemOpts struct {
	// env overrides environment variables (BUILDRISK_DAILY_CAP_MOLIT=5 ...).
	env map[string]string
	// fake configures the fake upstream.
	fake fakeupstream.Config
	// now is the call-budget clock (nil: time.Now).
	now func() time.Time
	// dbURL is the database to use instead of a fresh pgtest one (a
	// private cluster a test stops and starts).
	dbURL string
	// logs receives the system's JSON log lines (nil: discarded).
	logs io.Writer
	// pgbouncer puts a private PgBouncer in transaction pooling mode
	// between the database and the api and worker processes (the test's
	// own pool, s.pool, still connects directly).
	pgbouncer bool
}

func newTestSystem(t testing.TB, opts *testSystemOpts) *testSystem {
	t.Helper()
	if opts == nil {
		opts = &testSystemOpts{}
	}
	// The api and the workers connect as the application role (no DDL, no
	// TRUNCATE), as deployed; ownerURL is the schema owner's. A test that
	// stops and starts its own cluster gives its database (opts.dbURL).
	ownerURL := opts.dbURL
	if ownerURL == "" {
		ownerURL = pgtest.NewDatabase(t)
	}
	s := &testSystem{t: t, ownerURL: ownerURL, dbURL: appURL(t, ownerURL)}
	pool, err := pgxpool.New(context.Background(), s.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.pool = pool
	s.serviceURL = s.dbURL
	if opts.pgbouncer {
		s.bouncer = pgtest.StartPgBouncer(t, nil, s.dbURL, apiURL(t, ownerURL))
		s.serviceURL = s.bouncer.URL(t, s.dbURL)
	}
	s.fake = fakeupstream.New(opts.fake)
	s.gate = &callGate{}
	fakeServer := httptest.NewServer(s.gate.wrap(s.fake))
	t.Cleanup(fakeServer.Close)
	s.fakeURL = fakeServer.URL

	vars := map[string]string{
		"DATABASE_URL":                     "unused-in-process",
		"BUILDRISK_API_TOKENS":             "operator:" + testOperatorToken + ",viewer:" + testViewerToken,
		"BUILDRISK_UPSTREAM_URL":           fakeServer.URL,
		"BUILDRISK_INSECURE_HTTP_UPSTREAM": "1",
		"BUILDRISK_KEY_MOLIT":              "test-molit-key",
		"BUILDRISK_KEY_DART":               "test-dart-key",
		"BUILDRISK_KEY_KRX":                "test-krx-key",
		"BUILDRISK_KEY_CREDIT":             "test-credit-key",
		"BUILDRISK_HEARTBEAT_INTERVAL":     "200ms",
		"BUILDRISK_STALE_AFTER":            "2s",
		"BUILDRISK_REAP_INTERVAL":          "500ms",
		"BUILDRISK_DRAIN_TIMEOUT":          "10s",
		// Tests of the manual resume path (a drained or reaped run waits for
		// a new request) turn automatic resume off; the tests of automatic
		// resume (autoresume_test.go) turn it on.
		"BUILDRISK_AUTO_RESUME":         "none",
		"BUILDRISK_AUTO_RESUME_BACKOFF": "10ms",
	}
	// Schedules are off unless a test turns one on: a cron tick must never
	// land in the middle of an unrelated test.
	for _, name := range jobs.Default().Names() {
		vars["BUILDRISK_SCHEDULE_"+strings.ToUpper(name)] = "off"
	}
	for k, v := range opts.env {
		vars[k] = v
	}
	s.vars = vars
	env, err := loadEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	env.Now = opts.now
	s.env = env

	providers, spans := observabilitytest.NewProviders()
	s.spans = spans
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.logs != nil {
		logger = observability.NewLogger(opts.logs, observability.LogFormatJSON, slog.LevelDebug)
	}
	s.tel = &telemetry{providers: providers, instruments: instruments, logger: logger}

	// The API has its own pool with the api role's statement and lock
	// timeouts, as `radar api` does.
	// It connects as the api's own role (radar_app_api), as radar_api does
	// in deploy/, through PgBouncer when the system has one.
	apiServiceURL := apiURL(t, ownerURL)
	if opts.pgbouncer {
		apiServiceURL = s.bouncer.URL(t, apiServiceURL)
	}
	s.apiPool, err = openAPIPool(context.Background(), env, apiServiceURL)
	require.NoError(t, err)
	t.Cleanup(s.apiPool.Close)
	server, err := newAPIServer(t.Context(), s.apiPool, env, s.tel)
	require.NoError(t, err)
	s.api = httptest.NewServer(server.Handler())
	t.Cleanup(s.api.Close)
	return s
}

// startWorker starts one in-process worker; it is drained at cleanup.
func (s *testSystem) startWorker() (*worker.Worker, *batch.Runner) {
	s.t.Helper()
	return s.startWorkerWith(s.pool, nil)
}

// startWorkerWith starts a worker on its own pool with tuned configs.
func (s *testSystem) startWorkerWith(pool *pgxpool.Pool, tune tuneFunc) (*worker.Worker, *batch.Runner) {
	s.t.Helper()
	id, hostname, boot := newWorkerID()
	w, runner, err := newWorker(pool, s.env, s.tel, id, hostname, boot, tune)
	require.NoError(s.t, err)
	require.NoError(s.t, w.Start(context.Background()))
	s.t.Cleanup(func() { _ = w.Drain(context.Background()) })
	return w, runner
}

// do sends a request with the given token and decodes the JSON answer.
func (s *testSystem) do(method, path, token, body string) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.api.URL+path, strings.NewReader(body))
	require.NoError(s.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		require.NoError(s.t, json.Unmarshal(raw, &out), "body: %s", raw)
	}
	return resp.StatusCode, out
}

func (s *testSystem) post(path, body string) (int, map[string]any) {
	return s.do(http.MethodPost, path, testOperatorToken, body)
}

func (s *testSystem) get(path string) (int, map[string]any) {
	return s.do(http.MethodGet, path, testViewerToken, "")
}

// requestAptTrade posts an aptTrade request and returns its id.
func (s *testSystem) requestAptTrade(body string) string {
	s.t.Helper()
	status, out := s.post("/v1/jobs/aptTrade/requests", body)
	require.Equal(s.t, http.StatusAccepted, status, "%v", out)
	return out["requestId"].(string)
}

// waitRequest polls GET /v1/requests/{id} until its status is one of want.
func (s *testSystem) waitRequest(id string, want ...string) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, out := s.get("/v1/requests/" + id)
		require.Equal(s.t, http.StatusOK, status)
		for _, w := range want {
			if out["status"] == w {
				return out
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("request %s still %v, want %v: %v", id, out["status"], want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitChunksDone polls the request until its execution has committed at
// least n chunks, failing the test after a minute.
func (s *testSystem) waitChunksDone(id string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, out := s.get("/v1/requests/" + id)
		if exec, ok := out["execution"].(map[string]any); ok && exec["chunksDone"].(float64) >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("request %s: fewer than %d chunks committed after a minute: %v", id, n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *testSystem) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func aptTradeBody(regions []string, from, to string) string {
	quoted := make([]string, len(regions))
	for i, r := range regions {
		quoted[i] = fmt.Sprintf("%q", r)
	}
	return fmt.Sprintf(`{"params":{"regions":[%s],"from":%q,"to":%q}}`, strings.Join(quoted, ","), from, to)
}

func execution(t *testing.T, request map[string]any) map[string]any {
	t.Helper()
	exec, ok := request["execution"].(map[string]any)
	require.True(t, ok, "request has no execution: %v", request)
	return exec
}

// metric reads one series of the system's metrics.
func (s *testSystem) metric(name string, labels map[string]string) float64 {
	s.t.Helper()
	v, err := observabilitytest.MetricValue(s.tel.providers, name, labels)
	require.NoError(s.t, err)
	return v
}

// callsPerKey returns the fake upstream's counts for one endpoint.
func (s *testSystem) callsPerKey(endpoint string) map[string]int64 {
	return s.fake.Stats().Calls[endpoint]
}

func fmtInt(n int) string { return fmt.Sprint(n) }

type requestEnqueuer = request.Enqueuer

func decodeJobs(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var out struct {
		Jobs []map[string]any `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	for _, j := range out.Jobs {
		if j["name"] == "aptTrade" {
			return j
		}
	}
	t.Fatalf("aptTrade not in %s", body)
	return nil
}

// A worker's heartbeats have their own pool: with every connection of the
// main pool held by chunk work, the worker still beats and stays alive.
func TestWorker_HeartbeatNeverWaitsBehindChunkWork(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	ctx := context.Background()
	mainCfg, err := pgxpool.ParseConfig(s.dbURL)
	require.NoError(t, err)
	mainCfg.MaxConns = 2
	mainPool, err := pgxpool.NewWithConfig(ctx, mainCfg)
	require.NoError(t, err)
	t.Cleanup(mainPool.Close)
	heartbeatPool, err := openHeartbeatPool(ctx, s.dbURL, heartbeatPoolConns, s.env.DBTimeout, false, sessionLimits{})
	require.NoError(t, err)
	t.Cleanup(heartbeatPool.Close)

	w, _ := s.startWorkerWith(mainPool, withHeartbeatPool(heartbeatPool))
	var before time.Time
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT heartbeat_at FROM worker WHERE id = $1", w.ID()).Scan(&before))

	// Chunk work holds every connection of the main pool.
	held := make([]*pgxpool.Conn, 0, mainCfg.MaxConns)
	for range mainCfg.MaxConns {
		conn, err := mainPool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, conn)
	}
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()

	// Heartbeats are every 200 ms here; two more must land within the deadline.
	deadline := time.Now().Add(10 * time.Second)
	for beats := 0; beats < 2; {
		var at time.Time
		require.NoError(t, s.pool.QueryRow(ctx, "SELECT heartbeat_at FROM worker WHERE id = $1", w.ID()).Scan(&at))
		if at.After(before) {
			beats++
			before = at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat while the main pool was exhausted (last %s)", before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
