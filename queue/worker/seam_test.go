package worker_test

import (
	"log/slog"
	"testing"

	"github.com/buildrisk/radar/observability/observabilitytest"
)

// newTelemetry is a test's private instruments.
func newTelemetry(t *testing.T) *observabilitytest.Telemetry {
	return observabilitytest.NewTelemetry(t)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
