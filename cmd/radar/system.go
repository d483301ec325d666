package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"riverqueue.com/riverui"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/coverage"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
)

// registry returns the implementation of every catalog job.
func registry(env *envConfig) map[string]batch.Job {
	return map[string]batch.Job{
		jobs.CorpCodeSync: corpcode.Job{},
		jobs.FilingParse:  filing.Job{},
		jobs.StockPrice:   stockprice.Job{},
		jobs.AptTrade:     apttrade.Job{},
		jobs.CreditEval:   credit.New(),
		jobs.Metrics:      riskmetric.Job{},
		jobs.Rules:        riskrule.Job{Thresholds: env.RuleThresholds},
	}
}

// estimators returns the call estimates that need the database. "Today"
// follows the configured clock and BUILDRISK_TIMEZONE, like the call budget.
func estimators(env *envConfig, db queries.DBTX) map[string]request.EstimateFunc {
	today := budgetDay(env, db)
	return map[string]request.EstimateFunc{
		jobs.CreditEval:  credit.Estimator(today),
		jobs.FilingParse: filing.Estimate,
		jobs.StockPrice:  stockprice.Estimate,
	}
}

// budgetDay returns the call budget's current day: the date in
// BUILDRISK_TIMEZONE of the database's clock (read through db at each
// call), or of env.Now when a test sets one; never the process's clock,
// unless the database does not answer (nothing is charged then).
func budgetDay(env *envConfig, db queries.DBTX) func() time.Time {
	return func() time.Time {
		if env.Now != nil {
			return upstream.Day(env.Now(), env.Location)
		}
		ctx, cancel := context.WithTimeout(context.Background(), databaseProbeTimeout(env))
		defer cancel()
		now, err := queries.New().DatabaseNow(ctx, db)
		if err != nil {
			now = time.Now()
		}
		return upstream.Day(now, env.Location)
	}
}

// newEnqueuer returns the one way requests are inserted (api, CLI, chains,
// schedules): stale-worker cleanup, then dedupe, under the job's lock.
// riverClient nil records requests the caller runs itself.
func newEnqueuer(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *envConfig, tel *telemetry) (*request.Enqueuer, error) {
	return newEnqueuerFor(jobs.Default(), pool, riverClient, request.RiverCanceller(riverClient), env, tel)
}

// newCLIEnqueuer returns the enqueuer of `radar run`'s own request, which
// has no River job (the CLI runs it); its cleanup still cancels the River
// job of a dead worker's request through cancelWith.
func newCLIEnqueuer(pool *pgxpool.Pool, cancelWith *river.Client[pgx.Tx], env *envConfig, tel *telemetry) (*request.Enqueuer, error) {
	return newEnqueuerFor(jobs.Default(), pool, nil, request.RiverCanceller(cancelWith), env, tel)
}

// newEnqueuerFor is newEnqueuer for another catalog (benchmarks enqueue
// no-op jobs through the production path).
func newEnqueuerFor(catalog *jobs.Catalog, pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], canceller request.JobCanceller, env *envConfig, tel *telemetry) (*request.Enqueuer, error) {
	// The cleanup reaps dead workers' runs, and a reaped run resumes through
	// this same enqueuer: the two refer to each other.
	var enqueuer *request.Enqueuer
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: env.StaleAfter, Instruments: tel.instruments, Logger: tel.logger, Reachability: tel.reach,
		River: canceller,
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := enqueuer.ResumeTx(ctx, tx, stopped)
			return err
		},
	})
	enqueuer, err := request.NewEnqueuer(pool, riverClient, request.Config{
		Catalog: catalog, DailyCaps: env.capsByName(), Estimators: estimators(env, pool),
		Instruments: tel.instruments, Logger: tel.logger, Resume: env.AutoResume,
		StaleAfter: env.StaleAfter,
		Cleanup: func(ctx context.Context, tx pgx.Tx, job string) error {
			_, err := reaper.ReapTx(ctx, tx, job)
			return err
		},
	})
	return enqueuer, err
}

// telemetry is one process's providers, instruments and logger.
type telemetry struct {
	providers   *observability.Providers
	instruments *observability.Instruments
	logger      *slog.Logger
	// reach is the process's link to the database as its heartbeats (a
	// worker) or its probe (the api) see it; every reaper of the process
	// waits on it after a cut. Nil: each reaper keeps its own.
	reach *worker.Reachability
}

