package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// serverTimeouts are the HTTP server timeouts of the api and admin
// listeners: a slow or idle client cannot hold a connection (or a goroutine
// and its buffers) for longer.
type serverTimeouts struct {
	// ReadHeader bounds reading the request line and headers (slowloris).
	ReadHeader time.Duration
	// Read bounds reading the whole request, body included.
	Read time.Duration
	// Write bounds the handler plus writing the answer; it exceeds the
	// database statement and lock timeouts, so a slow query answers 503
	// instead of a dropped connection.
	Write time.Duration
	// Idle bounds a keep-alive connection between requests.
	Idle time.Duration
}

// serverTimeoutsDefault are the timeouts radar serves with.
var serverTimeoutsDefault = serverTimeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB).
const maxHeaderBytes = 64 << 10

// newHTTPServer returns the server of the api and admin listeners.
func newHTTPServer(handler http.Handler, t serverTimeouts) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// ServeHTTP serves handler on addr in the background and returns the
// Shutdown function and the address it really listens on (addr may say :0).
// variable names the setting addr came from: a port already taken says
// which one to change.
func ServeHTTP(ctx context.Context, addr, variable string, handler http.Handler, logger *slog.Logger) (func(context.Context) error, string, error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("error listening on %s (set %s to another address, e.g. %s=:0 for any free port): %w", addr, variable, variable, err)
	}
	srv := newHTTPServer(handler, serverTimeoutsDefault)
	go func() {
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", slog.String("addr", addr), slog.String("error", err.Error()))
		}
	}()
	return srv.Shutdown, listener.Addr().String(), nil
}
