// Command soak is buildrisk-radar's chaos soak: a black-box harness that
// runs the built radar binary as a small fleet on loopback (its own
// PostgreSQL, the fake upstream behind a recording proxy, one api and three
// workers with short heartbeat, stale and reap settings), makes random
// requests across every job for a set duration while injecting faults at
// random moments, waits for quiescence and then checks the invariants of
// ownership, accounting and answers by reading the database, the fake
// upstream's counts, the processes' metrics and what it saw itself.
//
// It prints a table of the faults injected and the invariants held or
// breached, and exits 1 on any breach with the seed to replay the run (2
// when the soak itself could not run). RELIABILITY.md explains the
// invariants and records results; `make soak` and `make soak-ci` run it.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// config is the soak's configuration, from its flags.
type config struct {
	bin             string
	dir             string
	keep            bool
	duration        time.Duration
	seed            int64
	workers         int
	heartbeat       time.Duration
	staleAfter      time.Duration
	reapInterval    time.Duration
	drainTimeout    time.Duration
	stopTimeout     time.Duration
	apiTimeout      time.Duration
	lockHold        time.Duration
	quiesce         time.Duration
	requestGap      time.Duration
	faultGap        time.Duration
	upstreamLatency time.Duration
	companies       int
	exposures       int
	only            string
	replication     string
	env             map[string]string
}

// envFlags collects repeated -env NAME=VALUE flags.
type envFlags map[string]string

func (e envFlags) String() string { return fmt.Sprint(map[string]string(e)) }

func (e envFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not NAME=VALUE", v)
	}
	e[k] = val
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{env: map[string]string{}}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "bin/radar", "the radar binary under test")
	fs.StringVar(&c.dir, "dir", "", "directory for the processes' logs (default: a new temporary directory)")
	fs.BoolVar(&c.keep, "keep", false, "keep the log directory even when every invariant held")
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long to make requests and inject faults")
	fs.Int64Var(&c.seed, "seed", 0, "random seed (0: pick one; the table prints it for a replay)")
	fs.IntVar(&c.workers, "workers", 3, "worker processes")
	fs.DurationVar(&c.heartbeat, "heartbeat", 500*time.Millisecond, "BUILDRISK_HEARTBEAT_INTERVAL of the fleet")
	fs.DurationVar(&c.staleAfter, "stale-after", 4*time.Second, "BUILDRISK_STALE_AFTER of the fleet")
	fs.DurationVar(&c.reapInterval, "reap-interval", time.Second, "BUILDRISK_REAP_INTERVAL of the fleet")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 5*time.Second, "BUILDRISK_DRAIN_TIMEOUT of the fleet")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 5*time.Second, "BUILDRISK_STOP_TIMEOUT of the fleet: how long a stopped run's calls in flight may take")
	fs.DurationVar(&c.apiTimeout, "api-timeout", 5*time.Second, "client timeout of every API call: a call without an answer by then is a breach")
	fs.DurationVar(&c.lockHold, "lock-hold", 8*time.Second, "how long the table-lock fault holds its lock (past the api's lock timeout)")
	fs.DurationVar(&c.quiesce, "quiesce", 3*time.Minute, "how long to wait for every request to finish after the load")
	fs.DurationVar(&c.requestGap, "request-gap", 400*time.Millisecond, "mean gap between the load's requests")
	fs.DurationVar(&c.faultGap, "fault-gap", 3*time.Second, "mean gap between faults")
	fs.DurationVar(&c.upstreamLatency, "upstream-latency", 10*time.Millisecond, "the fake upstream's baseline latency per call")
	fs.IntVar(&c.companies, "companies", 1000, "companies in the fake upstream's universe")
	fs.IntVar(&c.exposures, "exposures", 400, "companies with exposure (creditEval's targets)")
	fs.StringVar(&c.only, "faults", "", "comma list of faults to inject (default: every fault the binary supports)")
	fs.StringVar(&c.replication, "replication", replicationNone, "the database: none (one server), async or sync (a primary and a streaming standby, asynchronous or synchronous, which the failover fault promotes)")
	fs.Var(envFlags(c.env), "env", "NAME=VALUE added to every radar process's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.duration <= 0:
		return errors.New("-duration must be positive")
	case c.workers < 2:
		return errors.New("-workers must be at least 2: a reaper must outlive the worker it reaps")
	case c.staleAfter <= c.heartbeat:
		return errors.New("-stale-after must exceed -heartbeat")
	case c.companies < 10 || c.exposures < 1:
		return errors.New("-companies must be at least 10 and -exposures at least 1")
	case c.requestGap <= 0 || c.faultGap <= 0:
		return errors.New("-request-gap and -fault-gap must be positive")
	case c.stopTimeout <= 0:
		return errors.New("-stop-timeout must be positive")
	case !slices.Contains(replicationModes, c.replication):
		return fmt.Errorf("-replication must be one of %s, not %q", strings.Join(replicationModes, ", "), c.replication)
	}
	if c.seed == 0 {
		c.seed = rand.Int64N(1<<31) + 1
	}
	return nil
}