func newTelemetry(ctx context.Context, env *envConfig, role, workerID, defaultFormat string) (*telemetry, error) {
	providers, err := observability.NewProviders(ctx, observability.Config{ServiceVersion: version, Role: role, WorkerID: workerID})
	if err != nil {
		return nil, fmt.Errorf("error starting telemetry: %w", err)
	}
	providers.SetGlobal()
	instruments, err := observability.NewInstruments(providers.Meter)
	if err != nil {
		return nil, fmt.Errorf("error creating instruments: %w", err)
	}
	providerNames := make([]string, len(upstream.Providers))
	for i, p := range upstream.Providers {
		providerNames[i] = string(p)
	}
	instruments.InitSeries(ctx, jobs.Default().Names(), providerNames)
	logger := observability.NewLogger(os.Stderr, orDefault(env.LogFormat, defaultFormat), slog.LevelInfo).With(slog.String("role", role))
	slog.SetDefault(logger)
	return &telemetry{providers: providers, instruments: instruments, logger: logger, reach: worker.NewReachability()}, nil
}

// shutdown flushes telemetry; it runs last, after drain.
func (t *telemetry) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.providers.Shutdown(ctx)
}

// openPool opens a process's main pool of at most maxConns connections (0:
// pgxpool's default). statementTimeout, when set, becomes the connections'
// statement_timeout, so no statement of the process (a lock wait included)
// can outlast it, whatever its caller does, and bounds the time to open a
// connection. txPooling (BUILDRISK_DB_PGBOUNCER=transaction) adapts the
// pool to PgBouncer's transaction pooling (poolConfig).
// limits are the server-side limits of its sessions (sessionLimits).
func openPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits sessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "main", limits)
}

// openHeartbeatPool opens the small pool a worker's or CLI's heartbeats use,
// so they never wait behind chunk work for a connection.
func openHeartbeatPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, limits sessionLimits) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, statementTimeout, txPooling, "heartbeat", limits)
}

// openNamedPool opens a pool; name tells its statistics apart from another
// pool's.
func openNamedPool(ctx context.Context, url string, maxConns int32, statementTimeout time.Duration, txPooling bool, name string, limits sessionLimits) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(url, maxConns, txPooling)
	if err != nil {
		return nil, err
	}
	limits.apply(cfg, txPooling)
	if statementTimeout > 0 {
		// Behind PgBouncer's transaction pooling a startup parameter is
		// refused; the worker's and the CLI's calls each carry a deadline
		// of the same length (worker.Config.DBTimeout), which pgx enforces
		// with a cancel request that PgBouncer forwards.
		if !txPooling {
			cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(statementTimeout.Milliseconds(), 10)
		}
		// A database that does not answer at all (a dropped network) must
		// not hold a new connection longer than a statement either.
		if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > statementTimeout {
			cfg.ConnConfig.ConnectTimeout = statementTimeout
		}
	}
	return connectPool(ctx, cfg, name)
}

// sessionLimits are the server-side limits every connection of a process
// carries, so that the server itself ends the transaction of a process that
// went silent inside it (SIGSTOP, a network partition that keeps the
// socket open, a node gone) instead of keeping it, and its row locks, for
// as long as TCP takes to notice (7200 s + 9 × 75 s by default). They
// derive from the fencing window (envConfig.sessionLimits), so a dead
// worker's transaction ends before any reaper can find it stale.
type sessionLimits struct {
	// appName becomes application_name unless DATABASE_URL or PGAPPNAME
	// set one: a worker's id, by which the reaper finds (and ends) the
	// backends of a stale worker.
	appName string
	// idleInTransaction is idle_in_transaction_session_timeout.
	idleInTransaction time.Duration
	// transactionTimeout is transaction_timeout, set after connecting on
	// PostgreSQL 17 and later only (older servers refuse the name).
	transactionTimeout time.Duration
	// keepalive bounds how long a dead peer goes unnoticed on an idle
	// connection, on both sides: the server's tcp_keepalives_* and
	// tcp_user_timeout, and the client's socket keepalives.
	keepalive time.Duration
}

