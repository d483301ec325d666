// Package request owns a request's life, from its insert to its end: the
// job_request record and the River job that delivers it. Its Owner
// enqueues a request under the job's advisory lock (stale cleanup, dedupe,
// River insert in the same transaction), claims it for a run, ends it,
// reaps the requests of dead workers, reconciles the runs whose recording
// failed, and applies the chain and resume policies where a request ends,
// so that every path that ends a request ends it the same way.
//
// The api, the CLI, schedules, chains and resumes all enqueue through the
// Owner, so a scheduled run is recorded and deduplicated exactly like a
// click. It must not run jobs or know about HTTP.
package request

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// ErrUnknownJob is returned for a job name the catalog does not hold.
var ErrUnknownJob = errors.New("unknown job")

// DuplicateError is returned when the job already has an active (QUEUED or
// RUNNING) request.
type DuplicateError struct {
	Job             string
	ActiveRequestID int64
}

// Error implements error.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("job %s already has an active request %d", e.Job, e.ActiveRequestID)
}

// OverCapError refuses a run whose estimated calls exceed its provider's
// whole daily cap: no day could serve it, so the request must be split. It
// wraps the *jobs.ParamError that names the field (params), so it is a bad
// param to every caller that does not look for it.
type OverCapError struct {
	Provider  string
	Cap       int
	Estimated int
}

// Error implements error.
func (e *OverCapError) Error() string { return e.param().Error() }

// Unwrap returns the *jobs.ParamError that names the field.
func (e *OverCapError) Unwrap() error { return e.param() }

func (e *OverCapError) param() *catalog.ParamError {
	return &catalog.ParamError{
		Field:   "params",
		Message: fmt.Sprintf("estimated %d calls exceed the %s daily cap of %d; give maxCalls (at most %d) to run it a day's budget at a time, or split the request", e.Estimated, e.Provider, e.Cap, e.Cap),
	}
}

// EstimateFunc estimates a run's external calls when the params alone do
// not tell (creditEval's calls depend on the exposure ledger). It reads the
// database but never writes it.
type EstimateFunc func(ctx context.Context, db queries.DBTX, params *catalog.Params) (int, error)

// StaleAfterDefault is the default stale window of Config: a worker silent
// for longer is dead, and its requests are reaped.
const StaleAfterDefault = 60 * time.Second

// Config configures an Owner.
type Config struct {
	// Estimators override the catalog's estimate for the named jobs.
	Estimators map[string]EstimateFunc
	// Catalog is the set of known jobs. Required.
	Catalog *catalog.Catalog
	// DailyCaps is each provider's daily call cap; an estimate above a whole
	// day's cap is refused. A provider missing here has no cap.
	DailyCaps map[string]int
	// Instruments counts requests, reaps and resumes. Required.
	Instruments *observability.Instruments
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// StaleAfter is the stale window (BUILDRISK_STALE_AFTER): a worker whose
	// heartbeat is older is dead, and the requests it holds are reaped, by
	// the reaper's passes and by every enqueue of their job before its
	// duplicate check. An active request held by a worker that beat within
	// it, and that its River job will still run, is one no reap can free,
	// so a duplicate of it is answered without the job's advisory lock.
	// Default StaleAfterDefault.
	StaleAfter time.Duration
	// Resume is the resume policy Finish applies; its zero value resumes
	// nothing.
	Resume ResumePolicy
	// Reachability is the process's link to the database, shared with its
	// heartbeat or probe; reaps wait on it and feed it. Nil makes one of
	// the owner's own.
	Reachability *Reachability
	// Schedules tells when the scheduled runs of the jobs are due, so that
	// a run resumed at a provider's daily reset waits for a scheduled run
	// of the same provider due within the hour after it; nil: none.
	Schedules DueTimes
	// Now is the clock of the daily reset, the call budget's (tests move
	// it); nil reads the database's.
	Now func() time.Time
}

// DueTimes tells when scheduled runs are due.
type DueTimes interface {
	// NextDue returns the first due time of job's schedule at or after
	// from, and whether the job has a schedule.
	NextDue(job string, from time.Time) (time.Time, bool)
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	if c.Reachability == nil {
		c.Reachability = NewReachability()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Catalog == nil:
		return errors.New("request: Catalog is required")
	case c.Instruments == nil:
		return errors.New("request: Instruments is required")
	}
	return nil
}

// Owner owns every transition of a request's life: it creates requests
// (Enqueue), claims them for a run and records the run's execution on
// them (Claim, Started), and ends them (Finish), whoever ends them: the
// run itself, the reaper (a dead worker's), the reconcile loop (a run
// whose recording failed) or an operator's abandon. It is the only code
// that writes job_request, and the only caller of River's end-of-job API,
// in the transaction that writes the request: a request and its River job
// never disagree about work still to do.
//
// A River job only delivers its request to a worker. The claim, in the
// transaction that starts the run, completes it (river.JobCompleteTx, which
// River allows only inside the worker that works the job), so from then on
// the request row alone tracks the run: a worker killed mid-run leaves no
// River job running under its request, and River's rescuer, which cannot
// tell a long live run from a dead one, is on no path. A request that ends
// before it is claimed has its River job cancelled with it (JobCancelTx:
// at once unless River is handing it to a worker at that instant).
type Owner struct {
	cfg     Config
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	queries *queries.Queries
}

// NewOwner returns an Owner. riverClient inserts each request's River job
// and ends it; nil records requests without one (and resumes nothing), for
// tests and for processes that run what they record.
func NewOwner(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], cfg Config) (*Owner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Owner{cfg: cfg, pool: pool, river: riverClient, queries: queries.New()}, nil
}

// River returns the River client the Owner inserts and ends River jobs
// with (nil without one).
func (o *Owner) River() *river.Client[pgx.Tx] { return o.river }

// Reachability returns the process's link to the database the Owner's
// reaps wait on.
func (o *Owner) Reachability() *Reachability { return o.cfg.Reachability }
