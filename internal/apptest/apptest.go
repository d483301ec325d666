package apptest

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

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/request/requesttest"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

const (
	OperatorToken = "op-token-for-tests-0123456789abcdef"
	ViewerToken   = "view-token-for-tests-0123456789abcdef"
)

// System is the whole service in one test: a private database, the fake
// upstream over real HTTP, the API over real HTTP, and workers on demand.
type System struct {
	T testing.TB
	// dbURL connects as the application role (what api and workers use);
	// ownerURL as the schema owner (migrations, tests that need DDL).
	DBURL    string
	OwnerURL string
	Pool     *pgxpool.Pool
	// serviceURL is what the api and worker processes connect to: dbURL,
	// or PgBouncer's URL of the same database (Opts.pgbouncer).
	ServiceURL string
	Bouncer    *pgtest.PgBouncer
	// apiPool is the API's pool (statement and lock timeouts set).
	APIPool *pgxpool.Pool
	Env     *config.Config
	Tel     *app.Telemetry
	Fake    *fakeupstream.Server
	FakeURL string
	API     *httptest.Server
	// Role is the api role API serves.
	Role *app.API
	// vars is the environment the system was built from.
	Vars map[string]string
	// gate can hold provider calls to make a chunk boundary deterministic.
	Gate *CallGate
	// spans records every finished span of the system (API and workers).
	Spans *tracetest.SpanRecorder
}

// CallGate lets the first `allow` provider calls through and holds the next
// ones until Release is closed; Blocked is closed when the first call is
// held, Abandoned when a held call is given up by its caller (its request
// context ends). With allow < 0 (the zero state after New)
// nothing is held.
type CallGate struct {
	mu        sync.Mutex
	allow     int
	calls     int
	armed     bool
	Blocked   chan struct{}
	Release   chan struct{}
	Abandoned chan struct{}
}

// Arm holds every provider call after the next allow ones.
func (g *CallGate) Arm(allow int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allow, g.calls, g.armed = allow, 0, true
	g.Blocked, g.Release, g.Abandoned = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// Rearm releases the held calls and holds every call after the next allow
// ones, in one step: no call passes unheld between the two, as it could
// between Open and Arm.
func (g *CallGate) Rearm(allow int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		close(g.Release)
	}
	g.allow, g.calls, g.armed = allow, 0, true
	g.Blocked, g.Release, g.Abandoned = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// Open releases held calls and disarms the gate.
func (g *CallGate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		close(g.Release)
	}
}

