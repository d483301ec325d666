package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fault is one kind of fault the soak injects. Inject does it once (and
// undoes it: a killed worker is restarted, a stopped database started, the
// fake upstream's baseline restored) and says whether it took effect; a
// fault that found nothing to act on (no job running to stop) is not
// counted. To add a fault, add an entry to faults below.
type Fault struct {
	Name string
	// Upstream says the fault acts on the fake upstream: those faults run
	// in their own stream, alongside the process and database faults, so
	// that a slow or failing provider meets an outage or a kill.
	Upstream    bool
	Description string
	Inject      func(ctx context.Context, f *faulter) (bool, error)
	// NotInjected, when set, says why the soak cannot inject this fault
	// against the binary under test; it is listed in the table with 0.
	NotInjected string
	// Spoils says the fault makes some answers of 200 unusable (a body in
	// no provider's format, a short page, an empty grade): a call made
	// again after one of those is a retry of a bad answer, not a paid
	// answer thrown away, and repeats-bounded does not count it.
	Spoils bool
}

// faulter injects faults at random moments and counts them.
type faulter struct {
	s      *system
	rng    *rand.Rand
	tally  *faultTally
	stream int // which fault stream this is (for the per-fault attribution)
}

// faultTally counts the faults injected (and the attempts that failed); the
// fault streams share it.
type faultTally struct {
	mu     sync.Mutex
	counts map[string]int
	errors map[string]int
}

func (t *faultTally) add(name string, injected bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errors[name]++
	}
	if injected {
		t.counts[name]++
	}
}

// outage stops PostgreSQL for STALE_AFTER + 2 s and starts it again,
// recording the window in the evidence.
func (f *faulter) outage(ctx context.Context) error {
	start := time.Now()
	pg := f.s.primary()
	if err := pg.stopServer(); err != nil {
		return err
	}
	sleep(context.WithoutCancel(ctx), f.s.cfg.staleAfter+2*time.Second)
	err := pg.startServer()
	f.s.ev.addOutage(Outage{Start: start, End: time.Now()})
	return err
}

// upstreamWindow is how long an upstream fault lasts.
func (f *faulter) upstreamWindow() time.Duration {
	return 2*time.Second + time.Duration(f.rng.Int64N(int64(6*time.Second)))
}

// upstreamFault applies patch to the fake upstream for a window, then
// restores the baseline.
func upstreamFault(patch map[string]any) func(ctx context.Context, f *faulter) (bool, error) {
	return func(ctx context.Context, f *faulter) (bool, error) {
		if err := f.s.admin.configure(patch); err != nil {
			return false, err
		}
		sleep(ctx, f.upstreamWindow())
		return true, f.s.restoreUpstream()
	}
}