// fanOutDefault is radar's BUILDRISK_FANOUT default (batch.FanOutDefault).
const fanOutDefault = 5

// fanOut is the fleet's BUILDRISK_FANOUT: the one -env hands it, or radar's
// default.
func (c *config) fanOut() int {
	if n, err := strconv.Atoi(c.env["BUILDRISK_FANOUT"]); err == nil && n > 0 {
		return n
	}
	return fanOutDefault
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "soak:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := soak(ctx, cfg, stderr)
	if report != nil {
		report.print(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v (seed %d, logs in %s)\n", err, cfg.seed, cfg.dir)
		return 2
	}
	if report.breached() {
		fmt.Fprintf(stdout, "\nBREACHED. Replay: make soak SOAK_DURATION=%s SOAK_SEED=%d   (logs: %s)\n", cfg.duration, cfg.seed, cfg.dir)
		return 1
	}
	fmt.Fprintf(stdout, "\nevery invariant held (seed %d)\n", cfg.seed)
	if !cfg.keep {
		_ = os.RemoveAll(cfg.dir)
	}
	return 0
}

// soak runs one soak and returns its report.
func soak(ctx context.Context, cfg *config, stderr io.Writer) (*report, error) {
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the radar binary %s: %w (build it with `make build`)", cfg.bin, err)
	}
	cfg.bin = bin
	if cfg.dir == "" {
		if cfg.dir, err = os.MkdirTemp("", "buildrisk-soak-*"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ev := &Evidence{FakeTotal: -1, APITimeout: cfg.apiTimeout, StaleAfter: cfg.staleAfter, WorkerMetrics: map[string]Metrics{},
		FanOut: cfg.fanOut(), StopTimeout: cfg.stopTimeout, Replication: cfg.replication}
	s := &system{cfg: cfg, logger: logger, ev: ev}
	defer s.close()
	logger.Info("soak starting", "seed", cfg.seed, "duration", cfg.duration, "dir", cfg.dir)
	if err := s.start(ctx); err != nil {
		return nil, err
	}

	rep := &report{seed: cfg.seed, duration: cfg.duration, faultCounts: map[string]int{}}
	enabled := s.enabledFaults(rep)

	// Load and faults for the duration.
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	l := &load{s: s, rng: rand.New(rand.NewPCG(uint64(cfg.seed), 1))}
	if l.tracked, err = s.trackedCompanies(ctx); err != nil {
		return nil, err
	}
	// Two fault streams, each with its own random source: the fake
	// upstream's faults, and the processes' and the database's.
	var upstreamFaults, systemFaults []Fault
	for _, fault := range enabled {
		if fault.Upstream {
			upstreamFaults = append(upstreamFaults, fault)
		} else {
			systemFaults = append(systemFaults, fault)
		}
	}
	tally := &faultTally{counts: rep.faultCounts, errors: map[string]int{}}
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); l.run(runCtx) }()
	faultsDone := make(chan struct{}, 2)
	for i, list := range [][]Fault{systemFaults, upstreamFaults} {
		f := &faulter{s: s, rng: rand.New(rand.NewPCG(uint64(cfg.seed), uint64(2+i))), tally: tally, stream: i}
		go func() {
			defer func() { faultsDone <- struct{}{} }()
			if len(list) > 0 {
				f.run(runCtx, list)
			}
		}()
	}
	<-loadDone
	<-faultsDone
	<-faultsDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.requests = l.counts
	rep.faultErrors = tally.errors

	if err := s.recoverAndCollect(ctx, rep); err != nil {
		return nil, err
	}
	rep.figures = s.figures(ctx)
	for _, inv := range Invariants {
		breaches, err := inv.Check(ctx, s.db, ev)
		if err != nil {
			breaches = append(breaches, Breach{Text: "check failed: " + err.Error()})
		}
		rep.results = append(rep.results, result{inv: inv, breaches: breaches})
	}
	ev.mu.Lock()
	rep.events = slices.Clone(ev.Faults)
	ev.mu.Unlock()
	if rep.breached() {
		// The cluster goes with the run: what a breach needs to be
		// confirmed stays in the log directory.
		if err := s.dumpTables(ctx); err != nil {
			logger.Warn("error dumping the tables", "error", err)
		}
		if err := dumpCalls(filepath.Join(cfg.dir, "calls.csv"), ev.Calls); err != nil {
			logger.Warn("error dumping the provider calls", "error", err)
		}
	}
	return rep, nil
}

