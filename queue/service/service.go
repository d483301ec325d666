// Package service is the one shape of buildrisk-radar's background work: a
// loop that runs a pass of work every interval, bounds each pass by a
// timeout, logs a failed pass under the service's name, and stops cleanly.
//
// The reaper, the reconcile loop, the heartbeat and the gauges are all such
// loops. Each used to carry its own ticker, start, stop, timeout and
// logging; with one type they behave alike and a test can drive any of them
// without sleeping: [Service.Trigger] asks for a pass now and
// [Service.Passed] is closed when the next pass has ended.
package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river/rivershared/startstop"
)

// ReminderIntervalDefault is how often a service whose passes keep failing
// says so again.
const ReminderIntervalDefault = time.Minute

// Config configures a Service.
type Config struct {
	// Name names the service in its log lines ("reap" logs "reap failed").
	// Required.
	Name string
	// Interval is the time between two passes. Required (> 0).
	Interval time.Duration
	// Timeout bounds one pass; 0 leaves a pass bounded only by the
	// service's context.
	Timeout time.Duration
	// Logger receives a warning when passes start failing, a reminder at
	// most every ReminderInterval while they go on failing, and a line
	// when a pass succeeds again; nil uses slog.Default.
	Logger *slog.Logger
	// ReminderInterval is how often a run of failed passes is logged
	// again; 0 is ReminderIntervalDefault.
	ReminderInterval time.Duration
	// Pass is one pass of the service's work. Required.
	Pass func(ctx context.Context) error
}

// Service runs Config.Pass every Config.Interval, from Start (or Run) until
// its context ends or Stop. The first pass runs one interval after the
// start, as a ticker's first tick. Passes never overlap. Its methods are
// safe for concurrent use.
type Service struct {
	cfg     Config
	trigger chan struct{}
	// failures logs a run of failed passes once (FailureLog).
	failures *FailureLog

	mu     sync.Mutex
	passed chan struct{} // closed when the pass under way (or the next) ends
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine of Start has returned
}

// New returns a service that is not running yet. It panics when cfg lacks
// a name, a pass or a positive interval: those are wiring mistakes, not
// conditions to handle.
func New(cfg Config) *Service {
	switch {
	case cfg.Name == "":
		panic("service: Config.Name is required")
	case cfg.Pass == nil:
		panic("service " + cfg.Name + ": Config.Pass is required")
	case cfg.Interval <= 0:
		panic("service " + cfg.Name + ": Config.Interval must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReminderInterval <= 0 {
		cfg.ReminderInterval = ReminderIntervalDefault
	}
	return &Service{
		cfg: cfg, trigger: make(chan struct{}, 1), passed: make(chan struct{}),
		failures: NewFailureLog(cfg.Name, cfg.Logger, cfg.ReminderInterval, slog.String("service", cfg.Name)),
	}
}

// Name returns the service's name.
func (s *Service) Name() string { return s.cfg.Name }

// Start runs the service in a goroutine of its own until ctx ends or Stop
// is called. Starting a running service does nothing. It never fails; the
// error is River's startstop.Service's, which a Service implements so that
// a process starts and stops its services as one list.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return nil
	}
	ctx, s.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	s.done = done
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return nil
}

// Started returns a closed channel: a service has started once Start has
// returned (startstop.Service).
func (s *Service) Started() <-chan struct{} { return closedChannel }

// closedChannel is a channel that is always closed.
var closedChannel = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Stop ends the service started by Start and waits until its pass under
// way, if any, has returned. Stopping a service that is not running does
// nothing; a stopped service may be started again.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Run runs the service in the calling goroutine until ctx ends. Use it
// instead of Start when the caller owns the goroutine.
func (s *Service) Run(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-s.trigger:
		}
		if ctx.Err() != nil {
			return
		}
		s.pass(ctx)
	}
}

// Trigger asks for a pass now instead of at the next tick. Triggers that
// arrive while one is already pending are merged into it.
func (s *Service) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Passed returns a channel that is closed when the next pass ends (the one
// under way, if any). Take it before Trigger to await the triggered pass:
//
//	passed := s.Passed()
//	s.Trigger()
//	<-passed
func (s *Service) Passed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passed
}

// pass runs one pass bounded by the timeout and logs its failure, unless
// the failure is the service's own stop.
func (s *Service) pass(ctx context.Context) {
	passCtx, cancel := ctx, context.CancelFunc(func() {})
	if s.cfg.Timeout > 0 {
		passCtx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
	}
	err := s.cfg.Pass(passCtx)
	cancel()
	if ctx.Err() == nil {
		s.failures.Observe(ctx, err)
	}
	s.mu.Lock()
	close(s.passed)
	s.passed = make(chan struct{})
	s.mu.Unlock()
}

var _ startstop.Service = (*Service)(nil)