// faults is every fault the soak knows, in table order.
var faults = []Fault{
	{Name: "worker-kill9", Description: "kill -9 of a random worker, restarted after", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.killWorker(ctx, syscall.SIGKILL)
	}},
	{Name: "worker-sigterm", Description: "SIGTERM of a random worker (drain), restarted after", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.killWorker(ctx, syscall.SIGTERM)
	}},
	{Name: "api-stop", Description: "POST /v1/jobs/{job}/stop of a running job", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		running, err := f.runningJobs(ctx)
		if err != nil || len(running) == 0 {
			return false, err
		}
		return f.stopJob(ctx, running[f.rng.IntN(len(running))], "api-stop")
	}},
	{Name: "pg-restart", Description: "PostgreSQL fast restart (pg_ctl restart -m fast)", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return true, f.s.primary().restart()
	}},
	{Name: "pg-outage", Description: "PostgreSQL down for STALE_AFTER + 2 s", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return true, f.outage(ctx)
	}},
	{Name: "pg-outage-slow-call", Description: "PostgreSQL down for STALE_AFTER + 2 s while a worker waits on a provider call that outlasts the outage and the reap", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		stall := 2*f.s.cfg.staleAfter + 2*f.s.cfg.reapInterval + 4*time.Second
		if err := f.s.admin.configure(map[string]any{"latency": stall.String()}); err != nil {
			return false, err
		}
		// Restored on every return; should it fail, the next upstream fault
		// or the end of the run restores it again.
		defer func() { _ = f.s.restoreUpstream() }()
		// Calls made from now on stall; after a second, a call still in
		// flight is a stalled one (baseline calls take milliseconds).
		for range 5 {
			if !sleep(ctx, time.Second) {
				return false, nil
			}
			if f.s.recorder.inflight.Load() > 0 {
				break
			}
		}
		if f.s.recorder.inflight.Load() == 0 {
			return false, nil // no run was calling the provider
		}
		if err := f.outage(ctx); err != nil {
			return false, err
		}
		// The stalled call is still in flight: let the reapers run first.
		sleep(context.WithoutCancel(ctx), 2*f.s.cfg.reapInterval)
		return true, nil
	}},
	{Name: "pg-terminate-backend", Description: "pg_terminate_backend on every connection of a random worker", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		live := f.s.liveWorkers()
		if len(live) == 0 {
			return false, nil
		}
		w := live[f.rng.IntN(len(live))]
		var n int
		err := f.s.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()) t`, w.record.AppName).Scan(&n)
		return n > 0, err
	}},
	{Name: "table-lock", Description: "ACCESS EXCLUSIVE lock on job_request held for -lock-hold", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		tx, err := f.s.db.Begin(ctx)
		if err != nil {
			return false, err
		}
		// Rolling back releases the lock; there is nothing to keep.
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, "LOCK TABLE job_request IN ACCESS EXCLUSIVE MODE"); err != nil {
			return false, err
		}
		sleep(context.WithoutCancel(ctx), f.s.cfg.lockHold)
		return true, nil
	}},
	{Name: "lock-stall", Description: "ACCESS EXCLUSIVE lock on job_execution held for 5–30 s (every commit, stop and end of a run waits behind it, heartbeats go on)", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.lockStall(ctx)
	}},
	{Name: "failover", Description: "the primary killed (pg_ctl stop -m immediate), the standby promoted 1 s later, then a new standby cloned from the new primary (pg_basebackup)", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.s.failover(context.WithoutCancel(ctx), false)
	}},
	{Name: "split-brain", Description: "a failover whose old primary then comes back read-write for 5 s beside the promoted one (a healed partition), on the old timeline and first in every process's DATABASE_URL, before it is removed and a new standby cloned", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.s.failover(context.WithoutCancel(ctx), true)
	}},
	{Name: "upstream-latency", Upstream: true, Description: "provider latency spike (300 ms a call)", Inject: upstreamFault(map[string]any{"latency": "300ms"})},
	{Name: "upstream-500", Upstream: true, Description: "30% of provider calls answer 500", Inject: upstreamFault(map[string]any{"errorRate": 0.3})},
	{Name: "upstream-429", Upstream: true, Description: "30% of provider calls answer 429", Inject: upstreamFault(map[string]any{"rate429": 0.3})},
	{Name: "upstream-empty", Upstream: true, Description: "30% of credit lookups answer an empty grade", Spoils: true, Inject: upstreamFault(map[string]any{"emptyRate": 0.3})},
	{Name: "upstream-short-page", Upstream: true, Description: "pages shorter than the provider's declared total", Spoils: true, Inject: upstreamFault(map[string]any{shortPageField: 0.3})},
	{Name: "pg-partition", Description: "one worker's connections to PostgreSQL go silent, sockets kept open, for STALE_AFTER + 2 s (inside a transaction when one is caught), then heal", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		w, inTx := f.pickWorker(ctx)
		if w == nil {
			return false, nil
		}
		start := time.Now()
		w.pgLink.partition()
		if inTx {
			f.tally.add("pg-partition-in-transaction", true, nil)
		}
		sleep(context.WithoutCancel(ctx), f.s.cfg.staleAfter+2*time.Second)
		w.pgLink.heal()
		f.s.ev.addCutOff(w.record, Outage{Start: start, End: time.Now()})
		return true, nil
	}},
	{Name: "worker-sigstop", Description: "SIGSTOP of a random worker (inside a transaction when one is caught), SIGCONT after STALE_AFTER + 2 s", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		w, inTx := f.pickWorker(ctx)
		if w == nil {
			return false, nil
		}
		start := time.Now()
		w.proc.signal(syscall.SIGSTOP)
		if inTx {
			f.tally.add("worker-sigstop-in-transaction", true, nil)
		}
		sleep(context.WithoutCancel(ctx), f.s.cfg.staleAfter+2*time.Second)
		w.proc.signal(syscall.SIGCONT)
		f.s.ev.addCutOff(w.record, Outage{Start: start, End: time.Now()})
		return true, nil
	}},
	{Name: "pg-kill9", Description: "kill -9 of the whole PostgreSQL cluster (postmaster and every backend), started again 1–3 s later (crash recovery)", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		start := time.Now()
		pg := f.s.primary()
		if err := pg.kill9(); err != nil {
			return false, err
		}
		sleep(context.WithoutCancel(ctx), time.Second+time.Duration(f.rng.Int64N(int64(2*time.Second))))
		err := pg.startServer()
		f.s.ev.addOutage(Outage{Start: start, End: time.Now()})
		return true, err
	}},
	{Name: "disk-full", Description: "the tablespace holding every table and index (a small tmpfs) filled to the last byte for 0.5–0.8 × STALE_AFTER, then freed", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		// Shorter than the stale window: a worker whose heartbeat cannot
		// find room must not be reaped for the fault alone.
		hold := f.s.cfg.staleAfter/2 + time.Duration(f.rng.Int64N(int64(f.s.cfg.staleAfter*3/10)))
		if err := f.s.disk.fill(); err != nil {
			_ = f.s.disk.free()
			return false, err
		}
		sleep(context.WithoutCancel(ctx), hold)
		return true, f.s.disk.free()
	}},
	{Name: "upstream-cut-body", Upstream: true, Description: "30% of provider calls answer 200 with a body cut short (the connection closed)", Inject: upstreamFault(map[string]any{"cutBodyRate": 0.3})},
	{Name: "upstream-hang-body", Upstream: true, Description: "10% of provider calls answer 200 with a body that stops and never ends", Inject: upstreamFault(map[string]any{"hangBodyRate": 0.1})},
	{Name: "upstream-garbage", Upstream: true, Description: "30% of provider calls answer 200 with a body in no provider's format", Spoils: true, Inject: upstreamFault(map[string]any{"garbageRate": 0.3})},
	{Name: "slow-provider", Upstream: true, Description: "every provider answer's body sent at 1 byte/s (or never ended) for 2–8 s; once a run waits on such a call, an operator stop of its job, the provider kept slow until the stopped execution ended or the stop's bound passed", Inject: func(ctx context.Context, f *faulter) (bool, error) {
		return f.slowProvider(ctx)
	}},
	{Name: "day-rollover", Description: "the call caps' day rolls over mid-run (injected clock)",
		NotInjected: "radar has no clock a process can be given (the budget clock is injectable only in-process, in tests)"},
}

// shortPageField is the fake upstream's configuration field for short
// pages: aptTrade and filingList pages cut short of the total they declare.
const shortPageField = "shortRate"

// lockStall holds an ACCESS EXCLUSIVE lock on job_execution for a random
// 5–30 s from the harness's own connection, the way a migration's ALTER
// TABLE or a pg_dump in its lock queue does: every commit of a run (its
// checkpoint and figures go through its execution's row), every stop and
// every end waits behind it, while the workers' heartbeats (the worker
// table) go on. A run must wait it out or fence itself; it must not pay
// for its items again (repeats-bounded).
func (f *faulter) lockStall(ctx context.Context) (bool, error) {
	hold := 5*time.Second + time.Duration(f.rng.Int64N(int64(25*time.Second)))
	tx, err := f.s.db.Begin(ctx)
	if err != nil {
		return false, err
	}
	// Rolling back releases the lock; there is nothing to keep.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// A transaction of the fleet holding the table keeps the lock from
	// being granted, and everything queues behind the wait: bounded.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE job_execution IN ACCESS EXCLUSIVE MODE"); err != nil {
		return false, fmt.Errorf("error locking job_execution: %w", err)
	}
	f.s.logger.Info("job_execution locked", "hold", hold.Round(time.Millisecond))
	sleep(context.WithoutCancel(ctx), hold)
	return true, nil
}

// stopMargin is what a stop may take beyond the stop timeout: the run's
// next look at its execution's status (StopCheckInterval, 1 s) and the
// commit of its end.
const stopMargin = 5 * time.Second

// slowProvider makes the provider crawl for a window: every answer's body
// at one byte a second (the proxy trickles it) or, at random instead, a
// body that never ends (the fake's hangBodyRate 1). A second into the
// window it stops a run that is waiting on such a call, when one is (an
// operator's stop against a slow provider, which must end STOPPED within
// the stop timeout: stop-bounded), and keeps the provider slow until the
// stopped execution has ended or the stop's bound has passed.
func (f *faulter) slowProvider(ctx context.Context) (bool, error) {
	trickle := f.rng.IntN(2) == 0
	if trickle {
		f.s.recorder.trickle.Store(true)
	} else if err := f.s.admin.configure(map[string]any{"hangBodyRate": 1}); err != nil {
		return false, err
	}
	defer f.s.recorder.trickle.Store(false)
	window := f.upstreamWindow()
	began := time.Now()
	var stopped *StopEvent
	for time.Since(began) < window && sleep(ctx, 250*time.Millisecond) {
		if stopped != nil || time.Since(began) < time.Second {
			continue
		}
		var err error
		if stopped, err = f.stopWaitingRun(ctx); err != nil {
			f.s.logger.Warn("slow-provider: stopping a run", "error", err)
		}
	}
	if stopped != nil {
		f.tally.add("slow-provider-stop", true, nil)
		deadline := stopped.At.Add(f.s.cfg.stopTimeout + stopMargin)
		for time.Now().Before(deadline) && f.s.executionRunning(ctx, stopped.ExecutionID) && sleep(context.WithoutCancel(ctx), 250*time.Millisecond) {
		}
	}
	f.s.recorder.trickle.Store(false)
	return true, f.s.restoreUpstream()
}

// stopWaitingRun stops the job of a run with a provider call in flight (a
// job running whose endpoint the proxy is forwarding a call of); nil when
// no running job is waiting on the provider.
func (f *faulter) stopWaitingRun(ctx context.Context) (*StopEvent, error) {
	waiting := map[string]bool{}
	for _, endpoint := range f.s.recorder.callsInFlight() {
		if ep, ok := endpointJob[endpoint]; ok {
			waiting[ep.job] = true
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	running, err := f.runningJobs(ctx)
	if err != nil {
		return nil, err
	}
	var candidates []string
	for _, job := range running {
		if waiting[job] {
			candidates = append(candidates, job)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	n := len(f.s.ev.stops())
	if ok, err := f.stopJob(ctx, candidates[f.rng.IntN(len(candidates))], "slow-provider"); !ok || err != nil {
		return nil, err
	}
	stops := f.s.ev.stops()
	if len(stops) == n {
		return nil, nil
	}
	return &stops[len(stops)-1], nil
}

// runningJobs returns the jobs GET /v1/jobs shows running.
func (f *faulter) runningJobs(ctx context.Context) ([]string, error) {
	status, out, err := f.s.apiJSON(ctx, http.MethodGet, "/v1/jobs", "")
	if err != nil || status != http.StatusOK {
		return nil, err
	}
	var running []string
	list, _ := out["jobs"].([]any)
	for _, j := range list {
		if m, ok := j.(map[string]any); ok && m["running"] == true {
			running = append(running, fmt.Sprint(m["name"]))
		}
	}
	return running, nil
}

// stopJob asks the api to stop job's running execution, as the operator,
// and records the stop (stop-bounded checks how its execution ended).
func (f *faulter) stopJob(ctx context.Context, job, fault string) (bool, error) {
	status, out, err := f.s.apiJSON(ctx, http.MethodPost, "/v1/jobs/"+job+"/stop", "")
	if err != nil || status != http.StatusAccepted {
		return false, err
	}
	id, err := strconv.ParseInt(fmt.Sprint(out["executionId"]), 10, 64)
	if err != nil {
		return true, fmt.Errorf("the stop of %s answered 202 without an execution id: %v", job, out)
	}
	f.s.ev.addStop(StopEvent{At: time.Now(), Job: job, ExecutionID: id, Fault: fault, Stream: f.stream})
	return true, nil
}

// executionRunning reports whether the execution is still STARTING,
// STARTED or STOPPING (true when the database cannot say, within a second).
func (s *system) executionRunning(ctx context.Context, id int64) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var running bool
	err := s.db.QueryRow(ctx, "SELECT status IN ('STARTING', 'STARTED', 'STOPPING') FROM job_execution WHERE id = $1", id).Scan(&running)
	return err != nil || running
}

// pickWorker picks a live worker, preferring one caught inside a
// transaction: for up to two seconds it looks (through the harness's own
// connections) for a worker backend with a transaction open, and otherwise
// takes one at random. inTx says one was caught; by the time the fault
// acts, the transaction may have ended.
func (f *faulter) pickWorker(ctx context.Context) (w *workerSlot, inTx bool) {
	live := f.s.liveWorkers()
	if len(live) == 0 {
		return nil, false
	}
	byName := map[string]*workerSlot{}
	for _, w := range live {
		byName[w.record.AppName] = w
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		rows, err := f.s.db.Query(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE application_name LIKE 'soak-worker-%' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
			ORDER BY state = 'idle in transaction' DESC, xact_start`)
		if err != nil {
			break // the database is down: any worker will do
		}
		var name string
		var caught []*workerSlot
		_, err = pgx.ForEachRow(rows, []any{&name}, func() error {
			if w := byName[name]; w != nil {
				caught = append(caught, w)
			}
			return nil
		})
		if err == nil && len(caught) > 0 {
			return caught[0], true
		}
		if !sleep(ctx, 20*time.Millisecond) {
			break
		}
	}
	return live[f.rng.IntN(len(live))], false
}