// recoverAndCollect puts everything back to normal (the database, the
// upstream, every dead worker), waits for quiescence, then gathers the
// processes' evidence: the fake upstream's call total and every live
// process's metrics.
func (s *system) recoverAndCollect(ctx context.Context, rep *report) error {
	ev, logger := s.ev, s.logger
	var err error
	// Everything back to normal, then quiescence.
	if err := s.primary().startServer(); err != nil {
		return err
	}
	if err := s.restoreUpstream(); err != nil {
		return err
	}
	for _, w := range s.workers {
		if w.proc.exitCode() != -1 {
			if err := s.startWorker(ctx, w); err != nil {
				return err
			}
		}
	}
	rep.quiesced, rep.quiesceTime = s.waitQuiescent(ctx)
	if !rep.quiesced {
		rep.stuck = s.stuckRows(ctx)
	}

	// Evidence from the processes, then the checks.
	if ev.FakeTotal, err = s.admin.total(); err != nil {
		ev.FakeTotal = -1
	}
	if ev.APIMetrics, err = scrape(s.http, s.apiURL+"/metrics"); err != nil {
		logger.Warn("api metrics", "error", err)
	}
	for _, w := range s.liveWorkers() {
		m, err := scrape(s.http, "http://"+w.adminAddr+"/metrics")
		if err != nil {
			logger.Warn("worker metrics", "worker", w.record.AppName, "error", err)
			continue
		}
		ev.WorkerMetrics[w.record.AppName] = m
	}
	return nil
}

// enabledFaults returns the faults to inject: every fault the binary and
// the fake support (or the -faults list); the others go into the report as
// not injected, with the reason.
func (s *system) enabledFaults(rep *report) []Fault {
	only := map[string]bool{}
	for _, name := range strings.Split(s.cfg.only, ",") {
		if name = strings.TrimSpace(name); name != "" {
			only[name] = true
		}
	}
	if err := s.admin.configure(map[string]any{shortPageField: 0}); err == nil {
		s.shortPages = true
	}
	var enabled []Fault
	for _, f := range faults {
		reason := f.NotInjected
		if f.Name == "upstream-short-page" && !s.shortPages {
			reason = "the fake upstream has no short-page mode yet (POST /__fake/config refuses " + shortPageField + ")"
		}
		if f.Name == "failover" && s.cfg.replication == replicationNone {
			reason = "needs a standby to promote (-replication async or sync)"
		}
		if f.Name == "disk-full" && s.disk == nil {
			reason = "no small disk could be mounted here: " + s.diskErr.Error()
		}
		if reason == "" && len(only) > 0 && !only[f.Name] {
			reason = "not selected (-faults)"
		}
		rep.faults = append(rep.faults, faultRow{fault: f, reason: reason})
		if reason == "" {
			enabled = append(enabled, f)
		}
	}
	return enabled
}

