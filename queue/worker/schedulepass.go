package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// ScheduleQueue is the River queue of scheduler passes. It has one slot on
// every worker with schedules, apart from the runs' queue, so that a pass
// never waits for a run to end.
const ScheduleQueue = "buildrisk_schedule"

// schedulePassArgs is a River periodic job: one scheduler pass.
type schedulePassArgs struct{}

// Kind implements river.JobArgs. It must never change once shipped.
func (schedulePassArgs) Kind() string { return "buildrisk_schedule_pass" }

// InsertOpts implements river.JobArgsWithInsertOpts: a failed pass is not
// retried, since the next one follows within SchedulePollInterval and does
// the same work.
func (schedulePassArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: ScheduleQueue, MaxAttempts: 1}
}

// schedulePassWorker runs scheduler passes. River's periodic jobs decide
// where they come from: only River's elected leader inserts them (at its
// start, then at every due time and SchedulePollInterval), and any worker
// with schedules may run one. The schedule's state is in schedule_tick, not
// in River's memory, so a restart or a change of leader loses no due time,
// and passes that overlap record each due time once.
type schedulePassWorker struct {
	river.WorkerDefaults[schedulePassArgs]
	w *Worker
}

// Timeout bounds a pass (SchedulePassTimeout).
func (pw *schedulePassWorker) Timeout(*river.Job[schedulePassArgs]) time.Duration {
	return pw.w.cfg.SchedulePassTimeout
}

// Work runs one pass; its error is River's record of the failed pass.
func (pw *schedulePassWorker) Work(ctx context.Context, _ *river.Job[schedulePassArgs]) error {
	if err := pw.w.scheduler.Pass(ctx); err != nil {
		return fmt.Errorf("scheduler pass: %w", err)
	}
	return nil
}

// passSchedule is when River's leader inserts the next pass: at the
// earliest next due time of any schedule, and at most SchedulePollInterval
// after the previous pass (how a deferred due time is enqueued soon after
// the request it waited for ends).
type passSchedule struct {
	w    *Worker // its scheduler, built after the River client
	poll time.Duration
}

// Next implements river.PeriodicSchedule. It counts from now when River's
// previous run time lies in the past (a leader that could not insert for a
// while), so a late leader runs one pass, not one per missed interval.
func (s passSchedule) Next(previous time.Time) time.Time {
	now := time.Now()
	from := previous
	if now.After(from) {
		from = now
	}
	next := from.Add(s.poll)
	if until, ok := s.w.scheduler.UntilNextDue(); ok && until >= 0 {
		if due := now.Add(until); due.Before(next) {
			next = due
		}
	}
	if !next.After(previous) {
		next = previous.Add(time.Millisecond)
	}
	return next
}

// schedulePeriodicJob is the periodic job of scheduler passes, run once when
// a worker becomes leader (a new leader catches up at once).
func (w *Worker) schedulePeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(passSchedule{w: w, poll: w.cfg.SchedulePollInterval},
		func() (river.JobArgs, *river.InsertOpts) { return schedulePassArgs{}, nil },
		&river.PeriodicJobOpts{ID: "buildrisk_schedule_pass", RunOnStart: true})
}

// leaderHook closes w.leading the first time this worker's River client
// starts its periodic jobs, which River does on the worker it elected
// leader.
func (w *Worker) leaderHook() rivertype.Hook {
	return river.HookPeriodicJobsStartFunc(func(context.Context, *rivertype.HookPeriodicJobsStartParams) error {
		w.leadOnce.Do(func() { close(w.leading) })
		return nil
	})
}

// Leading returns a channel closed once River has made this worker its
// leader (it started the worker's periodic jobs), at least once.
func (w *Worker) Leading() <-chan struct{} { return w.leading }
