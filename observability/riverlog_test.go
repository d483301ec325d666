package observability

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// River's fetch loop failing several times a second through an outage
// logs one line when it starts and one reminder with the count per
// interval, not a line per failure; its INFO bookkeeping is DEBUG.
func TestRiverLogger_ThrottlesRepeatsAndDemotesInfo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	logger := NewRiverLogger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})), time.Minute, func() time.Time { return now })
	producer := logger.With(slog.String("queue", "default")) // derived loggers share the throttle
	ctx := context.Background()

	// 60 s of an outage at 4 fetch errors a second, with River's INFO
	// chatter in between.
	for i := range 240 {
		producer.ErrorContext(ctx, "producer: error fetching jobs", slog.Int("attempt", i))
		logger.InfoContext(ctx, "producer: job counts")
		now = now.Add(250 * time.Millisecond)
	}
	logger.WarnContext(ctx, "elector: error attempting to elect")
	producer.ErrorContext(ctx, "producer: error fetching jobs") // a minute on: the reminder

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, "%s", out.String())
	require.Contains(t, lines[0], `"msg":"producer: error fetching jobs"`)
	require.NotContains(t, lines[0], "repeated")
	require.Contains(t, lines[1], `"msg":"elector: error attempting to elect"`)
	require.Contains(t, lines[2], `"repeated":239`)
	require.NotContains(t, out.String(), "job counts", "River's INFO is DEBUG")
}