// sessionLimits returns the limits of a process's connections: idle in a
// transaction for no longer than BUILDRISK_FENCE_AFTER (no transaction of
// the service waits on anything but the database), no transaction older
// than FENCE_AFTER + HEARTBEAT_INTERVAL + DB_STATEMENT_TIMEOUT (less than
// STALE_AFTER, by CheckFencing), and a dead peer noticed within about
// FENCE_AFTER.
func (c *envConfig) sessionLimits(appName string) sessionLimits {
	return sessionLimits{
		appName:            appName,
		idleInTransaction:  c.FenceAfter,
		transactionTimeout: c.FenceAfter + c.HeartbeatInterval + c.DBTimeout,
		keepalive:          c.FenceAfter,
	}
}

// apply sets the limits on cfg. Behind PgBouncer's transaction pooling only
// application_name and the client's keepalives are set: PgBouncer refuses
// other startup parameters, and a session SET would follow the server
// connection to other clients; the operator sets them on the role instead
// (docs/operations.md, "Server-side limits").
func (l sessionLimits) apply(cfg *pgxpool.Config, txPooling bool) {
	cc := cfg.ConnConfig
	if l.appName != "" && cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = l.appName
	}
	var idle, interval time.Duration
	if l.keepalive > 0 {
		idle, interval = max(l.keepalive/3, time.Second), max(l.keepalive/9, time.Second)
		dialer := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: 3}}
		cc.DialFunc = dialer.DialContext
	}
	if txPooling {
		return
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
	if l.idleInTransaction > 0 {
		cc.RuntimeParams["idle_in_transaction_session_timeout"] = ms(l.idleInTransaction)
	}
	if l.keepalive > 0 {
		secs := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
		cc.RuntimeParams["tcp_keepalives_idle"] = secs(idle)
		cc.RuntimeParams["tcp_keepalives_interval"] = secs(interval)
		cc.RuntimeParams["tcp_keepalives_count"] = "3"
		cc.RuntimeParams["tcp_user_timeout"] = ms(l.keepalive)
	}
	if l.transactionTimeout > 0 {
		timeout := ms(l.transactionTimeout)
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if serverMajor(conn.PgConn().ParameterStatus("server_version")) >= 17 {
				if err := queries.New().SessionTransactionTimeoutSet(ctx, conn, timeout); err != nil {
					return fmt.Errorf("error setting transaction_timeout: %w", err)
				}
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	}
}

// serverMajor returns the major version of a server_version such as
// "17.2 (Debian 17.2-1)", 0 when it cannot tell.
func serverMajor(version string) int {
	end := strings.IndexFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(version)
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}

// openAPIPool opens the api's pool: every connection runs with the api's
// statement_timeout and lock_timeout, so a locked table or a runaway query
// costs a call a few seconds and a 503, never a hang. Behind PgBouncer's
// transaction pooling the api sets them per transaction instead
// (apiTxSettings).
func openAPIPool(ctx context.Context, env *envConfig, url string) (*pgxpool.Pool, error) {
	cfg, err := apiPoolConfig(env, url)
	if err != nil {
		return nil, err
	}
	return connectPool(ctx, cfg, "api")
}

// apiPoolConfig is the configuration of the api's pool.
func apiPoolConfig(env *envConfig, url string) (*pgxpool.Config, error) {
	cfg, err := poolConfig(url, env.apiMaxConns(), env.TxPooling)
	if err != nil {
		return nil, err
	}
	if !env.TxPooling {
		setAPITimeouts(cfg.ConnConfig, env)
	}
	limits := env.sessionLimits("")
	// An api transaction may run statements up to its statement_timeout.
	limits.transactionTimeout = max(limits.transactionTimeout, 2*env.APIStatementTimeout)
	limits.apply(cfg, env.TxPooling)
	// The api's reads are planned at every call (queries.PlanEachCall in
	// the api), never from a plan cached on a long-lived connection, which
	// outlives the history it was chosen for. The enqueue's statements
	// (lookups by key, River's INSERT, the request row) keep pgx's cached
	// statements: planning them at every call cost each request's pickup
	// about 0.7 ms (BENCHMARKS.md).
	return cfg, nil
}

// setAPITimeouts sets the api's statement and lock timeouts as session
// parameters of every connection (sent in the startup message).
func setAPITimeouts(cfg *pgx.ConnConfig, env *envConfig) {
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(env.APIStatementTimeout.Milliseconds(), 10)
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(env.APILockTimeout.Milliseconds(), 10)
}

// apiTxSettings returns the api's timeouts as per-transaction settings
// behind PgBouncer's transaction pooling, nil otherwise (they are the
// connections' session settings then).
func apiTxSettings(env *envConfig) *pgtx.TxSettings {
	if !env.TxPooling {
		return nil
	}
	return &pgtx.TxSettings{StatementTimeout: env.APIStatementTimeout, LockTimeout: env.APILockTimeout}
}

// txPoolingExecMode is the pgx query mode behind PgBouncer's transaction
// pooling. pgx's default caches named prepared statements per connection,
// but PgBouncer 1.18 (Debian bookworm) hands each transaction whichever
// server connection is free and has no protocol-level support for prepared
// statements (max_prepared_statements came in 1.21): a statement prepared
// on one server connection "does not exist" on the next, or "already
// exists" there. CacheDescribe caches only the statements' parameter and
// result types and runs every query as an unnamed statement, parse to
// result in one round trip, so nothing outlives the message exchange.
const txPoolingExecMode = pgx.QueryExecModeCacheDescribe

// poolConfig parses url into a pool of at most maxConns connections (0:
// pgxpool's default), traced; txPooling selects txPoolingExecMode.
func poolConfig(url string, maxConns int32, txPooling bool) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageError{fmt.Errorf("DATABASE_URL: %w", err)}
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if txPooling {
		cfg.ConnConfig.DefaultQueryExecMode = txPoolingExecMode
	}
	return cfg, nil
}

