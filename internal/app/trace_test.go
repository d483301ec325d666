package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// Provider calls are client spans only when spans are recorded: otherwise
// the wrapper was 1.4 of 3.5 CPU-seconds of the call path at fan-out 64
// (BENCHMARKS.md) for spans nobody reads.
func TestProviderTracing_OnlyWhenSpansAreRecorded(t *testing.T) {
	require.Nil(t, app.ProviderTracing(&observability.Providers{}))
	providers, _ := observabilitytest.NewProviders()
	wrap := app.ProviderTracing(providers)
	require.NotNil(t, wrap)
	require.NotNil(t, wrap(http.DefaultTransport))
}
