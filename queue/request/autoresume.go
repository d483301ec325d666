package request

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// Resume policy defaults.
const (
	AutoResumeMaxDefault     = 3
	AutoResumeBackoffDefault = 10 * time.Second
	autoResumeBackoffMax     = 10 * time.Minute
)

// AutoResumeCausesDefault is the default of BUILDRISK_AUTO_RESUME: every
// cause that is infrastructure's doing, so the same fault (an outage
// shorter or longer than the stale window) ends the same way, resumed, and
// a provider's Retry-After, resumed when the provider said.
const AutoResumeCausesDefault = string(radartype.CauseDrain + "," + radartype.CauseReap + "," + radartype.CauseDatabase + "," + radartype.CauseProviderRate)

// ResumePolicy decides which stopped runs resume by themselves.
type ResumePolicy struct {
	// Causes are the causes that resume; empty turns automatic resumes off.
	Causes []radartype.StopCause
	// MaxPerDay is how many automatic resumes one instance gets per day (in
	// Location, by the database's clock); past it the run stays stopped or
	// failed and the refusal is counted, so a run that crashes its worker
	// every time cannot loop. Resumes of drains do not count: a rolling
	// deploy is not a crash loop. Nor do those of provider-rate stops: each
	// waits as long as the provider asked, longer than the client waits
	// within a call, and a provider that limits a long run by the hour must
	// not strand it after a few hours.
	MaxPerDay int
	// Backoff is the delay before the first automatic resume of the day; the
	// n-th waits Backoff·2^(n-1), at most ten minutes. A stop that recorded
	// a time of its own (Stopped.Wait: a provider's Retry-After) resumes no
	// earlier than that.
	Backoff time.Duration
	// Location is the day boundary of MaxPerDay.
	Location *time.Location
}

// ParseResumeCauses parses BUILDRISK_AUTO_RESUME: a comma list of
// radartype.ResumableCauses, or "none"/"" for none.
func ParseResumeCauses(s string) ([]radartype.StopCause, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var causes []radartype.StopCause
	for part := range strings.SplitSeq(s, ",") {
		cause := radartype.StopCause(strings.TrimSpace(part))
		if !cause.Resumable() {
			names := make([]string, 0, 3)
			for _, c := range radartype.ResumableCauses() {
				names = append(names, c.String())
			}
			return nil, fmt.Errorf("unknown cause %q (want a comma list of %s, or none)", cause, strings.Join(names, ", "))
		}
		if !slices.Contains(causes, cause) {
			causes = append(causes, cause)
		}
	}
	return causes, nil
}

func (p ResumePolicy) withDefaults() ResumePolicy {
	p.Backoff = cmp.Or(p.Backoff, AutoResumeBackoffDefault)
	if p.Location == nil {
		p.Location = time.UTC
	}
	return p
}

// backoff is the delay before the attempt-th automatic resume (1-based).
func (p ResumePolicy) backoff(attempt int) time.Duration {
	delay := p.Backoff
	for i := 1; i < attempt && delay < autoResumeBackoffMax; i++ {
		delay *= 2
	}
	return min(delay, autoResumeBackoffMax)
}

// Stopped is a run that ended without completing, as the resume policy
// sees it.
type Stopped struct {
	// Request is the stopped run's request, already finished in tx.
	Request *queries.JobRequest
	// ExecutionID is the execution that stopped.
	ExecutionID int64
	// Cause is what stopped the run.
	Cause radartype.StopCause
	// Wait, when positive, is how long from now the resume must wait at
	// least: for CauseProviderRate, what the provider's Retry-After asked
	// (bounded by upstream.ClientConfig.RetryAfterMax). It is recorded on
	// the execution (resume_at, the database's clock), so a stop finished
	// later by the reconcile loop, without it, waits for the same moment.
	Wait time.Duration
}

