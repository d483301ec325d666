package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream"
)

// Telemetry is one process's providers, instruments and logger.
type Telemetry struct {
	Providers   *observability.Providers
	Instruments *observability.Instruments
	Logger      *slog.Logger
	// Reach is the process's link to the database as its heartbeats (a
	// worker) or its probe (the api) see it; every reaper of the process
	// waits on it after a cut. Nil: each reaper keeps its own.
	Reach *request.Reachability
	// Database is the process's failover detection, which its heartbeats
	// (a worker) or its probe (the api) feed; a runner subscribes to it
	// (worker.DatabaseWatch.Subscribe). Nil: each worker keeps its own,
	// the api's probe checks nothing.
	Database *worker.DatabaseWatch
}

// NewTelemetry starts the providers, instruments and logger of a process
// in role (api, worker, cli, dev), and makes them the process's globals.
func NewTelemetry(ctx context.Context, env *config.Config, role, workerID, defaultFormat string) (*Telemetry, error) {
	providers, err := observability.NewProviders(ctx, observability.Config{ServiceVersion: Version, Role: role, WorkerID: workerID})
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
	instruments.InitSeries(ctx, jobset.Catalog().Names(), providerNames)
	// A worker's lines are scrubbed of its provider keys, whatever logs them
	// (River's own lines quote a run's error); the runner scrubs its own too.
	keys := make([]string, 0, len(env.Keys))
	for _, key := range env.Keys {
		keys = append(keys, key)
	}
	handler := observability.NewLogger(os.Stderr, cmp.Or(env.LogFormat, defaultFormat), slog.LevelInfo).Handler()
	logger := slog.New(observability.NewSecrets(keys...).Handler(handler)).With(slog.String("role", role))
	slog.SetDefault(logger)
	return &Telemetry{
		Providers: providers, Instruments: instruments, Logger: logger,
		Reach: request.NewReachability(), Database: worker.NewDatabaseWatch(instruments, logger),
	}, nil
}

// Shutdown flushes telemetry; it runs last, after drain.
func (t *Telemetry) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.Providers.Shutdown(ctx)
}
