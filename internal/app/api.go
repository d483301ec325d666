package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"riverqueue.com/riverui"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
)

// RunAPI serves the API until SIGINT/SIGTERM. It refuses to start without
// tokens (unless BUILDRISK_INSECURE_NO_AUTH=1) or on a schema that is behind.
func RunAPI(ctx context.Context, env *config.Config) error {
	if err := config.RequireDatabaseURL(env); err != nil {
		return err
	}
	if !env.TokensSet && !env.InsecureNoAuth {
		return config.Usage(errors.New("BUILDRISK_API_TOKENS (or BUILDRISK_API_TOKENS_FILE) is not set: give viewer:TOKEN,operator:TOKEN, or set BUILDRISK_INSECURE_NO_AUTH=1 for a trusted network"))
	}
	tel, err := NewTelemetry(ctx, env, "api", "", "json")
	if err != nil {
		return err
	}
	defer tel.Shutdown()
	pool, err := dbpool.OpenAPI(ctx, env, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := dbpool.CheckSchema(ctx, pool); err != nil {
		return err
	}
	role, err := NewAPI(ctx, pool, env, tel)
	if err != nil {
		return err
	}
	shutdown, addr, err := ServeHTTP(ctx, env.HTTPAddr, "BUILDRISK_HTTP_ADDR", role.Handler(), tel.Logger)
	if err != nil {
		return err
	}
	tel.Logger.Info("api listening", slog.String("addr", addr))
	// The API reaps too: with no live worker, a dead worker's requests
	// still read FAILED within BUILDRISK_STALE_AFTER + BUILDRISK_REAP_INTERVAL.
	// Its reaps apply the resume policy like a worker's.
	var reaping sync.WaitGroup
	reaperCtx, stopReaper := context.WithCancel(ctx)
	reaping.Go(func() { role.Reap(reaperCtx) })
	defer func() { stopReaper(); reaping.Wait() }()
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return shutdown(shutdownCtx)
}

// apiRequestTimeout bounds one /v1 call's database work: two statements'
// worth, so the server's statement_timeout fires first and names the cause.
func apiRequestTimeout(env *config.Config) time.Duration { return 2 * env.APIStatementTimeout }

// API is the api role: the server of the public API and the console on
// one insert-only River client (River UI reads through it too), the
// process's one Enqueuer every request goes through and its one Reaper.
type API struct {
	env      *config.Config
	tel      *Telemetry
	server   *api.Server
	enqueuer *request.Enqueuer
	reaper   *worker.Reaper
	built    census
}

// NewAPI builds the api role on pool. River UI's background services and
// the database probe behind buildrisk_database_up run until ctx is done.
func NewAPI(ctx context.Context, pool *pgxpool.Pool, env *config.Config, tel *Telemetry) (*API, error) {
	a := &API{env: env, tel: tel}
	insertOnly, err := newInsertOnlyRiver(pool, tel, &a.built)
	if err != nil {
		return nil, err
	}
	enqueuer, reaper, err := newRequests(pool, insertOnly, env, tel, &a.built)
	if err != nil {
		return nil, err
	}
	a.enqueuer, a.reaper = enqueuer, reaper
	riverUI, err := newRiverUI(ctx, insertOnly, tel)
	if err != nil {
		return nil, err
	}
	observeSchedules(context.Background(), pool, env, tel)
	cover, err := observeCoverage(context.Background(), pool, env, tel)
	if err != nil {
		return nil, err
	}
	startDatabaseProbe(ctx, pool, env.HeartbeatInterval, databaseProbeTimeout(env), tel.Instruments, tel.Reach, tel.Database, tel.Logger)
	a.server, err = api.New(pool, api.Config{
		Tokens: env.Tokens, TokenNames: env.TokenNames, SessionKey: env.SessionKey, Insecure: env.InsecureNoAuth, Catalog: jobset.Catalog(), AlertRules: riskrule.Doc(), Enqueuer: a.Enqueuer(),
		StaleAfter: env.StaleAfter, Instruments: tel.Instruments, MetricsHandler: tel.Providers.MetricsHandler(),
		Logger: tel.Logger, Version: Version, Schedules: scheduleInfo(env), MaxBodyBytes: env.MaxBodyBytes,
		RequestTimeout: apiRequestTimeout(env), TxSettings: dbpool.APITxSettings(env), IdempotencyRetention: env.IdempotencyRetention,
		DailyCaps: env.CapsByName(), Today: BudgetDay(env, pool), RiverUI: riverUI, Coverage: cover,
		AllowedHosts: env.AllowedHosts, TrustedProxies: env.TrustedProxies,
		TokenRateLimit: env.TokenRateLimit,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Handler is the api port's handler: the server's, in otelhttp's server
// spans and http.server.* metrics on the process's providers. Those
// metrics' labels are bounded by the meter provider's views
// (observability.Views), not here: otelhttp labels server.address and
// server.port from the request's Host, before the api authenticates it.
func (a *API) Handler() http.Handler {
	return otelhttp.NewHandler(a.Server().Handler(), "http.server",
		otelhttp.WithMeterProvider(a.tel.Providers.Meter), otelhttp.WithTracerProvider(a.tel.Providers.Tracer))
}

// Server is the role's api server (tests serve its handler without the
// process's telemetry middleware).
func (a *API) Server() *api.Server { return a.server }

// Enqueuer is the role's one Enqueuer.
func (a *API) Enqueuer() *request.Enqueuer { return a.enqueuer }

// Reaper is the role's one Reaper.
func (a *API) Reaper() *worker.Reaper { return a.reaper }

// Reap runs the role's reaper every BUILDRISK_REAP_INTERVAL until ctx is
// done.
func (a *API) Reap(ctx context.Context) { a.Reaper().Run(ctx, a.env.ReapInterval) }

// newRiverUI returns River UI (riverqueue.com/riverui) for job-level
// inspection, served under /riverui/. It reads River's tables through the
// client's driver; its buttons (cancel, retry, delete) act on River jobs,
// which is why only operators reach it.
func newRiverUI(ctx context.Context, client *river.Client[pgx.Tx], tel *Telemetry) (*riverui.Handler, error) {
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    observability.NewRiverLogger(tel.Logger, observability.RiverRepeatIntervalDefault, nil),
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
