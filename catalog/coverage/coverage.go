// Package coverage counts, from the domain tables alone, each job's targets
// for its data date and how many of them are current: the second direction
// of the lost-events count (docs/architecture.md: targets against the rows
// actually updated that day), which no run's
// own accounting can see once the run has ended — a grade deleted after a
// COMPLETED run, a day the schedule never ran, a plan over the wrong set.
//
// The definitions are the catalog's (jobs.Coverage, in each job package's
// spec.go, with the queries of queries/coverage.sql that count and list
// them); this package caches the counts for [Config.MaxAge] so that every scrape of the api and
// of each worker, and every GET /v1/coverage, costs at most one count per
// job per MaxAge. It must not write anything.
package coverage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
)

// MaxAgeDefault is how old a served count may be: the gauges and
// GET /v1/coverage count again when their counts are older.
const MaxAgeDefault = 15 * time.Second

// MissingLimitMax bounds one page of a missing list.
const MissingLimitMax = 1000

// ErrNoCoverage is returned for a job without a coverage definition.
var ErrNoCoverage = errors.New("job has no coverage definition")

// Job is one job's coverage at AsOf.
type Job struct {
	Job      string
	DataDate time.Time
	Targets  int64
	Current  int64
	AsOf     time.Time
}

// Missing is the targets not current (never negative).
func (j *Job) Missing() int64 { return max(j.Targets-j.Current, 0) }

// Config configures a Reader.
type Config struct {
	// Catalog is the job catalog, whose definitions say which jobs have
	// coverage and their data dates. Required.
	Catalog *catalog.Catalog
	// Location is the jobs' zone (BUILDRISK_TIMEZONE; nil: UTC).
	Location *time.Location
	// MaxAge is how long counts are served from the cache (0:
	// MaxAgeDefault).
	MaxAge time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// OnError is told about every count that failed (a coverage check that
	// could not run); nil ignores them.
	OnError func(ctx context.Context, job string, err error)
}

// WithDefaults returns a copy of c with every unset optional field at its
// default.
func (c Config) WithDefaults() Config {
	if c.Location == nil {
		c.Location = time.UTC
	}
	c.MaxAge = cmp.Or(c.MaxAge, MaxAgeDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Reader counts coverage on a database and caches the counts.
type Reader struct {
	cfg Config
	db  queries.DBTX

	mu   sync.Mutex // held during a count, so concurrent readers share it
	last []*Job
	at   time.Time
}

// New returns a Reader over db (a pool: the counts never run in a
// caller's transaction).
func New(db queries.DBTX, cfg Config) (*Reader, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("coverage: Catalog is required")
	}
	for _, d := range cfg.Catalog.All() {
		if c := d.Coverage(); c != nil && (c.Count == nil || c.Missing == nil || c.DataDate == nil) {
			return nil, fmt.Errorf("coverage: job %s: a coverage definition needs DataDate, Count and Missing", d.Name())
		}
	}
	return &Reader{cfg: cfg.WithDefaults(), db: db}, nil
}

// Location is the jobs' zone (Config.Location): the days of coverage and
// history are its days.
func (r *Reader) Location() *time.Location { return r.cfg.Location }

// Jobs returns the names of the catalog's jobs with a coverage definition,
// in catalog order.
func (r *Reader) Jobs() []string {
	var names []string
	for _, d := range r.cfg.Catalog.All() {
		if d.Coverage() != nil {
			names = append(names, d.Name())
		}
	}
	return names
}

// definition returns job's coverage definition and its data date now, or
// ErrNoCoverage for a job without one.
func (r *Reader) definition(job string) (*catalog.Coverage, time.Time, error) {
	def, ok := r.cfg.Catalog.Lookup(job)
	if !ok || def.Coverage() == nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", job, ErrNoCoverage)
	}
	c := def.Coverage()
	return c, c.DataDate(r.cfg.Now(), r.cfg.Location), nil
}

