package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
)

// Defaults of Config (the contract's values).
const (
	HeartbeatIntervalDefault = 10 * time.Second
	StaleAfterDefault        = 60 * time.Second
	ReapIntervalDefault      = 30 * time.Second
	DrainTimeoutDefault      = 45 * time.Second
	ReconcileIntervalDefault = 30 * time.Second
	// RetentionDefault is how long the registry keeps the row of a worker
	// that stopped beating.
	RetentionDefault         = 7 * 24 * time.Hour
	MaxConcurrentJobsDefault = 10
	// DBTimeoutDefault bounds each database call of a worker (the
	// connections' statement_timeout); FenceAfterFor and DBTimeoutFor
	// derive the defaults from the stale window.
	DBTimeoutDefault = 5 * time.Second
	// SchedulePollIntervalDefault is the longest time between scheduler
	// passes besides the due times: how soon a deferred due time is
	// enqueued after its blocking request ended.
	SchedulePollIntervalDefault = 30 * time.Second
	// SchedulePassTimeoutDefault bounds one scheduler pass.
	SchedulePassTimeoutDefault = time.Minute
	// FetchCooldownDefault is River's minimum spacing of fetches, and of
	// the insert notifications this worker's client sends (chains,
	// schedules): River rate-limits an inserting client's NOTIFYs by its
	// FetchCooldown, so a longer one leaves back-to-back requests waiting
	// for the poll.
	FetchCooldownDefault = river.FetchCooldownMin
	// FetchPollIntervalDefault is River's fallback poll, for inserts whose
	// notification was lost.
	FetchPollIntervalDefault = 500 * time.Millisecond
	// SnoozeMax is the longest a run's River job is snoozed at once: River
	// leaves a job snoozed for up to its scheduler interval (5 s) available,
	// to be fetched by any client once due; a longer snooze makes it
	// scheduled, which only River's elected leader makes available again.
	// Waits longer than this snooze several times.
	SnoozeMax = 4 * time.Second
)

// FenceAfterFor returns the default fencing threshold for a stale window,
// a heartbeat interval and a database timeout: half of the window, or, when
// that would break the inequality CheckFencing checks, three quarters of
// what the window leaves after the other two (so the default always passes
// CheckFencing when the other two leave any room).
func FenceAfterFor(staleAfter, heartbeatInterval, dbTimeout time.Duration) time.Duration {
	if fence := staleAfter / 2; CheckFencing(fence, heartbeatInterval, dbTimeout, staleAfter) == nil {
		return fence
	}
	return max((staleAfter-heartbeatInterval-dbTimeout)*3/4, time.Millisecond)
}