// connectPool opens the pool and checks the database answers; name labels
// the pool's statistics.
func connectPool(ctx context.Context, cfg *pgxpool.Config, name string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("error creating database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("error connecting to the database: %w", err)
	}
	_ = otelpgx.RecordStats(pool, otelpgx.WithStatsAttributes(attribute.String("pool", name)))
	return pool, nil
}

// checkSchema refuses to serve on a schema that is behind.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrations.Check(ctx, pool); err != nil {
		if errors.Is(err, migrations.ErrSchemaBehind) {
			return usageError{err}
		}
		return err
	}
	return nil
}

// newWorkerID returns pid@hostname#boot and its parts: boot is random per
// start, because in a container the pid is always 1.
func newWorkerID() (id, hostname, boot string) {
	hostname, _ = os.Hostname()
	if hostname == "" {
		hostname = "localhost"
	}
	buf := make([]byte, 4)
	_, _ = rand.Read(buf)
	boot = hex.EncodeToString(buf)
	return fmt.Sprintf("%d@%s#%s", os.Getpid(), hostname, boot), hostname, boot
}

// newUpstream returns the provider client of a process; holder (the worker
// id) names the process in the leases of the daily caps it takes.
func newUpstream(pool *pgxpool.Pool, env *envConfig, tel *telemetry, holder string) (*upstream.Client, error) {
	return upstream.NewClient(pool, upstream.ClientConfig{
		BaseURLs: env.UpstreamURLs, Keys: env.Keys, DailyCaps: env.DailyCaps, Rates: env.Rates, Location: env.Location,
		Logger: tel.logger,
		Now:    env.Now, Instruments: tel.instruments, FanOut: env.FanOut, Holder: holder,
		RequestTimeout: env.ProviderTimeout,
		AllowHTTP:      env.InsecureHTTPUpstream,
		Transport:      providerTransport(env.FanOut),
		WrapTransport:  providerTracing(tel.providers),
	})
}

// providerTracing makes provider calls client spans (the key is added below
// them) when spans are recorded. When no exporter will read them it leaves
// the wrapper out: at fan-out 64 the span, its attributes and otelhttp's
// own metrics cost more CPU per call than the key, the budget and the
// request together (BENCHMARKS.md).
func providerTracing(providers *observability.Providers) func(http.RoundTripper) http.RoundTripper {
	if !providers.SpansRecorded {
		return nil
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(providers.Tracer), otelhttp.WithMeterProvider(providers.Meter))
	}
}

