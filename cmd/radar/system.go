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

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/batch"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/request"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/jobs/upstream"
	"github.com/buildrisk/radar/jobs/worker"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/sql/migrations"
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
func estimators(env *envConfig) map[string]request.EstimateFunc {
	today := func() time.Time {
		now := time.Now
		if env.Now != nil {
			now = env.Now
		}
		return upstream.Day(now(), env.Location)
	}
	return map[string]request.EstimateFunc{
		jobs.CreditEval:  credit.Estimator(today),
		jobs.FilingParse: filing.Estimate,
		jobs.StockPrice:  stockprice.Estimate,
	}
}

// newEnqueuer returns the one way requests are inserted (api, CLI, chains,
// schedules): stale-worker cleanup, then dedupe, under the job's lock.
// riverClient nil records requests the caller runs itself.
func newEnqueuer(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], env *envConfig, tel *telemetry) (*request.Enqueuer, error) {
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: env.StaleAfter, Instruments: tel.instruments, Logger: tel.logger})
	return request.NewEnqueuer(pool, riverClient, request.Config{
		Catalog: jobs.Default(), DailyCaps: env.capsByName(), Estimators: estimators(env),
		Instruments: tel.instruments, Logger: tel.logger,
		Cleanup: func(ctx context.Context, tx pgx.Tx, job string) error {
			_, err := reaper.ReapTx(ctx, tx, job)
			return err
		},
	})
}

// telemetry is one process's providers, instruments and logger.
type telemetry struct {
	providers   *observability.Providers
	instruments *observability.Instruments
	logger      *slog.Logger
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
	return &telemetry{providers: providers, instruments: instruments, logger: logger}, nil
}

// shutdown flushes telemetry; it runs last, after drain.
func (t *telemetry) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.providers.Shutdown(ctx)
}

func openPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, "main")
}

// openHeartbeatPool opens the small pool a worker's or CLI's heartbeats use.
func openHeartbeatPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, url, maxConns, "heartbeat")
}

// openNamedPool opens a pool of at most maxConns connections (0: pgxpool's
// default); name tells its statistics apart from another pool's.
func openNamedPool(ctx context.Context, url string, maxConns int32, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageError{fmt.Errorf("DATABASE_URL: %w", err)}
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
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
		BaseURLs: env.UpstreamURLs, Keys: env.Keys, DailyCaps: env.DailyCaps, Location: env.Location,
		Now: env.Now, Instruments: tel.instruments, FanOut: env.FanOut, Holder: holder,
		// Provider calls are client spans.
		HTTPClient: &http.Client{
			Timeout:   upstream.RequestTimeoutDefault,
			Transport: otelhttp.NewTransport(providerTransport(env.FanOut), otelhttp.WithTracerProvider(tel.providers.Tracer)),
		},
	})
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

// scheduleInfo tells the API a job's schedule and its next run.
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
		next := s.Next.Next(time.Now()).In(env.Location)
		return s.Spec, &next
	}
}

// newInsertOnlyRiver returns a River client that only inserts (no queues,
// no workers), with the trace propagation of every insert. Its
// FetchCooldown is River's minimum because River also spaces an inserting
// client's NOTIFYs by it: with the default 100 ms, a request inserted soon
// after another sent no notification and waited for the workers' poll.
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
	runnerConfig := batch.Config{
		WorkerID: workerID, Jobs: registry(env), Upstream: up, Instruments: tel.instruments,
		Logger: tel.logger, FanOut: env.FanOut, Tracer: tel.providers.Tracer.Tracer("github.com/buildrisk/radar/jobs/batch"),
		Chain: func(ctx context.Context, tx pgx.Tx, finished *batch.Finished) error {
			_, err := enqueuer.EnqueueNext(ctx, tx, finished.Job, finished.Params)
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
		HeartbeatInterval: env.HeartbeatInterval,
		StaleAfter:        env.StaleAfter,
		ReapInterval:      env.ReapInterval,
		DrainTimeout:      env.DrainTimeout,
		Retention:         env.WorkerRetention,
		MaxConcurrentJobs: env.WorkerConcurrency,
		Instruments:       tel.instruments,
		Logger:            tel.logger,
		RiverPlugins:      riverPlugins(tel),
		Gauges: &worker.Gauges{
			Pool: pool, Jobs: jobs.Default().Names(), Upstream: up, StaleAfter: env.StaleAfter, Instruments: tel.instruments,
		},
		Schedules: env.Schedules,
		ScheduleEnqueue: func(ctx context.Context, p *request.EnqueueParams) (*request.EnqueueResult, error) {
			return enqueuer.Enqueue(ctx, p)
		},
	}
	if tune != nil {
		tune(&workerConfig, &runnerConfig)
	}
	runner, err := batch.NewRunner(pool, runnerConfig)
	if err != nil {
		return nil, nil, err
	}
	w, err := worker.New(pool, runner, workerConfig)
	if err != nil {
		return nil, nil, err
	}
	if enqueuer, err = newEnqueuer(pool, w.River(), env, tel); err != nil {
		return nil, nil, err
	}
	return w, runner, nil
}

// newAPIServer builds the api role's server with an insert-only River client.
func newAPIServer(pool *pgxpool.Pool, env *envConfig, tel *telemetry) (*api.Server, error) {
	insertOnly, err := newInsertOnlyRiver(pool, tel)
	if err != nil {
		return nil, err
	}
	enqueuer, err := newEnqueuer(pool, insertOnly, env, tel)
	if err != nil {
		return nil, err
	}
	return api.New(pool, api.Config{
		Tokens: env.Tokens, Insecure: env.InsecureNoAuth, Catalog: jobs.Default(), Enqueuer: enqueuer,
		StaleAfter: env.StaleAfter, Instruments: tel.instruments, MetricsHandler: tel.providers.MetricsHandler(),
		Logger: tel.logger, Version: version, Schedules: scheduleInfo(env),
	})
}

// serveHTTP serves handler on addr in the background and returns the
// shutdown function and the address it really listens on (addr may say :0).
func serveHTTP(ctx context.Context, addr string, handler http.Handler, logger *slog.Logger) (func(context.Context) error, string, error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("error listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", slog.String("addr", addr), slog.String("error", err.Error()))
		}
	}()
	return srv.Shutdown, listener.Addr().String(), nil
}
