package observability

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RiverRepeatIntervalDefault is how often River's same warning or error is
// logged again while it repeats.
const RiverRepeatIntervalDefault = time.Minute

// NewRiverLogger returns the logger River's clients log through. River's
// own INFO lines (producer job counts every few seconds, elections) go to
// DEBUG: they are its bookkeeping, not the service's news. Its warnings and
// errors are kept but throttled, warnings by message and errors all
// together: during a database outage River's fetch loop fails several times
// a second and each of its other loops fails too, and one line when it
// starts, a reminder with the count every interval, is what an operator can
// read.
// now is the clock (nil: time.Now).
func NewRiverLogger(logger *slog.Logger, interval time.Duration, now func() time.Time) *slog.Logger {
	if now == nil {
		now = time.Now
	}
	return slog.New(&riverHandler{next: logger.Handler(), throttle: &repeatThrottle{interval: interval, now: now, seen: map[string]*repeat{}}})
}

// riverHandler demotes River's INFO to DEBUG and throttles its repeated
// warnings and errors (see NewRiverLogger).
type riverHandler struct {
	next     slog.Handler
	throttle *repeatThrottle // shared by every handler derived with WithAttrs or WithGroup
}

func (h *riverHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, h.level(level))
}

func (h *riverHandler) level(level slog.Level) slog.Level {
	if level < slog.LevelWarn {
		return slog.LevelDebug
	}
	return level
}

func (h *riverHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		r.Level = slog.LevelDebug
		if !h.next.Enabled(ctx, r.Level) {
			return nil
		}
		return h.next.Handle(ctx, r)
	}
	// River's errors share one key: through an outage every one of its
	// loops (fetch, notifier, elector, each maintenance service) fails with
	// the same cause, and the first says it. Warnings are kept by message.
	key := r.Message
	if r.Level >= slog.LevelError {
		key = "river error"
	}
	log, repeated := h.throttle.admit(key)
	if !log {
		return nil
	}
	if repeated > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", repeated))
	}
	return h.next.Handle(ctx, r)
}

func (h *riverHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &riverHandler{next: h.next.WithAttrs(attrs), throttle: h.throttle}
}

func (h *riverHandler) WithGroup(name string) slog.Handler {
	return &riverHandler{next: h.next.WithGroup(name), throttle: h.throttle}
}

// repeatThrottle lets a message through once per interval and counts the
// repeats it held back in between.
type repeatThrottle struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	seen map[string]*repeat
}

type repeat struct {
	loggedAt time.Time
	held     int
}

// maxThrottled bounds the messages the throttle remembers: River's messages
// are a fixed set, but an error text may carry values.
const maxThrottled = 256

// admit reports whether a record with msg is logged now and, if so, how
// many of its repeats were held back since it was last logged.
func (t *repeatThrottle) admit(msg string) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	r, ok := t.seen[msg]
	if !ok {
		if len(t.seen) >= maxThrottled {
			clear(t.seen)
		}
		t.seen[msg] = &repeat{loggedAt: now}
		return true, 0
	}
	if now.Sub(r.loggedAt) < t.interval {
		r.held++
		return false, 0
	}
	held := r.held
	r.loggedAt, r.held = now, 0
	return true, held
}
