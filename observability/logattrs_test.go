package observability

// WithLogAttrs and LogAttrs put attributes on every line logged with a
// context; no production code does, the tests prove the handler honours
// them.

import (
	"context"
	"log/slog"
	"slices"
)

// WithLogAttrs returns a copy of ctx carrying attrs in addition to those ctx
// already carries; an attribute with the key of an earlier one replaces it.
// Every line logged with the returned context by a logger from [NewLogger]
// includes them. Use it once at the start of a run to put request_id,
// execution_id, job and worker_id on every line of that run.
func WithLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	if len(attrs) == 0 {
		return ctx
	}
	prev, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	merged := make([]slog.Attr, 0, len(prev)+len(attrs))
	for _, p := range prev {
		if !slices.ContainsFunc(attrs, func(a slog.Attr) bool { return a.Key == p.Key }) {
			merged = append(merged, p)
		}
	}
	merged = append(merged, attrs...)
	return context.WithValue(ctx, logAttrsKey{}, merged)
}

// LogAttrs returns a copy of the attributes ctx carries from
// [WithLogAttrs], or nil.
func LogAttrs(ctx context.Context) []slog.Attr {
	attrs, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return slices.Clone(attrs)
}