// trackedCompanies returns the tracked companies' corp codes.
func (s *system) trackedCompanies(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, "SELECT corp_code FROM company WHERE tracked ORDER BY corp_code")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// waitQuiescent waits until no request is QUEUED or RUNNING, no execution
// is running and no provider call is in flight, at most cfg.quiesce.
func (s *system) waitQuiescent(ctx context.Context) (bool, time.Duration) {
	began := time.Now()
	deadline := began.Add(s.cfg.quiesce)
	for {
		var active int
		err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_request WHERE status IN ('QUEUED', 'RUNNING'))
			+ (SELECT count(*) FROM job_execution WHERE status IN ('STARTING', 'STARTED', 'STOPPING'))`).Scan(&active)
		// A provider call still in flight belongs to a run that is still
		// working: quiet means the proxy is idle too.
		if err == nil && active == 0 && s.recorder.inflight.Load() == 0 {
			return true, time.Since(began)
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			return false, time.Since(began)
		}
	}
}

// dumpedTables are the tables a breached run leaves in its log directory
// (as CSV, one file each), to confirm a breach after the cluster is gone.
var dumpedTables = []string{"job_request", "job_execution", "job_checkpoint", "soak_audit", "provider_call_budget", "provider_call_lease"}

// dumpTables writes dumpedTables to the log directory.
func (s *system) dumpTables(ctx context.Context) error {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, table := range dumpedTables {
		f, err := os.Create(filepath.Join(s.cfg.dir, table+".csv"))
		if err != nil {
			return err
		}
		_, err = conn.Conn().PgConn().CopyTo(ctx, f, "COPY (SELECT * FROM "+table+" ORDER BY 1) TO STDOUT WITH (FORMAT csv, HEADER)")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("error dumping %s: %w", table, err)
		}
	}
	return nil
}

// dumpCalls writes the provider calls the proxy forwarded to path as CSV,
// in the order they were made: what a breach of repeats-bounded,
// cap-ledger or no-call-after-commit is confirmed from.
func dumpCalls(path string, calls []UpstreamCall) error {
	sorted := slices.Clone(calls)
	slices.SortStableFunc(sorted, func(a, b UpstreamCall) int { return a.At.Compare(b.At) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"at", "endpoint", "params", "status", "body_broken"})
	for _, c := range sorted {
		_ = w.Write([]string{c.At.Format(time.RFC3339Nano), c.Endpoint, sortedParams(c.Params), strconv.Itoa(c.Status), strconv.FormatBool(c.BodyBroken)})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("error writing %s: %w", path, err)
	}
	return nil
}

// stuckRows names what keeps the run from quiescing: every request not DONE
// or FAILED and every execution still running, with its id, job, status,
// owner and age, and the provider calls still in flight.
func (s *system) stuckRows(ctx context.Context) []string {
	var out []string
	rows, err := s.db.Query(ctx, `SELECT 'request', id, job, status, coalesce(worker_id, ''), now() - created_at, now() - coalesce(claimed_at, created_at)
			FROM job_request WHERE status NOT IN ('DONE', 'FAILED')
		UNION ALL
		SELECT 'execution', id, job, status, worker_id, now() - created_at, now() - last_updated
			FROM job_execution WHERE status IN ('STARTING', 'STARTED', 'STOPPING')
		ORDER BY 1 DESC, 2`)
	if err != nil {
		return []string{"could not list the rows still active: " + err.Error()}
	}
	var (
		kind, job, status, owner string
		id                       int64
		age, quiet               time.Duration
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &id, &job, &status, &owner, &age, &quiet}, func() error {
		// quiet is the time since the execution's last update (a request's
		// claim): how long it has given no sign of life.
		out = append(out, fmt.Sprintf("%s %d (%s) %s, owner %q, age %s, last touched %s ago", kind, id, job, status, owner, age.Round(time.Second), quiet.Round(time.Second)))
		return nil
	})
	if err != nil {
		out = append(out, "could not list the rows still active: "+err.Error())
	}
	if n := s.recorder.inflight.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d provider calls still in flight", n))
	}
	return out
}

// figures are measured numbers the report prints next to the invariants.
func (s *system) figures(ctx context.Context) []string {
	var out []string
	var requests, done, failed, execs, completed, abandoned int
	_ = s.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'DONE'), count(*) FILTER (WHERE status = 'FAILED') FROM job_request`).Scan(&requests, &done, &failed)
	_ = s.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'ABANDONED') FROM job_execution`).Scan(&execs, &completed, &abandoned)
	out = append(out, fmt.Sprintf("requests in the database: %d (DONE %d, FAILED %d); executions: %d (COMPLETED %d, ABANDONED %d)", requests, done, failed, execs, completed, abandoned))
	if rows, err := s.db.Query(ctx, `SELECT job, left(regexp_replace(message, '[0-9]+', 'N', 'g'), 140) AS m, count(*)
		FROM job_request WHERE status = 'FAILED' GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 10`); err == nil {
		var job, message string
		var n int
		_, _ = pgx.ForEachRow(rows, []any{&job, &message, &n}, func() error {
			out = append(out, fmt.Sprintf("FAILED %dx %s: %s", n, job, message))
			return nil
		})
	}
	s.ev.mu.Lock()
	calls := len(s.ev.Calls)
	ok := 0
	for _, c := range s.ev.Calls {
		if c.Status == 200 {
			ok++
		}
	}
	repeated := -1
	reps, err := paidRepeats(ctx, s.db, s.ev.Calls, s.ev.Faults)
	if err == nil {
		repeated = len(reps)
	}
	var answers, slow int
	var worst time.Duration
	for _, a := range s.ev.Answers {
		answers++
		worst = max(worst, a.Latency)
		if a.Latency > time.Second {
			slow++
		}
	}
	s.ev.mu.Unlock()
	out = append(out, fmt.Sprintf("provider calls: %d (%d answered 200); paid calls repeated within one instance: %d", calls, ok, repeated))
	if err == nil {
		out = append(out, repeatFigures(reps, s.ev.Faults, s.ev.repeatBound()))
	}
	out = append(out, lossFigures(ctx, s.db, s.ev)...)
	if s.disk != nil {
		out = append(out, "the tablespace's disk: "+s.disk.used())
	}
	out = append(out, fmt.Sprintf("api answers: %d, %d slower than 1 s, slowest %s", answers, slow, worst.Round(time.Millisecond)))
	return out
}