// DBTimeoutFor returns the default database call timeout for a stale
// window and a heartbeat interval: DBTimeoutDefault, at most a quarter of
// the window and at most a third of what the window leaves after one
// heartbeat interval, so that FenceAfterFor still finds room; never below
// a millisecond (statement_timeout is set in whole milliseconds, 0 would
// disable it).
func DBTimeoutFor(staleAfter, heartbeatInterval time.Duration) time.Duration {
	d := min(DBTimeoutDefault, staleAfter/4, (staleAfter-heartbeatInterval)/3)
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// CheckFencing returns an error unless fenceAfter + heartbeatInterval +
// dbTimeout < staleAfter: the inequality that makes a worker fence itself
// (and have its last write land) before any reaper can take it for dead.
func CheckFencing(fenceAfter, heartbeatInterval, dbTimeout, staleAfter time.Duration) error {
	if fenceAfter+heartbeatInterval+dbTimeout >= staleAfter {
		return fmt.Errorf("fencing threshold %s + heartbeat interval %s + database timeout %s must be less than the stale window %s, "+
			"so that a worker stops its work before a reaper can take it for dead", fenceAfter, heartbeatInterval, dbTimeout, staleAfter)
	}
	return nil
}

// Config configures a Worker.
type Config struct {
	// ID is `pid@hostname#boot`. Required (see NewID).
	ID string
	// Hostname and PID are the slot the ID was made from.
	Hostname string
	PID      int
	// Boot is the random part of ID.
	Boot string
	// Version is reported in the registry.
	Version string
	// ConfiguredKeys are the NAMES of the provider keys this worker holds.
	ConfiguredKeys []string
	// DailyCaps are the daily call caps per provider this process enforces
	// (BUILDRISK_DAILY_CAP_<P>), recorded on its registry row so the api
	// shows the caps really enforced (GET /v1/providers).
	DailyCaps map[string]int

	HeartbeatInterval time.Duration
	StaleAfter        time.Duration
	// FenceAfter is the fencing threshold: a process whose last successful
	// heartbeat is older cancels its runs' work in flight uncommitted and
	// turns not-ready (default FenceAfterFor(StaleAfter)).
	FenceAfter time.Duration
	// DBTimeout bounds each database call of the worker, heartbeats
	// included (default DBTimeoutFor(StaleAfter)).
	DBTimeout         time.Duration
	ReapInterval      time.Duration
	DrainTimeout      time.Duration
	ReconcileInterval time.Duration
	// Retention is how long a silent worker's registry row is kept (it
	// must exceed StaleAfter); the reap loop deletes older rows that hold
	// no active request. Default RetentionDefault.
	Retention time.Duration
	// MaxConcurrentJobs bounds how many requests this process runs at once.
	MaxConcurrentJobs int
	// FetchCooldown and FetchPollInterval are River's; defaults
	// FetchCooldownDefault and FetchPollIntervalDefault.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// PollOnly runs River without LISTEN (River's Config.PollOnly), for
	// PgBouncer's transaction pooling, where a LISTEN does not survive its
	// transaction: a new request is then picked up by the next fetch poll,
	// within FetchPollInterval, and a leader that resigns is replaced
	// within about five seconds.
	PollOnly bool
	// DisableReaper turns the periodic reaper off (tests show that the
	// API's cleanup-before-enqueue alone frees a job).
	DisableReaper bool
	// LeaderElectionDisabled keeps the worker's River client from ever
	// standing for River's leader (River's Config.LeaderElectionDisabled):
	// tests show that no run, resumes included, waits for a leader. Refused
	// with Schedules, whose passes only a leader inserts.
	LeaderElectionDisabled bool

	Instruments *observability.Instruments
	Logger      *slog.Logger
	// RiverPlugins are added to the River client (otelriver).
	RiverPlugins []rivertype.Plugin
	// Schedules are the jobs requested periodically. Only River's elected
	// leader runs scheduler passes; the database makes each due time one
	// request cluster-wide whoever runs them (see Scheduler).
	Schedules []Schedule
	// SchedulePollInterval is the longest wait between scheduler passes.
	SchedulePollInterval time.Duration
	// SchedulePassTimeout bounds one scheduler pass.
	SchedulePassTimeout time.Duration
	// Now, when set, replaces the database's clock as the schedules' clock
	// (tests move it).
	Now func() time.Time
	// Gauges, when set, are recorded on every heartbeat.
	Gauges *Gauges
	// Reachability is the process's link to the database as its heartbeats
	// see it; the worker's reaper waits on it (see Reachability). Nil makes
	// one of the worker's own.
	Reachability *request.Reachability
	// DatabaseWatch is the process's failover detection: each successful
	// heartbeat checks the database's identity with it (see DatabaseWatch),
	// so a move is seen within a HeartbeatInterval or two of the new
	// primary accepting connections (the first heartbeat after the move
	// may meet a connection the old primary broke). Nil makes one of the
	// worker's own.
	DatabaseWatch *DatabaseWatch
	// HeartbeatPool, when set, carries the registry's heartbeats and status
	// changes, so that they never wait for a connection behind chunk work
	// on the main pool. Nil uses the main pool.
	HeartbeatPool *pgxpool.Pool
	// Requests configures the worker's request owner: its chains, resumes
	// and schedules enqueue through it, its reaper and reconcile loop end
	// requests through it. Its StaleAfter, Reachability, Instruments and
	// Logger default to the worker's.
	Requests request.Config
	// Runner configures the worker's batch runner. Its WorkerID, Owner and
	// Fence are the worker's own; its Instruments and Logger default to the
	// worker's.
	Runner batch.Config
}

func (c Config) withDefaults() Config {
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	c.DBTimeout = cmp.Or(c.DBTimeout, DBTimeoutFor(c.StaleAfter, c.HeartbeatInterval))
	c.FenceAfter = cmp.Or(c.FenceAfter, FenceAfterFor(c.StaleAfter, c.HeartbeatInterval, c.DBTimeout))
	c.ReapInterval = cmp.Or(c.ReapInterval, ReapIntervalDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.MaxConcurrentJobs = cmp.Or(c.MaxConcurrentJobs, MaxConcurrentJobsDefault)
	c.SchedulePollInterval = cmp.Or(c.SchedulePollInterval, SchedulePollIntervalDefault)
	c.SchedulePassTimeout = cmp.Or(c.SchedulePassTimeout, SchedulePassTimeoutDefault)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, FetchCooldownDefault)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, FetchPollIntervalDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Reachability == nil {
		c.Reachability = request.NewReachability()
	}
	if c.DatabaseWatch == nil {
		c.DatabaseWatch = NewDatabaseWatch(c.Instruments, c.Logger)
	}
	if c.ConfiguredKeys == nil {
		c.ConfiguredKeys = []string{}
	}
	c.Requests.StaleAfter = cmp.Or(c.Requests.StaleAfter, c.StaleAfter)
	c.Requests.Reachability = cmp.Or(c.Requests.Reachability, c.Reachability)
	c.Requests.Instruments = cmp.Or(c.Requests.Instruments, c.Instruments)
	c.Requests.Logger = cmp.Or(c.Requests.Logger, c.Logger)
	c.Runner.WorkerID = c.ID
	c.Runner.Instruments = cmp.Or(c.Runner.Instruments, c.Instruments)
	c.Runner.Logger = cmp.Or(c.Runner.Logger, c.Logger)
	return c
}

func (c Config) validate() error {
	switch {
	case c.ID == "" || c.Hostname == "" || c.Boot == "":
		return errors.New("worker: ID, Hostname and Boot are required")
	case c.Instruments == nil:
		return errors.New("worker: Instruments is required")
	case c.StaleAfter <= c.HeartbeatInterval:
		return fmt.Errorf("worker: StaleAfter (%s) must exceed HeartbeatInterval (%s)", c.StaleAfter, c.HeartbeatInterval)
	case c.Retention <= c.StaleAfter:
		return fmt.Errorf("worker: Retention (%s) must exceed StaleAfter (%s)", c.Retention, c.StaleAfter)
	case len(c.Schedules) > 0 && c.LeaderElectionDisabled:
		return errors.New("worker: Schedules need River's leader election (LeaderElectionDisabled is set)")
	}
	if err := CheckFencing(c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}