// Wrap holds next's provider calls while the gate is armed (the fake
// upstream's own /__fake/ endpoints are never held).
func (g *CallGate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/__fake/") {
			g.mu.Lock()
			var wait, abandoned chan struct{}
			if g.armed {
				g.calls++
				if g.calls > g.allow {
					if g.calls == g.allow+1 {
						close(g.Blocked)
					}
					wait, abandoned = g.Release, g.Abandoned
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

// Opts configures New; nil is the defaults.
type Opts struct {
	// env overrides environment variables (BUILDRISK_DAILY_CAP_MOLIT=5 ...).
	Env map[string]string
	// fake configures the fake upstream.
	Fake fakeupstream.Config
	// now is the call-budget clock (nil: time.Now).
	Now func() time.Time
	// dbURL is the database to use instead of a fresh pgtest one (a
	// private cluster a test stops and starts).
	DBURL string
	// logs receives the system's JSON log lines (nil: discarded).
	Logs io.Writer
	// pgbouncer puts a private PgBouncer in transaction pooling mode
	// between the database and the api and worker processes (the test's
	// own pool, s.Pool, still connects directly).
	PgBouncer bool
}

// New builds the system for one test: the database, the fake upstream and
// the api are cleaned up with t; workers start on demand (StartWorker).
func New(t testing.TB, opts *Opts) *System {
	t.Helper()
	if opts == nil {
		opts = &Opts{}
	}
	// The api and the workers connect as the application role (no DDL, no
	// TRUNCATE), as deployed; ownerURL is the schema owner's. A test that
	// stops and starts its own cluster gives its database (opts.DBURL).
	ownerURL := opts.DBURL
	if ownerURL == "" {
		ownerURL = pgtest.NewDatabase(t)
	}
	s := &System{T: t, OwnerURL: ownerURL, DBURL: AppURL(t, ownerURL)}
	pool, err := pgxpool.New(context.Background(), s.DBURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.Pool = pool
	s.ServiceURL = s.DBURL
	if opts.PgBouncer {
		s.Bouncer = pgtest.StartPgBouncer(t, nil, s.DBURL, APIURL(t, ownerURL))
		s.ServiceURL = s.Bouncer.URL(t, s.DBURL)
	}
	s.Fake = fakeupstream.New(opts.Fake)
	s.Gate = &CallGate{}
	fakeServer := httptest.NewServer(s.Gate.Wrap(s.Fake))
	t.Cleanup(fakeServer.Close)
	s.FakeURL = fakeServer.URL

	vars := map[string]string{
		"DATABASE_URL":                     "unused-in-process",
		"BUILDRISK_API_TOKENS":             "operator:" + OperatorToken + ",viewer:" + ViewerToken,
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
		// The helpers poll one token every few milliseconds; the tests of
		// the per-token limit set it.
		"BUILDRISK_TOKEN_RATE_LIMIT": "0",
	}
	// Schedules are off unless a test turns one on: a cron tick must never
	// land in the middle of an unrelated test.
	for _, name := range jobset.Catalog().Names() {
		vars["BUILDRISK_SCHEDULE_"+strings.ToUpper(name)] = "off"
	}
	for k, v := range opts.Env {
		vars[k] = v
	}
	s.Vars = vars
	env, err := config.LoadEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	env.Now = opts.Now
	s.Env = env

	providers, spans := observabilitytest.NewProviders()
	s.Spans = spans
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.Logs != nil {
		logger = observability.NewLogger(opts.Logs, observability.LogFormatJSON, slog.LevelDebug)
	}
	s.Tel = &app.Telemetry{Providers: providers, Instruments: instruments, Logger: logger, Database: worker.NewDatabaseWatch(instruments, logger)}

	// The API has its own pool with the api role's statement and lock
	// timeouts, as `radar api` does.
	// It connects as the api's own role (radar_app_api), as radar_api does
	// in deploy/, through PgBouncer when the system has one.
	apiServiceURL := APIURL(t, ownerURL)
	if opts.PgBouncer {
		apiServiceURL = s.Bouncer.URL(t, apiServiceURL)
	}
	s.APIPool, err = dbpool.OpenAPI(context.Background(), env, apiServiceURL)
	require.NoError(t, err)
	t.Cleanup(s.APIPool.Close)
	s.Role = StartAPI(t, s.APIPool, env, s.Tel)
	s.API = httptest.NewServer(s.Role.Server().Handler())
	t.Cleanup(s.API.Close)
	return s
}

// RequireRequestsAgreeWithRiver fails the test when a request and the River
// job that delivers it disagree about work still to do (requesttest).
func (s *System) RequireRequestsAgreeWithRiver() {
	s.T.Helper()
	requesttest.RequireAgreement(s.T, s.Pool, s.Env.StaleAfter)
}

// StartAPI builds an api role on pool that serves no port itself (the test
// serves its handler) and reaps nothing on its own (the tests say which
// process reaps), starts it and stops it at cleanup.
func StartAPI(t testing.TB, pool *pgxpool.Pool, env *config.Config, tel *app.Telemetry) *app.API {
	t.Helper()
	role, err := app.NewAPI(pool, env, tel, app.APIOptions{NoReaper: true})
	require.NoError(t, err)
	require.NoError(t, role.Start(context.Background()))
	t.Cleanup(func() { _ = role.Stop(context.Background()) })
	return role
}

// StartWorker starts one in-process worker; it is stopped at cleanup.
func (s *System) StartWorker() (*app.Worker, *batch.Runner) {
	s.T.Helper()
	return s.StartWorkerWith(s.Pool, nil)
}

// StartWorkerWith starts a worker on its own pool with tuned configs.
func (s *System) StartWorkerWith(pool *pgxpool.Pool, tune func(*worker.Config, *batch.Config)) (*app.Worker, *batch.Runner) {
	s.T.Helper()
	w, err := app.NewWorker(pool, s.Env, s.Tel, app.WorkerOptions{Tune: tune})
	require.NoError(s.T, err)
	require.NoError(s.T, w.Start(context.Background()))
	s.T.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, w.Runner()
}

// Do sends a request with the given token and decodes the JSON answer.
func (s *System) Do(method, path, token, body string) (int, map[string]any) {
	s.T.Helper()
	req, err := http.NewRequest(method, s.API.URL+path, strings.NewReader(body))
	require.NoError(s.T, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.T, err)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		require.NoError(s.T, json.Unmarshal(raw, &out), "body: %s", raw)
	}
	return resp.StatusCode, out
}

// Post sends an operator's call.
func (s *System) Post(path, body string) (int, map[string]any) {
	return s.Do(http.MethodPost, path, OperatorToken, body)
}

// Get sends a viewer's call.
func (s *System) Get(path string) (int, map[string]any) {
	return s.Do(http.MethodGet, path, ViewerToken, "")
}

// RequestAptTrade posts an aptTrade request and returns its id.
func (s *System) RequestAptTrade(body string) string {
	s.T.Helper()
	status, out := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(s.T, http.StatusAccepted, status, "%v", out)
	return out["requestId"].(string)
}

// WaitRequest polls GET /v1/requests/{id} until its status is one of want.
func (s *System) WaitRequest(id string, want ...string) map[string]any {
	s.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, out := s.Get("/v1/requests/" + id)
		require.Equal(s.T, http.StatusOK, status)
		for _, w := range want {
			if out["status"] == w {
				return out
			}
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("request %s still %v, want %v: %v", id, out["status"], want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitChunksDone polls the request until its execution has committed at
// least n chunks, failing the test after a minute.
func (s *System) WaitChunksDone(id string, n int) {
	s.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, out := s.Get("/v1/requests/" + id)
		if exec, ok := out["execution"].(map[string]any); ok && exec["chunksDone"].(float64) >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("request %s: fewer than %d chunks committed after a minute: %v", id, n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Count runs a query that counts, on the test's own pool.
func (s *System) Count(query string, args ...any) int {
	s.T.Helper()
	var n int
	require.NoError(s.T, s.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// AptTradeBody is the body of an aptTrade request for regions and months.
func AptTradeBody(regions []string, from, to string) string {
	quoted := make([]string, len(regions))
	for i, r := range regions {
		quoted[i] = fmt.Sprintf("%q", r)
	}
	return fmt.Sprintf(`{"params":{"regions":[%s],"from":%q,"to":%q}}`, strings.Join(quoted, ","), from, to)
}

// Execution returns a request's execution, failing the test without one.
func Execution(t *testing.T, request map[string]any) map[string]any {
	t.Helper()
	exec, ok := request["execution"].(map[string]any)
	require.True(t, ok, "request has no execution: %v", request)
	return exec
}

// Metric reads one series of the system's metrics.
func (s *System) Metric(name string, labels map[string]string) float64 {
	s.T.Helper()
	v, err := observabilitytest.MetricValue(s.Tel.Providers, name, labels)
	require.NoError(s.T, err)
	return v
}

// CallsPerKey returns the fake upstream's counts for one endpoint.
func (s *System) CallsPerKey(endpoint string) map[string]int64 {
	return s.Fake.Stats().Calls[endpoint]
}

// FmtInt formats n in decimal.
func FmtInt(n int) string { return fmt.Sprint(n) }

// RequestEnqueuer is the request owner the system inserts requests with.
type RequestEnqueuer = request.Owner

// DecodeJobs returns aptTrade's entry of a GET /v1/jobs answer.
func DecodeJobs(t *testing.T, body []byte) map[string]any {
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
