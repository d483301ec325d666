package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/riverqueue/river/rivershared/startstop"
)

// A role's parts start and stop as one list of River's startstop services:
// StartAll starts them in order and stops those already started when one
// fails; StopAllParallel stops them together and returns once each has.
// The roles' own Start and Stop are that, around what a role must do first
// or last (a worker's drain).

// httpShutdownTimeout bounds an HTTP server's graceful shutdown: the
// requests under way get that long to end.
const httpShutdownTimeout = 10 * time.Second

// httpService serves a handler on an address from Start to Stop.
type httpService struct {
	startstop.BaseStartStop
	addr, variable string
	handler        http.Handler
	logger         *slog.Logger

	mu     sync.Mutex
	bound  string // the address it listens on once started
	server *http.Server
}

// newHTTPService returns the service that serves handler on addr. variable
// names the setting addr came from: a port already taken says which one to
// change.
func newHTTPService(addr, variable string, handler http.Handler, logger *slog.Logger) *httpService {
	return &httpService{addr: addr, variable: variable, handler: handler, logger: logger}
}

// Start listens on the service's address (a taken port fails Start, before
// anything is served) and serves in the background.
func (s *httpService) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	listener, err := net.Listen("tcp", s.addr)
	if err != nil {
		stopped()
		return fmt.Errorf("error listening on %s (set %s to another address, e.g. %s=:0 for any free port): %w", s.addr, s.variable, s.variable, err)
	}
	server := newHTTPServer(s.handler, serverTimeoutsDefault)
	s.mu.Lock()
	s.bound, s.server = listener.Addr().String(), server
	s.mu.Unlock()
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server failed", slog.String("addr", s.addr), slog.String("error", err.Error()))
		}
	}()
	go func() {
		defer stopped()
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
		defer cancel()
		if err := server.Shutdown(shutdownCtx); err != nil {
			_ = server.Close()
		}
		<-served
	}()
	started()
	return nil
}

// Addr returns the address the service listens on ("" before Start).
func (s *httpService) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// backgroundService runs start with a context of its own from Start to
// Stop: for a part whose background work ends when its context does (River
// UI's handler).
func backgroundService(start func(ctx context.Context) error) startstop.Service {
	return startstop.StartStopFunc(func(ctx context.Context, shouldStart bool, started, stopped func()) error {
		if !shouldStart {
			return nil
		}
		if err := start(ctx); err != nil {
			stopped()
			return err
		}
		go func() {
			defer stopped()
			<-ctx.Done()
		}()
		started()
		return nil
	})
}
