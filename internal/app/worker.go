package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// RunWorker claims and runs requests until SIGINT/SIGTERM, then drains:
// stop claiming, let running jobs stop at a chunk boundary (up to
// BUILDRISK_DRAIN_TIMEOUT), and only then close the pool and telemetry.
func RunWorker(ctx context.Context, env *config.Config) error {
	if err := config.RequireDatabaseURL(env); err != nil {
		return err
	}
	workerID, hostname, boot := NewWorkerID()
	tel, err := NewTelemetry(ctx, env, "worker", workerID, "json")
	if err != nil {
		return err
	}
	defer tel.Shutdown() // last: after drain and pool close
	pool, err := dbpool.Open(ctx, env.DatabaseURL, env.WorkerMaxConns(), env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return err
	}
	defer pool.Close()
	heartbeatPool, err := dbpool.OpenHeartbeat(ctx, env.DatabaseURL, config.HeartbeatPoolConns, env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return err
	}
	defer heartbeatPool.Close()
	if err := dbpool.CheckSchema(ctx, pool); err != nil {
		return err
	}
	w, err := NewWorker(pool, env, tel, WorkerOptions{ID: workerID, Hostname: hostname, Boot: boot, HeartbeatPool: heartbeatPool, AdminAddr: env.AdminAddr})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	tel.Logger.Info("worker running", slog.String("worker_id", workerID), slog.String("admin_addr", w.AdminAddr()))
	<-ctx.Done()
	tel.Logger.Info("shutdown signal received; draining", slog.Duration("drain_timeout", env.DrainTimeout))
	if err := w.Stop(context.WithoutCancel(ctx)); err != nil {
		tel.Logger.Warn("drain ended with an error", slog.String("error", err.Error()))
	}
	tel.Logger.Info("worker stopped")
	return nil
}

// Worker is the worker role: the worker's machinery (its River client,
// request owner, runner and loops) and, when it has an admin address, its
// admin server (/healthz, /readyz, /metrics), from Start to Stop.
type Worker struct {
	*worker.Worker
	admin *httpService // nil without an admin address
}

// Start starts the admin server first (a port already taken fails Start
// before the worker claims anything), then the worker.
func (w *Worker) Start(ctx context.Context) error {
	if w.admin != nil {
		if err := w.admin.Start(ctx); err != nil {
			return err
		}
	}
	if err := w.Worker.Start(ctx); err != nil {
		if w.admin != nil {
			w.admin.Stop()
		}
		return err
	}
	return nil
}

// Stop drains the worker, then stops the admin server.
func (w *Worker) Stop(ctx context.Context) error {
	err := w.Worker.Stop(ctx)
	if w.admin != nil {
		w.admin.Stop()
	}
	return err
}

// AdminAddr returns the address the admin server listens on ("" without
// one, or before Start).
func (w *Worker) AdminAddr() string {
	if w.admin == nil {
		return ""
	}
	return w.admin.Addr()
}

// adminHandler serves a worker's health, readiness and metrics.
func adminHandler(w *worker.Worker, tel *Telemetry) http.Handler {
	admin := http.NewServeMux()
	admin.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok", "workerId": w.ID()})
	})
	admin.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		readyCtx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := w.Ready(readyCtx); err != nil {
			writeJSON(rw, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
			return
		}
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ready", "workerId": w.ID()})
	})
	admin.Handle("GET /metrics", tel.Providers.MetricsHandler())
	return admin
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func riverPlugins(tel *Telemetry) []rivertype.Plugin {
	return []rivertype.Plugin{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableSemanticMetrics:  true,
		EnableTracePropagation: true,
		MeterProvider:          tel.Providers.Meter,
		TracerProvider:         tel.Providers.Tracer,
	})}
}

// newInsertOnlyRiver returns a River client that only inserts (no queues,
// no workers), with the trace propagation of every insert. River's InsertTx
// announces each job to the workers itself, at most once per FetchCooldown
// per queue: at River's minimum, so that back-to-back requests each wake a
// worker instead of waiting for its fetch poll.
func newInsertOnlyRiver(pool *pgxpool.Pool, tel *Telemetry, built *census) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: observability.NewRiverLogger(tel.Logger, observability.RiverRepeatIntervalDefault, nil), Plugins: riverPlugins(tel), FetchCooldown: river.FetchCooldownMin,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river client: %w", err)
	}
	built.riverClients++
	return client, nil
}

