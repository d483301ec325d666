package observability

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Log formats accepted by [NewLogger].
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// Keys of the attributes the context handler adds from the active span.
const (
	LogKeySpanID  = "span_id"
	LogKeyTraceID = "trace_id"
)

// SummaryIntervalDefault is the interval [NewSummary] uses when given an
// interval <= 0.
const SummaryIntervalDefault = time.Minute

// NewLogger returns a logger writing to w at level and above, as JSON when
// format is [LogFormatJSON] and as logfmt-style text when it is
// [LogFormatText]; any other format is JSON, the production format. Its
// handler is wrapped by [NewContextHandler], so a line logged with a context
// (logger.InfoContext(ctx, ...)) carries the attributes of [WithLogAttrs]
// and the trace and span ids of the span active in ctx.
func NewLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	// Every attribute goes through Redact: no log line quotes a credential.
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redactAttr}
	var h slog.Handler
	if format == LogFormatText {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(NewContextHandler(h))
}

// NewContextHandler wraps h so that every record is logged with the
// attributes carried by its context: those added with [WithLogAttrs]
// (request_id, execution_id, job, worker_id, ...) and, when a valid span is
// active, trace_id and span_id. They are added at the top level even when
// the logger has groups, so they can always be found by the same key.
// Records logged without a context (logger.Info) get neither.
func NewContextHandler(h slog.Handler) slog.Handler {
	return &contextHandler{base: h, inner: h}
}

// contextHandler implements [NewContextHandler]. base is the wrapped handler
// before any WithAttrs/WithGroup; ops replays them on top of base plus the
// context attributes when the logger has groups, so those attributes stay at
// the top level.
type contextHandler struct {
	base    slog.Handler
	grouped bool
	inner   slog.Handler
	ops     []func(slog.Handler) slog.Handler
}

func (h *contextHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *contextHandler) Handle(ctx context.Context, r slog.Record) error {
	extra := contextLogAttrs(ctx)
	if len(extra) == 0 {
		return h.inner.Handle(ctx, r)
	}
	if !h.grouped {
		r = r.Clone()
		r.AddAttrs(extra...)
		return h.inner.Handle(ctx, r)
	}
	withCtx := h.base.WithAttrs(extra)
	for _, op := range h.ops {
		withCtx = op(withCtx)
	}
	return withCtx.Handle(ctx, r)
}

func (h *contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(func(next slog.Handler) slog.Handler { return next.WithAttrs(attrs) }, false)
}

func (h *contextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(next slog.Handler) slog.Handler { return next.WithGroup(name) }, true)
}

func (h *contextHandler) with(op func(slog.Handler) slog.Handler, group bool) *contextHandler {
	return &contextHandler{
		base:    h.base,
		grouped: h.grouped || group,
		inner:   op(h.inner),
		ops:     append(slices.Clip(h.ops), op),
	}
}

// logAttrsKey is the context key of attributes every line logged with
// the context includes (this package's tests set them).
type logAttrsKey struct{}

// contextLogAttrs returns the attributes under logAttrsKey plus trace_id and
// span_id of a valid span in ctx.
func contextLogAttrs(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	attrs, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(slices.Clip(attrs),
			slog.String(LogKeyTraceID, sc.TraceID().String()),
			slog.String(LogKeySpanID, sc.SpanID().String()),
		)
	}
	return attrs
}

// Summary counts repeated events by key and logs them as one line per
// interval instead of one line (or one stack trace) per event: the
// lesson of the lost-events incident is to count, not spam. Pair it with a counter of
// [Instruments] for alerting; the summary line tells a reader of the logs
// what happened in that interval.
//
// Its methods are safe for concurrent use.
type Summary struct {
	counts   map[string]int64
	interval time.Duration
	level    slog.Level
	logger   *slog.Logger
	msg      string
	mu       sync.Mutex
}

// NewSummary returns a summary that logs msg through logger at info level,
// once per interval in [Summary.Run] (or on each [Summary.Flush]), with the
// counts added since the previous line. An interval <= 0 means
// [SummaryIntervalDefault].
func NewSummary(logger *slog.Logger, interval time.Duration, msg string) *Summary {
	if interval <= 0 {
		interval = SummaryIntervalDefault
	}
	return &Summary{
		counts:   make(map[string]int64),
		interval: interval,
		level:    slog.LevelInfo,
		logger:   logger,
		msg:      msg,
	}
}

// WithLevel sets the level of the summary line (info by default; warn suits
// events that should not happen, such as fan-out rejections) and returns s
// for chaining. Call it before [Summary.Run].
func (s *Summary) WithLevel(level slog.Level) *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.level = level
	return s
}

// Add counts n more events of key. Keys become attribute names in the
// summary line, so use a small fixed set (a reason, an outcome), never an
// id. n <= 0 counts nothing.
func (s *Summary) Add(key string, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[key] += n
}

// Flush logs one line with the counts added since the previous flush, keys
// in alphabetical order under the group "counts", plus their "total" and the
// configured "interval", and resets the counts. It logs nothing when nothing
// was added, so a quiet interval costs no line. The line carries the log
// attributes and trace of ctx.
func (s *Summary) Flush(ctx context.Context) {
	s.mu.Lock()
	counts := s.counts
	s.counts = make(map[string]int64)
	level := s.level
	s.mu.Unlock()

	if len(counts) == 0 {
		return
	}
	keys := make([]string, 0, len(counts))
	var total int64
	for k, n := range counts {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	group := make([]any, 0, len(keys))
	for _, k := range keys {
		group = append(group, slog.Int64(k, counts[k]))
	}
	s.logger.LogAttrs(ctx, level, s.msg,
		slog.Group("counts", group...),
		slog.Int64("total", total),
		slog.Duration("interval", s.interval),
	)
}

// Run flushes every interval until ctx is done, then flushes once more (with
// ctx's values but without its cancellation) so the last counts are not lost,
// and returns. Run it in its own goroutine for the lifetime of what it
// summarises.
func (s *Summary) Run(ctx context.Context) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush(context.WithoutCancel(ctx))
			return
		case <-ticker.C:
			s.Flush(ctx)
		}
	}
}
