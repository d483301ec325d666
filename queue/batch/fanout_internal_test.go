package batch

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// The submit-failure path: the pool closes between acquiring a slot and
// handing the item over. The slot is given back and the refusal counted.
func TestFanOut_SubmitFailureReleasesSlot(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	pool, err := NewFanOut(FanOutConfig{Job: "creditEval", Size: 1, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	pool.beforeHandout = func() {
		require.Equal(t, 1, len(pool.slots), "the slot is held at this point")
		require.NoError(t, pool.Close())
	}

	err = pool.Submit(context.Background(), func(context.Context) error { t.Error("handed over to a closed pool"); return nil })
	require.ErrorIs(t, err, ErrFanOutClosed)
	require.Zero(t, len(pool.slots), "the slot was given back")
	require.Zero(t, pool.InFlight())
	for name, want := range map[string]float64{
		observability.MetricFanoutInflight:   0,
		observability.MetricFanoutRejections: 1,
	} {
		labels := map[string]string{"job": "creditEval"}
		if name == observability.MetricFanoutRejections {
			labels["reason"] = observability.ReasonSubmitFailed
		}
		v, err := observabilitytest.MetricValue(providers, name, labels)
		require.NoError(t, err)
		require.Equal(t, want, v, name)
	}
}

// Items run on at most Size long-lived runner goroutines, not one new
// goroutine each: a fresh goroutine's stack grows again through the deep
// path of a provider call, which cost about 5 % of a fan-out's CPU.
func TestFanOut_ItemsReuseRunnerGoroutines(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	const size, items = 3, 60
	pool, err := NewFanOut(FanOutConfig{Job: "creditEval", Size: size, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	var started atomic.Int64
	pool.runnerStarted = func() { started.Add(1) }

	// Half the items one at a time (each waits for the previous one to
	// end), half as fast as slots come free.
	var ran atomic.Int64
	for i := range items {
		done := make(chan struct{})
		require.NoError(t, pool.Submit(context.Background(), func(context.Context) error {
			ran.Add(1)
			close(done)
			return nil
		}))
		if i < items/2 {
			<-done
		}
	}
	require.NoError(t, pool.Close())
	require.Equal(t, int64(items), ran.Load(), "every item ran")
	require.Equal(t, int64(size), started.Load(), "runners started: one per slot, reused by every later item")
}
