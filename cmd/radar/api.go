package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
)

// runAPI serves the API until SIGINT/SIGTERM. It refuses to start without
// tokens (unless BUILDRISK_INSECURE_NO_AUTH=1) or on a schema that is behind.
func runAPI(ctx context.Context) error {
	env, err := loadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := requireDatabaseURL(env); err != nil {
		return err
	}
	if !env.TokensSet && !env.InsecureNoAuth {
		return usageError{errors.New("BUILDRISK_API_TOKENS (or BUILDRISK_API_TOKENS_FILE) is not set: give viewer:TOKEN,operator:TOKEN, or set BUILDRISK_INSECURE_NO_AUTH=1 for a trusted network")}
	}
	tel, err := newTelemetry(ctx, env, "api", "", "json")
	if err != nil {
		return err
	}
	defer tel.shutdown()
	pool, err := openAPIPool(ctx, env, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	server, err := newAPIServer(ctx, pool, env, tel)
	if err != nil {
		return err
	}
	shutdown, addr, err := serveHTTP(ctx, env.HTTPAddr, otelhttp.NewHandler(server.Handler(), "http.server"), tel.logger)
	if err != nil {
		return err
	}
	tel.logger.Info("api listening", slog.String("addr", addr))
	// The API reaps too: with no live worker, a dead worker's requests
	// still read FAILED within BUILDRISK_STALE_AFTER + BUILDRISK_REAP_INTERVAL.
	// Its reaps apply the resume policy like a worker's.
	riverClient, err := newInsertOnlyRiver(pool, tel)
	if err != nil {
		return err
	}
	enqueuer, err := newEnqueuer(pool, riverClient, env, tel)
	if err != nil {
		return err
	}
	reaper := worker.NewReaper(pool, worker.ReaperConfig{
		StaleAfter: env.StaleAfter, Instruments: tel.instruments, Logger: tel.logger, Reachability: tel.reach,
		River: enqueuer.Canceller(),
		Resume: func(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) error {
			_, err := enqueuer.ResumeTx(ctx, tx, stopped)
			return err
		},
	})
	var reaping sync.WaitGroup
	reaperCtx, stopReaper := context.WithCancel(ctx)
	reaping.Go(func() { reaper.Run(reaperCtx, env.ReapInterval) })
	defer func() { stopReaper(); reaping.Wait() }()
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return shutdown(shutdownCtx)
}
