package service

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// FailureLog logs a run of failures of one piece of work once: a warning
// at the first failure, a reminder with the count at most every reminder
// interval while it goes on failing (the failures in between at DEBUG),
// and a line when it succeeds again. A database outage fails every read
// for as long as it lasts, and a line per read (a service's pass every few
// seconds, a metric callback on every scrape) drowned the log in the same
// sentence. A Service logs its passes through one; a metric callback that
// reads the database uses one of its own. Its methods are safe for
// concurrent use.
type FailureLog struct {
	name     string
	logger   *slog.Logger
	reminder time.Duration
	now      func() time.Time
	attrs    []any

	mu         sync.Mutex
	failures   int       // since the last success
	remindedAt time.Time // when the run of failures was last logged
}

// NewFailureLog returns a log of name's failures ("coverage count" logs
// "coverage count failed") to logger (nil: slog.Default), reminding every
// reminder (0: ReminderIntervalDefault). attrs are added to every line.
func NewFailureLog(name string, logger *slog.Logger, reminder time.Duration, attrs ...any) *FailureLog {
	if logger == nil {
		logger = slog.Default()
	}
	if reminder <= 0 {
		reminder = ReminderIntervalDefault
	}
	return &FailureLog{name: name, logger: logger, reminder: reminder, now: time.Now, attrs: attrs}
}

// Observe records the outcome of one attempt: err nil is a success.
func (l *FailureLog) Observe(ctx context.Context, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil && l.failures > 0:
		l.logger.InfoContext(ctx, l.name+" recovered", l.with(slog.Int("failed_passes", l.failures))...)
		l.failures = 0
	case err == nil:
	case l.failures == 0:
		l.failures, l.remindedAt = 1, l.now()
		l.logger.WarnContext(ctx, l.name+" failed", l.with(slog.String("error", err.Error()))...)
	default:
		l.failures++
		if l.now().Sub(l.remindedAt) < l.reminder {
			l.logger.DebugContext(ctx, l.name+" failed", l.with(slog.String("error", err.Error()))...)
			return
		}
		l.remindedAt = l.now()
		l.logger.WarnContext(ctx, l.name+" still failing", l.with(slog.Int("failed_passes", l.failures), slog.String("error", err.Error()))...)
	}
}

// with returns the log's attributes followed by extra, in a new slice.
func (l *FailureLog) with(extra ...any) []any {
	return append(append(make([]any, 0, len(l.attrs)+len(extra)), l.attrs...), extra...)
}
