package observabilitytest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/radartype"
)

func TestNewProvidersRecordsSpans(t *testing.T) {
	t.Parallel()
	providers, spans := observabilitytest.NewProviders()
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

	_, span := providers.Tracer.Tracer("test").Start(t.Context(), "chunk")
	span.End()
	ended := spans.Ended()
	require.Len(t, ended, 1)
	require.Equal(t, "chunk", ended[0].Name())
	require.True(t, providers.SpansRecorded)
}

func TestMetricValue(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })
	inst, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	ctx := t.Context()
	inst.ExecutionFinished(ctx, "aptTrade", radartype.ExecutionCompleted)
	inst.ExecutionFinished(ctx, "aptTrade", radartype.ExecutionCompleted)
	inst.ExecutionFinished(ctx, "stockPrice", radartype.ExecutionFailed)

	got, err := observabilitytest.MetricValue(providers, observability.MetricExecutions, map[string]string{"job": "aptTrade", "status": "COMPLETED"})
	require.NoError(t, err)
	require.Equal(t, 2.0, got)
	got, err = observabilitytest.MetricValue(providers, observability.MetricExecutions, nil)
	require.NoError(t, err)
	require.Equal(t, 3.0, got, "a nil map sums every sample")

	got, err = observabilitytest.MetricValue(providers, observability.MetricRequestStartLatency+"_count", nil)
	require.NoError(t, err)
	require.Zero(t, got, "a known metric not recorded yet is 0")

	_, err = observabilitytest.MetricValue(providers, "buildrisk_request_total", nil)
	require.ErrorIs(t, err, observabilitytest.ErrMetricUnknown)
}
