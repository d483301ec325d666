package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
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
		return usageError{errors.New("BUILDRISK_API_TOKENS is not set: give viewer:TOKEN,operator:TOKEN, or set BUILDRISK_INSECURE_NO_AUTH=1 for a trusted network")}
	}
	tel, err := newTelemetry(ctx, env, "api", "", "json")
	if err != nil {
		return err
	}
	defer tel.shutdown()
	pool, err := openPool(ctx, env.DatabaseURL, env.apiMaxConns())
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	server, err := newAPIServer(pool, env, tel)
	if err != nil {
		return err
	}
	shutdown, addr, err := serveHTTP(ctx, env.HTTPAddr, otelhttp.NewHandler(server.Handler(), "http.server"), tel.logger)
	if err != nil {
		return err
	}
	tel.logger.Info("api listening", slog.String("addr", addr))
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return shutdown(shutdownCtx)
}