// providerTransport keeps as many idle connections per provider as the
// fan-out has slots, so pooled calls reuse connections instead of dialling.
func providerTransport(fanOut int) http.RoundTripper {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(fanOut, 8)
	return transport
}

func riverPlugins(tel *telemetry) []rivertype.Plugin {
	return []rivertype.Plugin{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation: true,
		MeterProvider:          tel.providers.Meter,
		TracerProvider:         tel.providers.Tracer,
	})}
}

// scheduleInfo tells the API a job's schedule and its next due time.
func scheduleInfo(env *envConfig) func(job string) (string, *time.Time) {
	byJob := map[string]worker.Schedule{}
	for _, s := range env.Schedules {
		byJob[s.Job] = s
	}
	return func(job string) (string, *time.Time) {
		s, ok := byJob[job]
		if !ok {
			return "", nil
		}
		next := s.Next.Next(env.now()).In(env.Location)
		return s.Spec, &next
	}
}

// observeSchedules exports, from any process, each scheduled job's period
// and every job's freshness read from the database, so that the api and
// every worker serve the same values.
func observeSchedules(ctx context.Context, pool *pgxpool.Pool, env *envConfig, tel *telemetry) {
	for _, s := range env.Schedules {
		tel.instruments.SchedulePeriodSet(ctx, s.Job, s.Period)
	}
	q := queries.New()
	tel.instruments.SetJobFreshnessSource(func(ctx context.Context) (map[string]time.Time, error) {
		rows, err := q.JobFreshnessByJob(ctx, pool)
		if err != nil {
			return nil, err
		}
		out := make(map[string]time.Time, len(rows))
		for _, r := range rows {
			out[r.Job] = r.Since
		}
		return out, nil
	})
}

// observeCoverage exports, from any process, every job's coverage counted
// from the database (jobs/coverage, cached for BUILDRISK_COVERAGE_MAX_AGE),
// and returns the reader, which the api also serves as GET /v1/coverage.
func observeCoverage(ctx context.Context, pool *pgxpool.Pool, env *envConfig, tel *telemetry) *coverage.Reader {
	r := coverage.New(pool, coverage.Config{
		Catalog: jobs.Default(), Location: env.Location, MaxAge: env.CoverageMaxAge, Now: env.now,
		OnError: func(ctx context.Context, job string, err error) {
			tel.instruments.CoverageCheckFailed(ctx, job)
			tel.logger.WarnContext(ctx, "coverage count failed", slog.String("job", job), slog.String("error", err.Error()))
		},
	})
	tel.instruments.InitCoverageSeries(ctx, r.Jobs())
	tel.instruments.SetCoverageSource(func(ctx context.Context) ([]observability.CoverageSample, error) {
		snap, err := r.Snapshot(ctx)
		out := make([]observability.CoverageSample, len(snap))
		for i, c := range snap {
			y, m, d := c.DataDate.Date()
			out[i] = observability.CoverageSample{
				Job: c.Job, Targets: c.Targets, Missing: c.Missing(), AsOf: c.AsOf,
				DataDateStart: time.Date(y, m, d, 0, 0, 0, 0, env.Location),
			}
		}
		return out, err
	})
	return r
}

// fanOutJobs are the jobs whose chunks fan out over BUILDRISK_FANOUT slots
// (batch.FanOut).
var fanOutJobs = []string{jobs.CreditEval, jobs.StockPrice}

// observeFanOut exports buildrisk_fanout_capacity (BUILDRISK_FANOUT) and
// buildrisk_fanout_inflight (0) for every fan-out job from the worker's
// start, so a rule or a dashboard reading them sees a series before the
// first fan-out job ran.
func observeFanOut(ctx context.Context, env *envConfig, tel *telemetry) {
	for _, job := range fanOutJobs {
		tel.instruments.FanoutCapacitySet(ctx, job, int64(env.FanOut))
		tel.instruments.FanoutInflightAdd(ctx, job, 0)
	}
}