// WorkerOptions are a worker role's choices beyond the environment.
type WorkerOptions struct {
	// ID, Hostname and Boot are the worker's identity (NewWorkerID's);
	// empty makes one.
	ID, Hostname, Boot string
	// HeartbeatPool gives the worker's registry heartbeats their own pool
	// (nil: the main pool).
	HeartbeatPool *pgxpool.Pool
	// Tune adjusts the worker's and runner's configs before they are built
	// (tests shorten intervals or disable the reaper); nil changes nothing.
	Tune func(*worker.Config, *batch.Config)
	// AdminAddr is where the worker serves /healthz, /readyz and /metrics
	// from Start to Stop; "" serves nothing.
	AdminAddr string
}

// NewWorker builds the worker role on pool, ready to Start: its River
// client (which inserts and works its queues), the one request owner its
// chains, resumes, schedules and reaps go through, and the runner, fenced
// by the worker's own presence.
func NewWorker(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, opts WorkerOptions) (*Worker, error) {
	w, _, err := newWorker(pool, env, tel, opts)
	return w, err
}

func newWorker(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, opts WorkerOptions) (*Worker, census, error) {
	var built census
	if opts.ID == "" {
		opts.ID, opts.Hostname, opts.Boot = NewWorkerID()
	}
	workerConfig := worker.Config{
		ID: opts.ID, Hostname: opts.Hostname, PID: os.Getpid(), Boot: opts.Boot, Version: Version,
		ConfiguredKeys:    env.ConfiguredKeyNames(),
		DailyCaps:         env.CapsByName(),
		HeartbeatInterval: env.HeartbeatInterval,
		HeartbeatPool:     opts.HeartbeatPool,
		StaleAfter:        env.StaleAfter,
		FenceAfter:        env.FenceAfter,
		DBTimeout:         env.DBTimeout,
		ReapInterval:      env.ReapInterval,
		DrainTimeout:      env.DrainTimeout,
		Retention:         env.WorkerRetention,
		MaxConcurrentJobs: env.WorkerConcurrency,
		PollOnly:          env.TxPooling,
		Instruments:       tel.Instruments,
		Logger:            tel.Logger,
		Reachability:      tel.Reach,
		DatabaseWatch:     tel.Database,
		RiverPlugins:      riverPlugins(tel),
		Schedules:         env.Schedules,
		Now:               env.Now,
	}
	up, err := NewUpstream(pool, env, tel, opts.ID)
	if err != nil {
		return nil, built, err
	}
	workerConfig.Gauges = &worker.Gauges{
		Pool: pool, Jobs: jobset.Catalog().Names(), Upstream: up, StaleAfter: env.StaleAfter, Instruments: tel.Instruments,
	}
	workerConfig.Requests = requestConfig(jobset.Catalog(), pool, env, tel)
	workerConfig.Runner = runnerConfig(pool, env, tel, opts.ID, up)
	if opts.Tune != nil {
		opts.Tune(&workerConfig, &workerConfig.Runner)
	}
	w, err := worker.New(pool, workerConfig)
	if err != nil {
		return nil, built, err
	}
	// worker.New builds the worker's River client and its request owner
	// on it, one of each.
	built.riverClients++
	built.owners++
	built.ownerRiver = w.Owner().River()
	observeSchedules(context.Background(), pool, env, tel)
	observeDeadlines(pool, env, tel)
	if _, err := observeCoverage(context.Background(), pool, env, tel); err != nil {
		return nil, built, err
	}
	observeFanOut(context.Background(), env, tel)
	role := &Worker{Worker: w}
	if opts.AdminAddr != "" {
		role.admin = newHTTPService(opts.AdminAddr, "BUILDRISK_ADMIN_ADDR", adminHandler(w, tel), tel.Logger)
	}
	return role, built, nil
}
