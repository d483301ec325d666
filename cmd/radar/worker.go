package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// runWorker claims and runs requests until SIGINT/SIGTERM, then drains:
// stop claiming, let running jobs stop at a chunk boundary (up to
// BUILDRISK_DRAIN_TIMEOUT), and only then close the pool and telemetry.
func runWorker(ctx context.Context) error {
	env, err := loadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := requireDatabaseURL(env); err != nil {
		return err
	}
	workerID, hostname, boot := newWorkerID()
	tel, err := newTelemetry(ctx, env, "worker", workerID, "json")
	if err != nil {
		return err
	}
	defer tel.shutdown() // last: after drain and pool close
	pool, err := openPool(ctx, env.DatabaseURL, env.workerMaxConns(), env.DBTimeout, env.TxPooling, env.sessionLimits(workerID))
	if err != nil {
		return err
	}
	defer pool.Close()
	heartbeatPool, err := openHeartbeatPool(ctx, env.DatabaseURL, heartbeatPoolConns, env.DBTimeout, env.TxPooling, env.sessionLimits(workerID))
	if err != nil {
		return err
	}
	defer heartbeatPool.Close()
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	w, _, err := newWorker(pool, env, tel, workerID, hostname, boot, withHeartbeatPool(heartbeatPool))
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
	admin.Handle("GET /metrics", tel.providers.MetricsHandler())
	shutdownAdmin, adminAddr, err := serveHTTP(ctx, env.AdminAddr, admin, tel.logger)
	if err != nil {
		_ = w.Drain(context.Background())
		return err
	}
	tel.logger.Info("worker running", slog.String("worker_id", workerID), slog.String("admin_addr", adminAddr))

	<-ctx.Done()
	tel.logger.Info("shutdown signal received; draining", slog.Duration("drain_timeout", env.DrainTimeout))
	drainErr := w.Drain(context.Background())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdownAdmin(shutdownCtx)
	if drainErr != nil {
		tel.logger.Warn("drain ended with an error", slog.String("error", drainErr.Error()))
	}
	tel.logger.Info("worker stopped")
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