// newInsertOnlyRiver returns a River client that only inserts (no queues,
// no workers), with the trace propagation of every insert. River's InsertTx
// announces each job to the workers itself, at most once per FetchCooldown
// per queue: at River's minimum, so that back-to-back requests each wake a
// worker instead of waiting for its fetch poll.
func newInsertOnlyRiver(pool *pgxpool.Pool, tel *telemetry) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: tel.logger, Plugins: riverPlugins(tel), FetchCooldown: river.FetchCooldownMin,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river client: %w", err)
	}
	return client, nil
}

// tuneFunc adjusts the worker's and runner's configs before they are built
// (tests shorten intervals or disable the reaper); nil changes nothing.
type tuneFunc func(*worker.Config, *batch.Config)

// withHeartbeatPool gives the worker's registry heartbeats their own pool.
func withHeartbeatPool(pool *pgxpool.Pool) tuneFunc {
	return func(wc *worker.Config, _ *batch.Config) { wc.HeartbeatPool = pool }
}

// newWorker builds the worker role's parts.
func newWorker(pool *pgxpool.Pool, env *envConfig, tel *telemetry, workerID, hostname, boot string, tune tuneFunc) (*worker.Worker, *batch.Runner, error) {
	up, err := newUpstream(pool, env, tel, workerID)
	if err != nil {
		return nil, nil, err
	}
	// Chains and schedules enqueue through the same path as the API (cleanup,
	// lock, dedupe); the enqueuer needs the worker's River client, made below.
	var enqueuer *request.Enqueuer
	var w *worker.Worker
	scheduleEnqueuer := &lateEnqueuer{}
	runnerConfig := batch.Config{
		WorkerID: workerID, Jobs: registry(env), Upstream: up, Instruments: tel.instruments,
		Logger: tel.logger, FanOut: env.FanOut, Tracer: tel.providers.Tracer.Tracer("github.com/buildrisk/radar/queue/batch"),
		// The worker, made below, fences its runs through its presence.
		Fence:              batch.FenceFunc(func() <-chan struct{} { return w.Fenced() }),
		DBTimeout:          env.DBTimeout,
		LeaseCheckInterval: env.HeartbeatInterval,
		Chain: func(ctx context.Context, tx pgx.Tx, finished *batch.Finished) error {
			_, err := enqueuer.EnqueueNext(ctx, tx, finished.Job, finished.Params)
			return err
		},
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := enqueuer.ResumeTx(ctx, tx, stopped)
			return err
		},
	}
	workerConfig := worker.Config{
		ID:                workerID,
		Hostname:          hostname,
		PID:               os.Getpid(),
		Boot:              boot,
		Version:           version,
		ConfiguredKeys:    env.configuredKeyNames(),
		DailyCaps:         env.capsByName(),
		HeartbeatInterval: env.HeartbeatInterval,
		StaleAfter:        env.StaleAfter,
		FenceAfter:        env.FenceAfter,
		DBTimeout:         env.DBTimeout,
		ReapInterval:      env.ReapInterval,
		DrainTimeout:      env.DrainTimeout,
		Retention:         env.WorkerRetention,
		MaxConcurrentJobs: env.WorkerConcurrency,
		PollOnly:          env.TxPooling,
		Instruments:       tel.instruments,
		Logger:            tel.logger,
		Reachability:      tel.reach,
		RiverPlugins:      riverPlugins(tel),
		Gauges: &worker.Gauges{
			Pool: pool, Jobs: jobs.Default().Names(), Upstream: up, StaleAfter: env.StaleAfter, Instruments: tel.instruments,
		},
		Schedules:        env.Schedules,
		ScheduleEnqueuer: scheduleEnqueuer,
		Now:              env.Now,
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := enqueuer.ResumeTx(ctx, tx, stopped)
			return err
		},
	}
	if tune != nil {
		tune(&workerConfig, &runnerConfig)
	}
	runner, err := batch.NewRunner(pool, runnerConfig)
	if err != nil {
		return nil, nil, err
	}
	w, err = worker.New(pool, runner, workerConfig)
	if err != nil {
		return nil, nil, err
	}
	if enqueuer, err = newEnqueuer(pool, w.River(), env, tel); err != nil {
		return nil, nil, err
	}
	scheduleEnqueuer.Enqueuer = enqueuer
	observeSchedules(context.Background(), pool, env, tel)
	observeCoverage(context.Background(), pool, env, tel)
	observeFanOut(context.Background(), env, tel)
	return w, runner, nil
}

