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
	"github.com/buildrisk/radar/queue/request"
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
	w, _, err := NewWorker(pool, env, tel, workerID, hostname, boot, WithHeartbeatPool(heartbeatPool))
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	admin := http.NewServeMux()
	admin.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok", "workerId": workerID})
	})
	admin.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		readyCtx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := w.Ready(readyCtx); err != nil {
			writeJSON(rw, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
			return
		}
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ready", "workerId": workerID})
	})
	admin.Handle("GET /metrics", tel.Providers.MetricsHandler())
	shutdownAdmin, adminAddr, err := ServeHTTP(ctx, env.AdminAddr, "BUILDRISK_ADMIN_ADDR", admin, tel.Logger)
	if err != nil {
		_ = w.Drain(context.Background())
		return err
	}
	tel.Logger.Info("worker running", slog.String("worker_id", workerID), slog.String("admin_addr", adminAddr))

	<-ctx.Done()
	tel.Logger.Info("shutdown signal received; draining", slog.Duration("drain_timeout", env.DrainTimeout))
	drainErr := w.Drain(context.Background())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdownAdmin(shutdownCtx)
	if drainErr != nil {
		tel.Logger.Warn("drain ended with an error", slog.String("error", drainErr.Error()))
	}
	tel.Logger.Info("worker stopped")
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func riverPlugins(tel *Telemetry) []rivertype.Plugin {
	return []rivertype.Plugin{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation: true,
		MeterProvider:          tel.Providers.Meter,
		TracerProvider:         tel.Providers.Tracer,
	})}
}

// NewInsertOnlyRiver returns a River client that only inserts (no queues,
// no workers), with the trace propagation of every insert. River's InsertTx
// announces each job to the workers itself, at most once per FetchCooldown
// per queue: at River's minimum, so that back-to-back requests each wake a
// worker instead of waiting for its fetch poll.
func NewInsertOnlyRiver(pool *pgxpool.Pool, tel *Telemetry) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: observability.NewRiverLogger(tel.Logger, observability.RiverRepeatIntervalDefault, nil), Plugins: riverPlugins(tel), FetchCooldown: river.FetchCooldownMin,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating river client: %w", err)
	}
	return client, nil
}

// TuneFunc adjusts the worker's and runner's configs before they are built
// (tests shorten intervals or disable the reaper); nil changes nothing.
type TuneFunc func(*worker.Config, *batch.Config)

// WithHeartbeatPool gives the worker's registry heartbeats their own pool.
func WithHeartbeatPool(pool *pgxpool.Pool) TuneFunc {
	return func(wc *worker.Config, _ *batch.Config) { wc.HeartbeatPool = pool }
}

// NewWorker builds the worker role's parts. The worker makes its River
// client first and hands it to the enqueuer built here, which chains,
// schedules and resumes go through (the same path as the API: cleanup,
// lock, dedupe); its runner is then built on that enqueuer and fenced by
// the worker's own presence. One River client inserts and works the
// process's queues, and nothing is assigned after construction.
func NewWorker(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, workerID, hostname, boot string, tune TuneFunc) (*worker.Worker, *batch.Runner, error) {
	up, err := NewUpstream(pool, env, tel, workerID)
	if err != nil {
		return nil, nil, err
	}
	runnerConfig := batch.Config{
		WorkerID: workerID, Jobs: batch.Implementations(Jobs(env, pool)), Upstream: up, Instruments: tel.Instruments,
		Logger: tel.Logger, FanOut: env.FanOut, Tracer: tel.Providers.Tracer.Tracer("github.com/buildrisk/radar/queue/batch"),
		DBTimeout:          env.DBTimeout,
		LeaseCheckInterval: env.HeartbeatInterval,
		StopTimeout:        env.StopTimeout,
	}
	workerConfig := worker.Config{
		ID:                workerID,
		Hostname:          hostname,
		PID:               os.Getpid(),
		Boot:              boot,
		Version:           Version,
		ConfiguredKeys:    env.ConfiguredKeyNames(),
		DailyCaps:         env.CapsByName(),
		HeartbeatInterval: env.HeartbeatInterval,
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
		Gauges: &worker.Gauges{
			Pool: pool, Jobs: jobset.Catalog().Names(), Upstream: up, StaleAfter: env.StaleAfter, Instruments: tel.Instruments,
		},
		Schedules: env.Schedules,
		Now:       env.Now,
		Enqueuer: func(client *river.Client[pgx.Tx]) (*request.Enqueuer, error) {
			return NewEnqueuer(pool, client, env, tel)
		},
	}
	if tune != nil {
		tune(&workerConfig, &runnerConfig)
	}
	w, err := worker.New(pool, runnerConfig, workerConfig)
	if err != nil {
		return nil, nil, err
	}
	observeSchedules(context.Background(), pool, env, tel)
	if _, err := observeCoverage(context.Background(), pool, env, tel); err != nil {
		return nil, nil, err
	}
	observeFanOut(context.Background(), env, tel)
	return w, w.Runner(), nil
}