// ResumeTx records why a run stopped (the execution's stop_cause, and its
// resume_at for a Stopped.Wait) and applies the resume policy to it inside
// tx, the
// transaction that records the stop (or the reap), so a stopped run and its
// resume commit together: there is never a moment where the run is stopped
// and its resume missing. It returns the new request's id, or 0 when the
// policy does not resume this run (a cause it does not name, a
// confirmPurge run, the day's attempts spent, no River client to run it).
//
// The resume goes through the same path as every request (advisory lock,
// duplicate check, restart rules) but skips the stale cleanup: its callers
// are the cleanup, or the run's own worker.
func (o *Owner) ResumeTx(ctx context.Context, tx pgx.Tx, s *Stopped) (int64, error) {
	if s.Cause == radartype.CauseCap {
		// A day's budget spent: the run resumes at the provider's next
		// reset (recorded as the stop's resume_at, like a Retry-After).
		wait, err := o.untilReset(ctx, tx, s.Request.Job)
		if err != nil {
			return 0, err
		}
		s.Wait = max(s.Wait, wait)
	}
	waitSeconds, err := o.queries.JobExecutionSetStopCause(ctx, tx, &queries.JobExecutionSetStopCauseParams{
		ID: s.ExecutionID, StopCause: string(s.Cause), ResumeInSeconds: notBeforeSeconds(s.Wait),
	})
	if err != nil {
		return 0, fmt.Errorf("error recording stop cause: %w", err)
	}
	policy := o.cfg.Resume.withDefaults()
	if o.river == nil || !slices.Contains(policy.Causes, s.Cause) || s.Request.ConfirmPurge {
		return 0, nil
	}
	logger := o.cfg.Logger.With(slog.String("job", s.Request.Job), slog.Int64("request_id", s.Request.ID),
		slog.Int64("execution_id", s.ExecutionID), slog.String("cause", string(s.Cause)))

	exec, err := o.queries.JobExecutionGetByID(ctx, tx, s.ExecutionID)
	if err != nil {
		return 0, fmt.Errorf("error reading stopped execution: %w", err)
	}
	attempts, err := o.queries.JobRequestResumesToday(ctx, tx, &queries.JobRequestResumesTodayParams{InstanceID: exec.InstanceID, Tz: policy.Location.String()})
	if err != nil {
		return 0, fmt.Errorf("error counting automatic resumes: %w", err)
	}
	if countsAgainstMaxPerDay(s.Cause) && int(attempts) >= policy.MaxPerDay {
		o.cfg.Instruments.AutoResumeRefused(ctx, s.Request.Job, s.Cause)
		logger.ErrorContext(ctx, "automatic resume refused: the instance has used every attempt of the day; request it by hand once the cause is fixed",
			slog.Int64("attempts", attempts), slog.Int("max_per_day", policy.MaxPerDay))
		return 0, nil
	}

	var maxCalls *int
	if s.Request.MaxCalls != nil {
		v := int(*s.Request.MaxCalls)
		maxCalls = &v
	}
	p := &EnqueueParams{
		Job:         s.Request.Job,
		Params:      s.Request.Params,
		MaxCalls:    maxCalls,
		Source:      radartype.SourceResume,
		RequestedBy: fmt.Sprintf("resume:%s:execution %d", s.Cause, s.ExecutionID),
		// The later of the policy's backoff and the stop's own time (the
		// provider's), counted from the stop's recording in this tx.
		NotBefore:   max(policy.backoff(int(attempts)+1), time.Duration(waitSeconds*float64(time.Second))),
		skipCleanup: true,
	}
	_, params, err := o.Validate(ctx, tx, p)
	if err != nil {
		// The params were valid when the run started; a catalog that changed
		// since (a rolling deploy) refuses them now. Keep the stop recorded.
		o.cfg.Instruments.AutoResumeRefused(ctx, s.Request.Job, s.Cause)
		logger.ErrorContext(ctx, "automatic resume refused: the run's params no longer validate", slog.String("error", err.Error()))
		return 0, nil
	}
	// A savepoint keeps a refused insert from undoing the stop it follows.
	savepoint, err := tx.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error opening savepoint: %w", err)
	}
	res, err := o.enqueueTx(ctx, savepoint, p, params)
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		// Someone asked again first: their request resumes the run.
		_ = savepoint.Rollback(ctx)
		logger.InfoContext(ctx, "automatic resume not needed: the job already has an active request", slog.Int64("active_request_id", dup.ActiveRequestID))
		return 0, nil
	case catalog.IsParamError(err):
		// What is left is over the daily cap now (a cap lowered since):
		// keep the stop recorded; a request with maxCalls resumes it.
		_ = savepoint.Rollback(ctx)
		o.cfg.Instruments.AutoResumeRefused(ctx, s.Request.Job, s.Cause)
		logger.ErrorContext(ctx, "automatic resume refused", slog.String("error", err.Error()))
		return 0, nil
	case err != nil:
		_ = savepoint.Rollback(ctx)
		return 0, err
	}
	if res.ResumesExecutionID == nil || *res.ResumesExecutionID != s.ExecutionID {
		// The restart rules would start afresh instead of resuming this
		// execution (a newer execution exists): that is not a resume.
		_ = savepoint.Rollback(ctx)
		logger.InfoContext(ctx, "automatic resume not inserted: the restart rules do not resume this execution")
		return 0, nil
	}
	if err := o.queries.JobRequestSetResumeCause(ctx, savepoint, &queries.JobRequestSetResumeCauseParams{ID: res.Request.ID, ResumeCause: string(s.Cause)}); err != nil {
		_ = savepoint.Rollback(ctx)
		return 0, fmt.Errorf("error recording resume cause: %w", err)
	}
	if err := savepoint.Commit(ctx); err != nil {
		return 0, fmt.Errorf("error releasing savepoint: %w", err)
	}
	o.cfg.Instruments.RequestRecorded(ctx, s.Request.Job, radartype.SourceResume, observability.ResultAccepted)
	o.cfg.Instruments.AutoResumed(ctx, s.Request.Job, s.Cause)
	logger.InfoContext(ctx, "stopped run resumes by itself",
		slog.Int64("resume_request_id", res.Request.ID), slog.Int64("attempt", attempts+1), slog.Duration("backoff", p.NotBefore))
	return res.Request.ID, nil
}

