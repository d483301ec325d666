package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	buf bytes.Buffer
	mu  sync.Mutex
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines decodes every JSON line written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()

	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func testSpanContext(t *testing.T) trace.SpanContext {
	t.Helper()

	traceID, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	spanID, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled})
}

func TestNewLogger(t *testing.T) {
	t.Parallel()

	t.Run("ContextAttrs", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		logger := NewLogger(&out, LogFormatJSON, slog.LevelInfo)
		ctx := WithLogAttrs(t.Context(), slog.String("request_id", "42"), slog.String("job", "aptTrade"))
		ctx = WithLogAttrs(ctx, slog.String("execution_id", "7"), slog.String("worker_id", "1@h#b"))

		logger.InfoContext(ctx, "chunk done", slog.Int("chunk", 3))
		logger.Info("no context")

		lines := out.lines(t)
		require.Len(t, lines, 2)
		require.Equal(t, "chunk done", lines[0]["msg"])
		require.Equal(t, "42", lines[0]["request_id"])
		require.Equal(t, "aptTrade", lines[0]["job"])
		require.Equal(t, "7", lines[0]["execution_id"])
		require.Equal(t, "1@h#b", lines[0]["worker_id"])
		require.InDelta(t, 3, lines[0]["chunk"], 0)
		require.NotContains(t, lines[0], LogKeyTraceID, "no span in ctx")
		require.NotContains(t, lines[1], "request_id")
	})

	t.Run("TraceIDs", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		logger := NewLogger(&out, LogFormatJSON, slog.LevelInfo)
		sc := testSpanContext(t)
		ctx := trace.ContextWithSpanContext(t.Context(), sc)

		logger.InfoContext(ctx, "with span")
		logger.InfoContext(trace.ContextWithSpanContext(t.Context(), trace.SpanContext{}), "invalid span")

		lines := out.lines(t)
		require.Len(t, lines, 2)
		require.Equal(t, sc.TraceID().String(), lines[0][LogKeyTraceID])
		require.Equal(t, sc.SpanID().String(), lines[0][LogKeySpanID])
		require.NotContains(t, lines[1], LogKeyTraceID)
		require.NotContains(t, lines[1], LogKeySpanID)
	})

	t.Run("TraceIDsFromSDKSpan", func(t *testing.T) {
		t.Parallel()

		providers, _ := NewTestProviders()
		t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

		var out syncBuffer
		logger := NewLogger(&out, LogFormatJSON, slog.LevelInfo)
		ctx, span := providers.Tracer.Tracer("test").Start(t.Context(), "chunk")
		logger.InfoContext(ctx, "in span")
		span.End()

		lines := out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, span.SpanContext().TraceID().String(), lines[0][LogKeyTraceID])
		require.Equal(t, span.SpanContext().SpanID().String(), lines[0][LogKeySpanID])
	})

	t.Run("GroupedLoggerKeepsContextAttrsTopLevel", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		logger := NewLogger(&out, LogFormatJSON, slog.LevelInfo).With("component", "fanout").WithGroup("pool")
		ctx := trace.ContextWithSpanContext(WithLogAttrs(t.Context(), slog.String("request_id", "42")), testSpanContext(t))

		logger.InfoContext(ctx, "state", slog.Int("inflight", 5))

		lines := out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "42", lines[0]["request_id"])
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", lines[0][LogKeyTraceID])
		require.Equal(t, "fanout", lines[0]["component"])
		require.Equal(t, map[string]any{"inflight": float64(5)}, lines[0]["pool"])
	})

	t.Run("Level", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		logger := NewLogger(&out, LogFormatJSON, slog.LevelWarn)
		logger.InfoContext(t.Context(), "dropped")
		logger.WarnContext(t.Context(), "kept")

		lines := out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "kept", lines[0]["msg"])
	})

	t.Run("Text", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		logger := NewLogger(&out, LogFormatText, slog.LevelInfo)
		ctx := trace.ContextWithSpanContext(WithLogAttrs(t.Context(), slog.String("job", "rules")), testSpanContext(t))
		logger.InfoContext(ctx, "hello")

		line := out.buf.String()
		require.Contains(t, line, "msg=hello")
		require.Contains(t, line, "job=rules")
		require.Contains(t, line, "trace_id=4bf92f3577b34da6a3ce929d0e0e4736")
		require.Contains(t, line, "span_id=00f067aa0ba902b7")
	})

	t.Run("UnknownFormatIsJSON", func(t *testing.T) {
		t.Parallel()

		var out syncBuffer
		NewLogger(&out, "yaml", slog.LevelInfo).Info("hello")
		require.Len(t, out.lines(t), 1)
	})
}