// lateEnqueuer is the worker's enqueuer, set once the worker's River client
// it inserts with exists (before the worker starts).
type lateEnqueuer struct{ *request.Enqueuer }

// apiRequestTimeout bounds one /v1 call's database work: two statements'
// worth, so the server's statement_timeout fires first and names the cause.
func apiRequestTimeout(env *envConfig) time.Duration { return 2 * env.APIStatementTimeout }

// newAPIServer builds the api role's server with an insert-only River client,
// and River UI on that client (the api authenticates it; see api.Config).
// River UI's background services and the database probe behind
// buildrisk_database_up run until ctx is done.
func newAPIServer(ctx context.Context, pool *pgxpool.Pool, env *envConfig, tel *telemetry) (*api.Server, error) {
	insertOnly, err := newInsertOnlyRiver(pool, tel)
	if err != nil {
		return nil, err
	}
	enqueuer, err := newEnqueuer(pool, insertOnly, env, tel)
	if err != nil {
		return nil, err
	}
	riverUI, err := newRiverUI(ctx, insertOnly, tel)
	if err != nil {
		return nil, err
	}
	observeSchedules(context.Background(), pool, env, tel)
	cover := observeCoverage(context.Background(), pool, env, tel)
	startDatabaseProbe(ctx, pool, env.HeartbeatInterval, databaseProbeTimeout(env), tel.instruments, tel.reach)
	return api.New(pool, api.Config{
		Tokens: env.Tokens, TokenNames: env.TokenNames, SessionKey: env.SessionKey, Insecure: env.InsecureNoAuth, Catalog: jobs.Default(), Enqueuer: enqueuer,
		StaleAfter: env.StaleAfter, Instruments: tel.instruments, MetricsHandler: tel.providers.MetricsHandler(),
		Logger: tel.logger, Version: version, Schedules: scheduleInfo(env), MaxBodyBytes: env.MaxBodyBytes,
		RequestTimeout: apiRequestTimeout(env), TxSettings: apiTxSettings(env),
		DailyCaps: env.capsByName(), Today: budgetDay(env, pool), RiverUI: riverUI, Coverage: cover,
	})
}

// newRiverUI returns River UI (riverqueue.com/riverui) for job-level
// inspection, served under /riverui/. It reads River's tables through the
// client's driver; its buttons (cancel, retry, delete) act on River jobs,
// which is why only operators reach it.
func newRiverUI(ctx context.Context, client *river.Client[pgx.Tx], tel *telemetry) (*riverui.Handler, error) {
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    tel.logger,
		Prefix:    "/riverui",
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river ui: %w", err)
	}
	if err := handler.Start(ctx); err != nil {
		return nil, fmt.Errorf("error starting river ui: %w", err)
	}
	return handler, nil
}

// serverTimeouts are the HTTP server timeouts of the api and admin
// listeners: a slow or idle client cannot hold a connection (or a goroutine
// and its buffers) for longer.
type serverTimeouts struct {
	// ReadHeader bounds reading the request line and headers (slowloris).
	ReadHeader time.Duration
	// Read bounds reading the whole request, body included.
	Read time.Duration
	// Write bounds the handler plus writing the answer; it exceeds the
	// database statement and lock timeouts, so a slow query answers 503
	// instead of a dropped connection.
	Write time.Duration
	// Idle bounds a keep-alive connection between requests.
	Idle time.Duration
}

// serverTimeoutsDefault are the timeouts radar serves with.
var serverTimeoutsDefault = serverTimeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB).
const maxHeaderBytes = 64 << 10

// newHTTPServer returns the server of the api and admin listeners.
func newHTTPServer(handler http.Handler, t serverTimeouts) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// serveHTTP serves handler on addr in the background and returns the
// shutdown function and the address it really listens on (addr may say :0).
func serveHTTP(ctx context.Context, addr string, handler http.Handler, logger *slog.Logger) (func(context.Context) error, string, error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("error listening on %s: %w", addr, err)
	}
	srv := newHTTPServer(handler, serverTimeoutsDefault)
	go func() {
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", slog.String("addr", addr), slog.String("error", err.Error()))
		}
	}()
	return srv.Shutdown, listener.Addr().String(), nil
}
