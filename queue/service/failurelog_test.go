package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A run of failures is one warning, a reminder once the interval has
// passed, and one line when it ends; the failures in between are DEBUG.
func TestFailureLog_OnePerRun(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := NewFailureLog("coverage count", slog.New(slog.NewTextHandler(&buf, nil)), time.Minute, slog.String("source", "test"))
	clock := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return clock }

	ctx := context.Background()
	outage := errors.New("connection refused")
	for range 50 {
		l.Observe(ctx, outage)
		clock = clock.Add(time.Second)
	}
	l.Observe(ctx, nil)
	l.Observe(ctx, nil)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	require.Contains(t, lines[0], `level=WARN msg="coverage count failed" source=test error="connection refused"`)
	require.Contains(t, lines[1], `level=INFO msg="coverage count recovered" source=test failed_passes=50`)

	buf.Reset()
	for range 3 {
		l.Observe(ctx, outage)
		clock = clock.Add(time.Minute)
	}
	require.Equal(t, 3, strings.Count(buf.String(), "coverage count"), "a reminder per interval: %s", buf.String())
	require.Contains(t, buf.String(), `msg="coverage count still failing" source=test failed_passes=2`)
}