// killWorker kills a random live worker with sig and starts its slot's
// next generation after a pause.
func (f *faulter) killWorker(ctx context.Context, sig syscall.Signal) (bool, error) {
	live := f.s.liveWorkers()
	if len(live) == 0 {
		return false, nil
	}
	w := live[f.rng.IntN(len(live))]
	if f.s.killWorker(w, sig) {
		f.tally.add("worker-sigterm-escalated-to-kill9", true, nil)
	}
	sleep(context.WithoutCancel(ctx), 500*time.Millisecond+time.Duration(f.rng.Int64N(int64(2*time.Second))))
	return true, f.s.startWorker(context.WithoutCancel(ctx), w)
}

// run injects the enabled faults until ctx ends, one at a time with a
// random gap before each, in rounds: each round is a random order of every
// fault, so that even a short soak injects each of them. A fault in
// progress finishes (and undoes itself) first.
func (f *faulter) run(ctx context.Context, enabled []Fault) {
	for {
		for _, i := range f.rng.Perm(len(enabled)) {
			gap := f.s.cfg.faultGap/2 + time.Duration(f.rng.Int64N(int64(f.s.cfg.faultGap)))
			if !sleep(ctx, gap) {
				return
			}
			fault := enabled[i]
			f.s.logger.Info("fault", "name", fault.Name)
			start := time.Now()
			ok, err := fault.Inject(ctx, f)
			if err != nil {
				f.s.logger.Warn("fault failed", "name", fault.Name, "error", err)
			}
			f.tally.add(fault.Name, ok, err)
			if ok {
				f.s.ev.addFault(FaultEvent{Name: fault.Name, Stream: f.stream, Start: start, End: time.Now()})
			}
		}
	}
}

// restoreUpstream sets the fake upstream back to the run's baseline.
func (s *system) restoreUpstream() error {
	patch := map[string]any{"latency": s.cfg.upstreamLatency.String(), "errorRate": 0, "rate429": 0, "emptyRate": 0,
		"cutBodyRate": 0, "hangBodyRate": 0, "garbageRate": 0}
	if s.shortPages {
		patch[shortPageField] = 0
	}
	return s.admin.configure(patch)
}

// sleep waits d or until ctx ends; it reports whether it waited it all.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
