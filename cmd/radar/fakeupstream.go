package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// runFakeUpstream serves the fake provider endpoints until a signal.
func runFakeUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fakeupstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":8090", "listen address")
	latency := fs.Duration("latency", 0, "latency added to every provider call")
	errorRate := fs.Float64("error-rate", 0, "fraction of calls answered 500")
	seed := fs.Int64("seed", 1, "seed of all data and faults")
	if err := fs.Parse(args); err != nil {
		return config.Usage(err)
	}
	if *errorRate < 0 || *errorRate > 1 {
		return config.Usage(fmt.Errorf("--error-rate %v is not between 0 and 1", *errorRate))
	}
	server := fakeupstream.New(fakeupstream.Config{Latency: *latency, ErrorRate: *errorRate, Seed: *seed})
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: server, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(listener) }()
	fmt.Fprintf(stdout, "fake upstream listening on %s (stats: GET /__fake/stats)\n", listener.Addr())
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// A connection that never sent its request (net/http waits up to 5 s
	// for those) holds nothing a fake has to finish: drop it and exit.
	return srv.Close()
}