func TestWithLogAttrs(t *testing.T) {
	t.Parallel()

	t.Run("LaterKeyReplaces", func(t *testing.T) {
		t.Parallel()

		parent := WithLogAttrs(t.Context(), slog.String("job", "metrics"), slog.String("request_id", "1"))
		child := WithLogAttrs(parent, slog.String("job", "rules"))

		require.Equal(t, []slog.Attr{slog.String("request_id", "1"), slog.String("job", "rules")}, LogAttrs(child))
		// The parent is unchanged.
		require.Equal(t, []slog.Attr{slog.String("job", "metrics"), slog.String("request_id", "1")}, LogAttrs(parent))
	})

	t.Run("NoAttrs", func(t *testing.T) {
		t.Parallel()

		ctx := t.Context()
		require.Equal(t, ctx, WithLogAttrs(ctx))
		require.Nil(t, LogAttrs(ctx))
	})
}

func TestSummary(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		out     *syncBuffer
		summary *Summary
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()

		out := &syncBuffer{}
		return &testBundle{
			out:     out,
			summary: NewSummary(NewLogger(out, LogFormatJSON, slog.LevelInfo), time.Hour, "fan-out rejections"),
		}
	}

	t.Run("FlushLogsOneLinePerInterval", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		ctx := WithLogAttrs(t.Context(), slog.String("job", "creditEval"))

		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				bundle.summary.Add(ReasonQueueFull, 1)
				bundle.summary.Add(ReasonSubmitFailed, 2)
			})
		}
		wg.Wait()
		bundle.summary.Add(ReasonClosed, 0) // counts nothing
		bundle.summary.Flush(ctx)

		lines := bundle.out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "fan-out rejections", lines[0]["msg"])
		require.Equal(t, "INFO", lines[0]["level"])
		require.Equal(t, "creditEval", lines[0]["job"])
		require.Equal(t, map[string]any{"queue_full": float64(100), "submit_failed": float64(200)}, lines[0]["counts"])
		require.InDelta(t, 300, lines[0]["total"], 0)

		// Counts were reset: a quiet interval logs nothing.
		bundle.summary.Flush(ctx)
		require.Len(t, bundle.out.lines(t), 1)

		bundle.summary.Add(ReasonQueueFull, 1)
		bundle.summary.Flush(ctx)
		lines = bundle.out.lines(t)
		require.Len(t, lines, 2)
		require.Equal(t, map[string]any{"queue_full": float64(1)}, lines[1]["counts"])
	})

	t.Run("WithLevel", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		bundle.summary.WithLevel(slog.LevelWarn).Add("x", 1)
		bundle.summary.Flush(t.Context())

		lines := bundle.out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "WARN", lines[0]["level"])
	})

	t.Run("RunFlushesOnCancel", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		bundle.summary.Add("x", 3)

		// The interval is an hour, so only the final flush on cancel can
		// log; it must keep the context's attributes.
		ctx, cancel := context.WithCancel(WithLogAttrs(t.Context(), slog.String("job", "rules")))
		cancel()
		bundle.summary.Run(ctx)

		lines := bundle.out.lines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "rules", lines[0]["job"])
		require.Equal(t, map[string]any{"x": float64(3)}, lines[0]["counts"])
	})

	t.Run("DefaultInterval", func(t *testing.T) {
		t.Parallel()

		require.Equal(t, SummaryIntervalDefault, NewSummary(slog.Default(), 0, "m").interval)
	})
}