// Snapshot returns every job's coverage, counted at most MaxAge ago. A
// job whose count failed is left out (and told to OnError); the error
// joins those failures.
func (r *Reader) Snapshot(ctx context.Context) ([]*Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && r.cfg.Now().Sub(r.at) < r.cfg.MaxAge {
		return r.last, nil
	}
	var (
		out  []*Job
		errs []error
	)
	for _, job := range r.Jobs() {
		c, err := r.Count(ctx, job)
		if err != nil {
			if r.cfg.OnError != nil {
				r.cfg.OnError(ctx, job, err)
			}
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if len(errs) > 0 {
		// Not cached: the next reader tries again.
		return out, errors.Join(errs...)
	}
	r.last, r.at = out, r.cfg.Now()
	return out, nil
}

// Count counts job's coverage now, bypassing the cache.
func (r *Reader) Count(ctx context.Context, job string) (*Job, error) {
	c, day, err := r.definition(job)
	if err != nil {
		return nil, err
	}
	targets, current, err := c.Count(ctx, r.db, day)
	if err != nil {
		return nil, fmt.Errorf("error counting coverage of %s: %w", job, err)
	}
	return &Job{Job: job, DataDate: day, Targets: targets, Current: current, AsOf: r.cfg.Now()}, nil
}

// Missing returns up to limit of job's missing targets for its data date
// after the target `after` ("" from the first), in key order, and the data
// date. Returns ErrNoCoverage for a job without a definition.
func (r *Reader) Missing(ctx context.Context, job, after string, limit int) ([]string, time.Time, error) {
	c, day, err := r.definition(job)
	if err != nil {
		return nil, time.Time{}, err
	}
	limit = min(max(limit, 1), MissingLimitMax)
	targets, err := c.Missing(ctx, r.db, day, after, int32(limit))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("error listing missing targets of %s: %w", job, err)
	}
	return targets, day, nil
}

// History days: GET /v1/jobs/{job}/history serves 1 to HistoryDaysMax of
// them, HistoryDaysDefault unless asked.
const (
	HistoryDaysDefault = 14
	HistoryDaysMax     = 31
)

// Day is one day of a job's history (queries/job_history.sql).
type Day struct {
	// Day is the calendar day in the jobs' zone, at midnight UTC.
	Day time.Time
	// Outcome is the status of the job's newest execution that started
	// that day (completed, failed, stopped, abandoned; running while
	// active), else missed when a due time of that day was recorded
	// missed, else none.
	Outcome string
	// Covered reports whether Targets and Current are meaningful: the job
	// has a coverage definition and the day is one of its data dates.
	Covered bool
	// Targets is TODAY's target set: the set is not kept per day, so
	// every past day is measured against today's targets.
	Targets int64
	// Current is how many of today's targets have the job's row for Day.
	Current int64
}

// Percent is Current of Targets in percent (100 with no targets); nil when
// the day is not Covered.
func (d *Day) Percent() *float64 {
	if !d.Covered {
		return nil
	}
	p := 100.0
	if d.Targets > 0 {
		p = float64(d.Current) * 100 / float64(d.Targets)
	}
	return &p
}

// History returns job's last days days, newest first, in one statement:
// the days are the database's (its clock, in the Reader's zone), never the
// process's. days is clamped to 1..HistoryDaysMax. The coverage of a day is
// measured against today's target set (see Day.Targets).
func (r *Reader) History(ctx context.Context, job string, days int) ([]*Day, error) {
	days = min(max(days, 1), HistoryDaysMax)
	rows, err := queries.New().JobHistory(ctx, r.db, &queries.JobHistoryParams{Job: job, Tz: r.cfg.Location.String(), Days: int32(days)})
	if err != nil {
		return nil, fmt.Errorf("error reading the history of %s: %w", job, err)
	}
	_, _, noCoverage := r.definition(job)
	bound := noCoverage == nil
	out := make([]*Day, len(rows))
	for i, row := range rows {
		out[i] = &Day{Day: row.Day, Outcome: row.Outcome, Covered: row.Covered && bound, Targets: row.Targets, Current: row.CurrentTargets}
	}
	return out, nil
}
