package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/riverqueue/river/rivershared/startstop"

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
	role, err := NewAPI(pool, env, tel, APIOptions{HTTPAddr: env.HTTPAddr})
	if err != nil {
		return err
	}
	if err := role.Start(ctx); err != nil {
		return err
	}
	tel.Logger.Info("api listening", slog.String("addr", role.Addr()))
	<-ctx.Done()
	return role.Stop(context.WithoutCancel(ctx))
}

// apiRequestTimeout bounds one /v1 call's database work: two statements'
// worth, so the server's statement_timeout fires first and names the cause.
func apiRequestTimeout(env *config.Config) time.Duration { return 2 * env.APIStatementTimeout }

// API is the api role: the server of the public API and the console on
// one insert-only River client (River UI reads through it too), and the
// process's request owner every request goes through, which is also its
// reaper. Its background parts (River UI's services, the database probe
// behind buildrisk_database_up, the reaper and, when it serves, its HTTP
// server) run from Start to Stop.
type API struct {
	env    *config.Config
	tel    *Telemetry
	server *api.Server
	owner  *request.Owner
	// services are the role's background parts, started in order and
	// stopped together.
	services []startstop.Service
	http     *httpService // nil when the role serves no port itself
	built    census
}

// APIOptions are an api role's choices beyond the environment.
type APIOptions struct {
	// HTTPAddr is where the role serves its Handler from Start to Stop;
	// "" serves nothing (a test serves the Handler itself).
	HTTPAddr string
	// NoReaper leaves the reaping to other processes (the test harness's
	// api, whose tests pin which process reaps); every enqueue still reaps
	// its job's dead runs before its duplicate check.
	NoReaper bool
}

// NewAPI builds the api role on pool; it starts nothing (Start).
func NewAPI(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, opts APIOptions) (*API, error) {
	a := &API{env: env, tel: tel}
	insertOnly, err := newInsertOnlyRiver(pool, tel, &a.built)
	if err != nil {
		return nil, err
	}
	if a.owner, err = newOwner(pool, insertOnly, env, tel, &a.built); err != nil {
		return nil, err
	}
	riverUI, err := newRiverUI(insertOnly, tel)
	if err != nil {
		return nil, err
	}
	observeSchedules(context.Background(), pool, env, tel)
	observeDeadlines(pool, env, tel)
	cover, err := observeCoverage(context.Background(), pool, env, tel)
	if err != nil {
		return nil, err
	}
	a.server, err = api.New(pool, api.Config{
		Tokens: env.Tokens, TokenNames: env.TokenNames, SessionKey: env.SessionKey, Insecure: env.InsecureNoAuth, Catalog: jobset.Catalog(), AlertRules: riskrule.Doc(), Requests: a.Owner(),
		StaleAfter: env.StaleAfter, Instruments: tel.Instruments, MetricsHandler: tel.Providers.MetricsHandler(),
		Logger: tel.Logger, Version: Version, Schedules: scheduleInfo(env), MaxBodyBytes: env.MaxBodyBytes,
		RequestTimeout: apiRequestTimeout(env), TxSettings: dbpool.APITxSettings(env), IdempotencyRetention: env.IdempotencyRetention,
		DailyCaps: env.CapsByName(), Today: BudgetDay(env, pool), Location: env.Location, RiverUI: riverUI, Coverage: cover,
		AllowedHosts: env.AllowedHosts, TrustedProxies: env.TrustedProxies,
		TokenRateLimit: env.TokenRateLimit, Deadlines: env.Deadlines, Now: env.TimeNow,
	})
	if err != nil {
		return nil, err
	}
	// The API reaps too: with no live worker, a dead worker's requests
	// still read FAILED within BUILDRISK_STALE_AFTER + BUILDRISK_REAP_INTERVAL,
	// and its reaps apply the resume policy like a worker's.
	a.services = []startstop.Service{
		backgroundService(riverUI.Start),
		newDatabaseProbe(pool, env.HeartbeatInterval, databaseProbeTimeout(env), tel),
	}
	if !opts.NoReaper {
		a.services = append(a.services, a.owner.ReapService(env.ReapInterval))
	}
	if opts.HTTPAddr != "" {
		a.http = newHTTPService(opts.HTTPAddr, "BUILDRISK_HTTP_ADDR", a.Handler(), tel.Logger)
		a.services = append(a.services, a.http)
	}
	return a, nil
}

// Start starts the role's background parts, its HTTP server last: a port
// already taken fails Start, and what started before it is stopped.
func (a *API) Start(ctx context.Context) error {
	return startstop.StartAll(ctx, a.services...)
}

// Stop stops the role's parts and returns once each has stopped: the HTTP
// server's requests under way get httpShutdownTimeout to end.
func (a *API) Stop(context.Context) error {
	startstop.StopAllParallel(a.services...)
	return nil
}

// Addr returns the address the role's HTTP server listens on ("" when it
// serves none, or before Start).
func (a *API) Addr() string {
	if a.http == nil {
		return ""
	}
	return a.http.Addr()
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

// Owner is the role's request owner.
func (a *API) Owner() *request.Owner { return a.owner }

// newRiverUI returns River UI (riverqueue.com/riverui) for job-level
// inspection, served under /riverui/. It reads River's tables through the
// client's driver; its buttons (cancel, retry, delete) act on River jobs,
// which is why only operators reach it. Its background services run from
// the role's Start to its Stop.
func newRiverUI(client *river.Client[pgx.Tx], tel *Telemetry) (*riverui.Handler, error) {
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    observability.NewRiverLogger(tel.Logger, observability.RiverRepeatIntervalDefault, nil),
		Prefix:    "/riverui",
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river ui: %w", err)
	}
	return handler, nil
}