// countsAgainstMaxPerDay reports whether a resume of a run stopped by cause
// counts against ResumePolicy.MaxPerDay (and is refused past it): every
// cause but a drain (a deploy), a provider's Retry-After (a wait the
// provider asked for) and a daily cap (a wait for the next day's budget),
// which the count (JobRequestResumesToday) skips too.
func countsAgainstMaxPerDay(cause radartype.StopCause) bool {
	return cause != radartype.CauseDrain && cause != radartype.CauseProviderRate && cause != radartype.CauseCap
}

// resetWait is how long after a provider's daily reset a resumed run looks
// for a scheduled run of the same provider to wait for.
const resetWait = time.Hour

// untilReset returns how long from now a run of job stopped by its
// provider's daily cap waits: until the provider's next reset (the next
// midnight in the policy's Location, by the budget's clock), or, when a
// scheduled run of a job of the same provider is due within resetWait
// after it, until that run is due, so that the day's scheduled runs are
// served before a backfill spends their budget.
func (o *Owner) untilReset(ctx context.Context, db queries.DBTX, job string) (time.Duration, error) {
	now, err := o.now(ctx, db)
	if err != nil {
		return 0, err
	}
	loc := o.cfg.Resume.withDefaults().Location
	local := now.In(loc)
	reset := time.Date(local.Year(), local.Month(), local.Day()+1, 0, 0, 0, 0, loc)
	resumeAt := reset
	if def, ok := o.cfg.Catalog.Lookup(job); ok && o.cfg.Schedules != nil {
		for _, other := range o.cfg.Catalog.All() {
			if other.Provider() != def.Provider() {
				continue
			}
			if due, ok := o.cfg.Schedules.NextDue(other.Name(), reset); ok && due.Before(reset.Add(resetWait)) && due.After(resumeAt) {
				resumeAt = due
			}
		}
	}
	return resumeAt.Sub(now), nil
}

// now is the clock of the daily reset: Config.Now, or the database's.
func (o *Owner) now(ctx context.Context, db queries.DBTX) (time.Time, error) {
	if o.cfg.Now != nil {
		return o.cfg.Now(), nil
	}
	now, err := o.queries.DatabaseNow(ctx, db)
	if err != nil {
		return time.Time{}, fmt.Errorf("error reading the database's clock: %w", err)
	}
	return now, nil
}
