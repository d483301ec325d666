package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/buildrisk/radar/jobs/request"
)

// ScheduleOff disables a job's schedule (BUILDRISK_SCHEDULE_<JOB>=off).
const ScheduleOff = "off"

// Schedule is one job's periodic request.
type Schedule struct {
	// Job is the job name.
	Job string
	// Spec is the schedule as configured: a cron expression (in the
	// configured time zone) or "@every <Go duration>".
	Spec string
	// Next computes the next run after a time.
	Next river.PeriodicSchedule
	// Params returns the params of the request made at a tick.
	Params func(now time.Time) []byte
}

// ParseSchedule parses a cron expression evaluated in loc, or
// "@every <duration>" (sub-second allowed, for tests).
func ParseSchedule(spec string, loc *time.Location) (river.PeriodicSchedule, error) {
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: @every needs a positive Go duration", spec)
		}
		return river.PeriodicInterval(d), nil
	}
	sched, err := cron.ParseStandard("CRON_TZ=" + loc.String() + " " + spec)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression: %w", spec, err)
	}
	return sched, nil
}

// ScheduleArgs is the River job a schedule tick inserts. Working it runs
// nothing: it inserts a job request through the same path as the API.
type ScheduleArgs struct {
	Job string `json:"job"`
}

// Kind implements river.JobArgs.
func (ScheduleArgs) Kind() string { return "buildrisk_schedule" }

// ScheduleEnqueueFunc inserts a scheduled request (source schedule).
type ScheduleEnqueueFunc func(ctx context.Context, p *request.EnqueueParams) (*request.EnqueueResult, error)

// ScheduleTimeout bounds a schedule tick's River job, which only inserts a
// request. It must be finite: River's rescuer never frees a running job
// whose timeout is -1 (the client's default here), so a tick whose worker
// died would stay running forever.
const ScheduleTimeout = time.Minute

type scheduleWorker struct {
	river.WorkerDefaults[ScheduleArgs]
	w *Worker
}

// Timeout implements river.Worker: ScheduleTimeout.
func (*scheduleWorker) Timeout(*river.Job[ScheduleArgs]) time.Duration { return ScheduleTimeout }

// Work inserts the tick's request. An active request for the job makes the
// tick a duplicate: recorded by the enqueuer's counter and one log line,
// never an error or a stack trace.
func (sw *scheduleWorker) Work(ctx context.Context, job *river.Job[ScheduleArgs]) error {
	sched, ok := sw.w.schedules[job.Args.Job]
	if !ok || sw.w.cfg.ScheduleEnqueue == nil {
		return river.JobCancel(fmt.Errorf("no schedule for job %q", job.Args.Job))
	}
	res, err := sw.w.cfg.ScheduleEnqueue(ctx, &request.EnqueueParams{
		Job: job.Args.Job, Params: sched.Params(time.Now()), Source: request.SourceSchedule, RequestedBy: "schedule",
	})
	var dup *request.DuplicateError
	switch {
	case errors.As(err, &dup):
		sw.w.cfg.Logger.InfoContext(ctx, "scheduled tick skipped: job already active",
			slog.String("job", job.Args.Job), slog.Int64("active_request_id", dup.ActiveRequestID))
		return nil
	case err != nil:
		return river.JobCancel(err)
	}
	sw.w.cfg.Logger.InfoContext(ctx, "scheduled request inserted", slog.String("job", job.Args.Job), slog.Int64("request_id", res.Request.ID))
	return nil
}

func periodicJobs(schedules []Schedule) []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for _, s := range schedules {
		out = append(out, river.NewPeriodicJob(s.Next, func() (river.JobArgs, *river.InsertOpts) {
			return ScheduleArgs{Job: s.Job}, &river.InsertOpts{MaxAttempts: 1}
		}, &river.PeriodicJobOpts{ID: "schedule_" + s.Job}))
	}
	return out
}
