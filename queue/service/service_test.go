package service_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/service"
)

// never is an interval no test waits for: every pass below is triggered.
const never = time.Hour

func TestTriggerRunsOnePass(t *testing.T) {
	t.Parallel()
	var passes atomic.Int32
	s := service.New(service.Config{Name: "count", Interval: never, Pass: func(context.Context) error {
		passes.Add(1)
		return nil
	}})
	s.Start(context.Background())
	defer s.Stop()
	for want := int32(1); want <= 3; want++ {
		passed := s.Passed()
		s.Trigger()
		<-passed
		require.Equal(t, want, passes.Load())
	}
}

func TestTicksRunPasses(t *testing.T) {
	t.Parallel()
	s := service.New(service.Config{Name: "tick", Interval: time.Millisecond, Pass: func(context.Context) error { return nil }})
	s.Start(context.Background())
	defer s.Stop()
	// Two passes in a row, with no trigger: the ticker drives them.
	<-s.Passed()
	<-s.Passed()
}

func TestPassTimeout(t *testing.T) {
	t.Parallel()
	deadlines := make(chan bool, 1)
	pass := func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		deadlines <- ok
		return nil
	}
	bounded := service.New(service.Config{Name: "bounded", Interval: never, Timeout: time.Minute, Pass: pass})
	bounded.Start(context.Background())
	defer bounded.Stop()
	bounded.Trigger()
	require.True(t, <-deadlines, "a pass is bounded by Timeout")

	unbounded := service.New(service.Config{Name: "unbounded", Interval: never, Pass: pass})
	unbounded.Start(context.Background())
	defer unbounded.Stop()
	unbounded.Trigger()
	require.False(t, <-deadlines, "without Timeout only the service's context bounds a pass")
}

func TestFailedPassIsLoggedWithTheName(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	s := service.New(service.Config{Name: "reap", Interval: never, Logger: logger, Pass: func(context.Context) error {
		return errors.New("database unreachable")
	}})
	s.Start(context.Background())
	passed := s.Passed()
	s.Trigger()
	<-passed
	s.Stop() // the log line is written before the pass counts as ended
	require.Contains(t, buf.String(), `level=WARN msg="reap failed" service=reap error="database unreachable"`)
}

func TestStopWaitsForThePassAndLogsNothing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	started := make(chan struct{})
	var returned atomic.Bool
	s := service.New(service.Config{Name: "slow", Interval: never, Logger: logger, Pass: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		returned.Store(true)
		return ctx.Err()
	}})
	s.Start(context.Background())
	s.Trigger()
	<-started
	s.Stop()
	require.True(t, returned.Load(), "Stop returns after the pass under way")
	require.Empty(t, buf.String(), "a pass cut short by Stop is not a failure")
	s.Stop() // stopping again does nothing
}

func TestRestartAndDoubleStart(t *testing.T) {
	t.Parallel()
	var passes atomic.Int32
	s := service.New(service.Config{Name: "again", Interval: never, Pass: func(context.Context) error {
		passes.Add(1)
		return nil
	}})
	s.Start(context.Background())
	s.Start(context.Background()) // already running: no second loop
	passed := s.Passed()
	s.Trigger()
	<-passed
	s.Stop()
	s.Start(context.Background())
	defer s.Stop()
	passed = s.Passed()
	s.Trigger()
	<-passed
	require.Equal(t, int32(2), passes.Load())
}

func TestRunEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s := service.New(service.Config{Name: "run", Interval: never, Pass: func(context.Context) error {
		cancel()
		return nil
	}})
	s.Trigger()
	s.Run(ctx) // returns once the pass cancelled ctx
	require.Equal(t, "run", s.Name())
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	t.Parallel()
	pass := func(context.Context) error { return nil }
	require.Panics(t, func() { service.New(service.Config{Interval: time.Second, Pass: pass}) })
	require.Panics(t, func() { service.New(service.Config{Name: "x", Interval: time.Second}) })
	require.Panics(t, func() { service.New(service.Config{Name: "x", Pass: pass}) })
}

// A run of failed passes logs its first failure and then, with no reminder
// due, nothing more at WARN; the pass that succeeds again says so, with the
// count. An outage no longer writes a line per pass.
func TestFailedPassesLogOncePerRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	var fail atomic.Bool
	fail.Store(true)
	s := service.New(service.Config{
		Name: "beat", Interval: never, ReminderInterval: never,
		Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Pass: func(context.Context) error {
			if fail.Load() {
				return errors.New("connection refused")
			}
			return nil
		},
	})
	s.Start(context.Background())
	defer s.Stop()
	pass := func() {
		passed := s.Passed()
		s.Trigger()
		<-passed
	}
	for range 5 {
		pass()
	}
	fail.Store(false)
	pass()
	pass()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	require.Contains(t, lines[0], "level=WARN msg=\"beat failed\"")
	require.Contains(t, lines[1], "level=INFO msg=\"beat recovered\"")
	require.Contains(t, lines[1], "failed_passes=5")
}
