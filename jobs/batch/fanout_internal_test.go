package batch

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
)

// The submit-failure path: the pool closes between acquiring a slot and
// handing the item over. The slot is given back and the refusal counted.
func TestFanOut_SubmitFailureReleasesSlot(t *testing.T) {
	t.Parallel()
	providers, _ := observability.NewTestProviders()
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
		v, err := providers.MetricValue(name, labels)
		require.NoError(t, err)
		require.Equal(t, want, v, name)
	}
}
