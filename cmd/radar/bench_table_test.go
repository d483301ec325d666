package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// This file is `make bench` (BUILDRISK_BENCH=full) and `make bench-smoke`
// (BUILDRISK_BENCH=smoke, seconds long, run by CI so the table cannot rot).
// Every row is measured beside its reference in the same run, repeated, and
// printed as median (min–max); the full run also writes the table into
// BENCHMARKS.md between its markers.

// benchScale sizes one mode of the table.
type benchScale struct {
	mode         string
	reps         int
	creditN      int           // creditEval targets per fan-out run
	cpuN         int           // creditEval targets of the CPU-bound row (0 ms calls)
	latency      time.Duration // provider latency of the fan-out rows
	pickups      int           // pickup samples per repetition and mode (a p99 needs a few hundred)
	chunkRegions int           // aptTrade regions (× 12 months) per per-chunk run
	chunkReps    int           // repetitions of the per-chunk row (cheap, noisy: more than reps)
	jobsGets     int           // GET /v1/jobs per measurement
	jobsBig      int           // executions in history for the big /v1/jobs row
	importSmall  int
	importBig    int
	workerSmall  int // creditEval targets for worker memory
	workerBig    int
	scaleChunks  int // chunks per job in the scale-out row
}

func benchScaleFor(mode string) benchScale {
	if mode == "full" {
		return benchScale{mode: mode, reps: 3, creditN: 4000, cpuN: 10_000, latency: 20 * time.Millisecond, pickups: 200,
			chunkRegions: 20, chunkReps: 15, jobsGets: 300, jobsBig: 100_000, importSmall: 10_000, importBig: 200_000,
			workerSmall: 10_000, workerBig: 200_000, scaleChunks: 20}
	}
	return benchScale{mode: mode, reps: 1, creditN: 300, cpuN: 300, latency: 5 * time.Millisecond, pickups: 6,
		chunkRegions: 1, chunkReps: 1, jobsGets: 20, jobsBig: 5_000, importSmall: 1_000, importBig: 5_000,
		workerSmall: 300, workerBig: 1_000, scaleChunks: 4}
}

// benchRow is one line of the table: per repetition, the figure and its
// reference measured in the same run.
type benchRow struct {
	name      string
	unit      string
	figure    []float64
	refName   string
	reference []float64
	// ratio is figure/reference per repetition, unless given.
	ratio  []float64
	target string
}

func (r *benchRow) add(figure, reference float64) {
	r.figure = append(r.figure, figure)
	r.reference = append(r.reference, reference)
	if reference != 0 {
		r.ratio = append(r.ratio, figure/reference)
	}
}

func medianRange(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func fmtStat(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	med, lo, hi := medianRange(xs)
	if len(xs) == 1 {
		return fmtNum(med)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(med), fmtNum(lo), fmtNum(hi))
}

func renderBenchTable(rows []*benchRow) string {
	var b strings.Builder
	b.WriteString("| what | figure | reference, same run | ratio | target |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		ref := "—"
		if r.refName != "" {
			ref = r.refName + ": " + fmtStat(r.reference)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s |\n", r.name, fmtStat(r.figure), r.unit, ref, fmtStat(r.ratio), r.target)
	}
	return b.String()
}

// TestBenchTable is `make bench` and `make bench-smoke`.
func TestBenchTable(t *testing.T) {
	mode := os.Getenv("BUILDRISK_BENCH")
	if mode != "full" && mode != "smoke" {
		t.Skip("run by make bench (BUILDRISK_BENCH=full) and make bench-smoke (BUILDRISK_BENCH=smoke)")
	}
	only := os.Getenv("BUILDRISK_BENCH_ONLY") // comma list of row groups, for working on one
	want := func(group string) bool {
		return only == "" || slices.Contains(strings.Split(only, ","), group)
	}
	scale := benchScaleFor(mode)
	began := time.Now()
	var rows []*benchRow
	if want("fanout") {
		rows = append(rows, benchFanOut(t, scale)...)
	}
	if want("cpu") {
		rows = append(rows, benchCPUBound(t, scale)...)
	}
	if want("pickup") {
		rows = append(rows, benchPickup(t, scale)...)
	}
	if want("chunk") {
		rows = append(rows, benchChunk(t, scale)...)
	}
	if want("jobs") {
		rows = append(rows, benchJobList(t, scale))
	}
	if want("api") {
		rows = append(rows, benchAPI(t, scale)...)
	}
	var bin string
	if want("import") || want("memory") || want("drain") || want("stale") {
		bin = buildRadar(t)
	}
	if want("import") {
		rows = append(rows, benchImportMemory(t, scale, bin))
	}
	if want("memory") {
		rows = append(rows, benchWorkerMemory(t, scale, bin))
	}
	if want("drain") {
		rows = append(rows, benchDrain(t, scale, bin))
	}
	if want("stale") {
		rows = append(rows, benchStale(t, scale, bin))
	}
	if want("scale") {
		rows = append(rows, benchScaleOut(t, scale)...)
	}
	table := renderBenchTable(rows)
	header := benchHeader(t, scale, time.Since(began))
	fmt.Println(header + "\n\n" + table)
	if mode == "full" && only == "" {
		require.NoError(t, writeBenchmarks("../../BENCHMARKS.md", header+"\n\n"+table))
	}
}

// benchHeader states the date, the machine and the command.
func benchHeader(t *testing.T, scale benchScale, took time.Duration) string {
	cpu := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.1f GiB RAM", float64(kb)/(1<<20))
		}
	}
	load := ""
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average at the end " + strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	pg := "PostgreSQL"
	s := apptest.New(t, nil)
	var version string
	if err := s.Pool.QueryRow(context.Background(), "SHOW server_version").Scan(&version); err == nil {
		pg = "PostgreSQL " + version
	}
	command := "make bench"
	if scale.mode == "smoke" {
		command = "make bench-smoke"
	}
	return fmt.Sprintf("Run %s (%s mode, %d repetitions per row, %s): `%s`. Machine: %s, %d CPUs%s, %s/%s, %s, "+
		"%s in a private cluster (pglocal), the fake upstream over real HTTP in the test process%s.",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), scale.mode, scale.reps, took.Round(time.Second), command,
		cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), pg, load)
}

const benchBegin, benchEnd = "<!-- make bench: begin -->", "<!-- make bench: end -->"

// writeBenchmarks replaces the generated part of BENCHMARKS.md.
func writeBenchmarks(path, body string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(raw)
	i, j := strings.Index(s, benchBegin), strings.Index(s, benchEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s markers", path, benchBegin, benchEnd)
	}
	s = s[:i+len(benchBegin)] + "\n" + body + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// productionTelemetry replaces the test system's Telemetry (which keeps
// every span in memory for assertions) with what a process without OTLP
// configured runs: spans made and dropped, metrics in a registry.
func productionTelemetry(t *testing.T, s *apptest.System) {
	t.Helper()
	providers, err := observability.NewProviders(context.Background(), observability.Config{Role: "bench", ServiceVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = providers.Shutdown(context.Background()) })
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	s.Tel = &app.Telemetry{Providers: providers, Instruments: instruments, Logger: s.Tel.Logger}
}

// benchRunner is a runner on the system's database for requests run in the
// test process, as `radar run` does.
func benchRunner(t *testing.T, s *apptest.System, jobsByName map[string]batch.Job) (*batch.Runner, *request.Enqueuer) {
	t.Helper()
	// The runner works on a pool of the worker's size, as deployed (the
	// test system's own pool has pgxpool's default of 4 connections).
	pool, err := app.OpenPool(context.Background(), s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, app.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	up, err := app.NewUpstream(pool, s.Env, s.Tel, "bench")
	require.NoError(t, err)
	if jobsByName == nil {
		jobsByName = app.Registry(s.Env)
	}
	runner, err := batch.NewRunner(pool, batch.Config{
		WorkerID: "1@bench#b", Jobs: jobsByName, Upstream: up, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger, FanOut: s.Env.FanOut,
	})
	require.NoError(t, err)
	enqueuer, err := app.NewEnqueuer(s.Pool, nil, s.Env, s.Tel)
	require.NoError(t, err)
	return runner, enqueuer
}

func benchRun(t *testing.T, runner *batch.Runner, enqueuer *request.Enqueuer, job, params string) (*batch.Outcome, time.Duration) {
	t.Helper()
	res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: job, Params: json.RawMessage(params), Source: radartype.SourceCLI, WorkerID: "1@bench#b"})
	require.NoError(t, err)
	began := time.Now()
	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: res.Request.ID})
	took := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", out.Status, out.Message)
	return out, took
}

func seedTargets(t *testing.T, s *apptest.System, n int) []string {
	t.Helper()
	companies := s.Fake.Companies()
	require.GreaterOrEqual(t, len(companies), n)
	p := &queries.ExposureUpsertParams{}
	var codes []string
	for _, c := range companies[:n] {
		p.CorpCodes = append(p.CorpCodes, c.CorpCode)
		p.OutstandingKrws = append(p.OutstandingKrws, 1_000_000)
		codes = append(codes, c.CorpCode)
	}
	_, err := queries.New().ExposureUpsert(context.Background(), s.Pool, p)
	require.NoError(t, err)
	return codes
}

// benchFanOut: creditEval at FANOUT 5, 16 and 64 against the ideal C/L and
// against a plain Go fan-out (a semaphore of C goroutines) making the same
// calls to the same fake upstream over the same transport.
func benchFanOut(t *testing.T, scale benchScale) []*benchRow {
	var rows []*benchRow
	for _, c := range []int{5, 16, 64} {
		s := apptest.New(t, &apptest.Opts{
			Env:  map[string]string{"BUILDRISK_FANOUT": strconv.Itoa(c)},
			Fake: fakeupstream.Config{Latency: scale.latency, Companies: max(scale.creditN+1, fakeupstream.CompaniesDefault)},
		})
		productionTelemetry(t, s)
		codes := seedTargets(t, s, scale.creditN)
		runner, enqueuer := benchRunner(t, s, nil)
		ideal := float64(c) / scale.latency.Seconds()
		vsIdeal := &benchRow{name: fmt.Sprintf("creditEval %d targets, %s calls, FANOUT %d: calls/s ÷ C/L", scale.creditN, scale.latency, c),
			refName: "plain Go fan-out ÷ C/L", target: map[bool]string{true: "≥ 0.90", false: ""}[c < 64]}
		vsPlain := &benchRow{name: fmt.Sprintf("same, FANOUT %d: service ÷ plain Go fan-out", c), unit: "calls/s", refName: "plain Go fan-out", target: "≥ 0.95"}
		client := &http.Client{Transport: app.ProviderTransport(c), Timeout: time.Minute}
		for range scale.reps {
			before := s.Fake.Stats().Total
			_, took := benchRun(t, runner, enqueuer, jobs.CreditEval, `{}`)
			service := float64(s.Fake.Stats().Total-before) / took.Seconds()
			plain := plainFanOut(t, client, s.FakeURL, codes, c)
			vsIdeal.add(service/ideal, plain/ideal)
			vsPlain.add(service, plain)
		}
		client.CloseIdleConnections()
		rows = append(rows, vsIdeal, vsPlain)
	}
	return rows
}

// plainFanOut makes one credit lookup per code on c goroutines and returns
// calls per second.
func plainFanOut(t *testing.T, client *http.Client, base string, codes []string, c int) float64 {
	t.Helper()
	sem := make(chan struct{}, c)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	began := time.Now()
	for _, code := range codes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			q := upstream.CreditLookupQuery(code)
			q.Set(upstream.ProviderCREDIT.KeyParam(), "test-credit-key")
			resp, err := client.Get(base + upstream.EndpointCreditLookup.Path + "?" + q.Encode())
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	require.NoError(t, firstErr)
	return float64(len(codes)) / took.Seconds()
}

// benchPickup: created → claimed, idle (one request at a time, 200 ms
// apart) and back to back (requests 20 ms apart on different jobs), through
// the service (the API's insert-only client and enqueue path, a worker) and
// through raw River in its best configuration (FetchCooldown 1 ms on both
// clients), on the same database. Both sides run as deployed: the service's
// enqueue on an api pool with the api's cleanup-before-enqueue, its worker
// on a worker-sized pool with its heartbeat pool, production telemetry and
// the contract's heartbeat, stale and reap intervals; raw River's inserting
// and working clients on pools of the same sizes.
//
// What each clock includes (River v0.51.2's source, riverpgxv5 driver):
//   - River's created_at is the inserting client's time.Now(), taken by the
//     driver in JobInsertFastMany when the insert carries no time: after the
//     inserting transaction's BEGIN and River's insert middleware, just
//     before the INSERT is sent. Its attempted_at is now() of the fetch
//     (JobGetAvailable, one statement in its own transaction on the working
//     client's pool): the fetch's start on the server. So River's figure
//     is: the INSERT's round trip, the NOTIFY's (River's InsertTx sends
//     pg_notify in the inserting transaction, when its limiter allows: once
//     per FetchCooldown per queue), the COMMIT's, the notification's
//     delivery to the working client's listener, and its producer starting
//     the fetch (at most FetchCooldown after its previous fetch).
//   - The service's created_at is now() of the enqueue transaction: the
//     server's start of its BEGIN, which travels with the job's lock, its
//     state read and River's INSERT. Its claimed_at is now() of River's
//     fetch of its job: the fetch claims the request in the same statement
//     (a trigger on river_job), so it is the same instant as the job's
//     attempted_at. So the service's figure also counts the BEGIN batch's
//     execution and its answer, and the request row (sent with the COMMIT).
//   - The "run started" rows hold the moment the service's worker starts
//     the run (its execution's created_at: the start transaction, which
//     River's executor begins once it has handed the job to Work) against
//     the moment raw River's worker is handed its job (its Work called):
//     both after River's fetch has returned and its executor has run.
func benchPickup(t *testing.T, scale benchScale) []*benchRow {
	const lanes = 20
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_HEARTBEAT_INTERVAL": worker.HeartbeatIntervalDefault.String(),
		"BUILDRISK_STALE_AFTER":        worker.StaleAfterDefault.String(),
		"BUILDRISK_REAP_INTERVAL":      worker.ReapIntervalDefault.String(),
	}})
	productionTelemetry(t, s)
	ctx := context.Background()
	names := make([]string, lanes)
	registry := map[string]batch.Job{}
	var defs []jobs.Definition
	for i := range names {
		names[i] = fmt.Sprintf("pickup%d", i)
		registry[names[i]] = apptest.NoopJob{}
		defs = append(defs, &jobs.Spec[struct{}]{JobName: names[i], Desc: "benchmark no-op"})
	}
	openWorkerPool := func() *pgxpool.Pool {
		pool, err := app.OpenPool(ctx, s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, app.SessionLimits{})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	heartbeatPool, err := app.OpenHeartbeatPool(ctx, s.DBURL, app.HeartbeatPoolConns, s.Env.DBTimeout, false, app.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(heartbeatPool.Close)
	w, _ := s.StartWorkerWith(openWorkerPool(), func(wc *worker.Config, rc *batch.Config) {
		rc.Jobs = registry
		wc.HeartbeatPool = heartbeatPool
	})
	insertOnly, err := app.NewInsertOnlyRiver(s.APIPool, s.Tel)
	require.NoError(t, err)
	enqueuer, err := app.NewEnqueuerFor(jobs.NewCatalog(defs...), s.APIPool, insertOnly, insertOnly, s.Env, s.Tel)
	require.NoError(t, err)
	serviceEvents, cancelService := w.River().Subscribe(river.EventKindJobCompleted)
	defer cancelService()
	serviceDone := apptest.NewCompletions(serviceEvents)

	workers := river.NewWorkers()
	// rawStarted records, for each job, created → raw River's worker being
	// handed it: the moment that compares with the service's run start,
	// which its worker begins once River has handed it the job.
	rawStarted := &stampWorker{latency: map[int64]time.Duration{}}
	river.AddWorker(workers, river.Worker[apptest.RawNoopArgs](rawStarted))
	raw, err := river.NewClient(riverpgxv5.New(openWorkerPool()), &river.Config{
		Queues: map[string]river.QueueConfig{"bench": {MaxWorkers: 10}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: worker.FetchPollIntervalDefault,
	})
	require.NoError(t, err)
	require.NoError(t, raw.Start(ctx))
	defer func() { _ = raw.Stop(ctx) }()
	rawInsertPool, err := app.OpenAPIPool(ctx, s.Env, s.DBURL)
	require.NoError(t, err)
	t.Cleanup(rawInsertPool.Close)
	rawInsert, err := river.NewClient(riverpgxv5.New(rawInsertPool), &river.Config{FetchCooldown: river.FetchCooldownMin})
	require.NoError(t, err)
	rawEvents, cancelRaw := raw.Subscribe(river.EventKindJobCompleted)
	defer cancelRaw()
	rawLatency := map[int64]time.Duration{}
	rawAttempted := map[int64]time.Time{}
	var rawMu sync.Mutex
	rawDone := apptest.NewCompletions(teeEvents(rawEvents, func(e *river.Event) {
		if e.Job.AttemptedAt != nil {
			rawMu.Lock()
			rawLatency[e.Job.ID] = e.Job.AttemptedAt.Sub(e.Job.CreatedAt)
			rawAttempted[e.Job.ID] = *e.Job.AttemptedAt
			rawMu.Unlock()
		}
	}))

	// serviceLatency returns each request's created → claimed, from calls
	// (the client's clock when Enqueue was called) call → claimed, and
	// created → run started (its execution created).
	serviceLatency := func(ids []int64, calls map[int64]time.Time) (out, fromCall, toStart []float64) {
		for _, id := range ids {
			var created, claimed, riverCreated, attempted, started time.Time
			require.NoError(t, s.Pool.QueryRow(ctx, `SELECT r.created_at, r.claimed_at, j.created_at, j.attempted_at, e.created_at
				FROM job_request r JOIN river_job j ON j.id = r.river_job_id JOIN job_execution e ON e.id = r.execution_id
				WHERE r.id = $1`, id).Scan(&created, &claimed, &riverCreated, &attempted, &started))
			if os.Getenv("BUILDRISK_BENCH_DEBUG") != "" {
				t.Logf("request %d: river insert +%s, fetched +%s, claimed +%s, run started +%s", id, riverCreated.Sub(created), attempted.Sub(created), claimed.Sub(created), started.Sub(created))
			}
			out = append(out, float64(claimed.Sub(created).Microseconds())/1000)
			fromCall = append(fromCall, float64(claimed.Sub(calls[id]).Microseconds())/1000)
			toStart = append(toStart, float64(started.Sub(created).Microseconds())/1000)
		}
		return out, fromCall, toStart
	}
	// A sample holds created → claimed (each side's own clocks), call →
	// claimed (the same clock for both: the client's just before it calls
	// Enqueue or Insert, so both include their BEGIN) and created → run
	// started (raw River: its Work called).
	type sample struct{ service, raw, serviceCall, rawCall, serviceStarted, rawStarted []float64 }
	// measure interleaves the two sides (a service request, gap/2, a raw
	// River job, gap/2, ...), so that both meet the same load on a shared
	// machine; each side sees one insert per gap. A lane (a job) takes its
	// next request only once its previous one has ended: the service allows
	// one active request per job, and a slow moment must not turn into a 409.
	measure := func(gap time.Duration, waitEach bool) sample {
		// The two sides take turns on one ticker of half a gap: the
		// arrivals keep their spacing whatever an insert takes.
		turn := time.NewTicker(gap / 2)
		defer turn.Stop()
		var serviceIDs, riverIDs, waitService, waitRaw []int64
		serviceCalls, rawCalls := map[int64]time.Time{}, map[int64]time.Time{}
		laneLast := map[int]int64{}
		for i := range scale.pickups {
			lane := i % lanes
			if prev, ok := laneLast[lane]; ok {
				serviceDone.Wait(prev)
			}
			called := time.Now()
			res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: names[lane], Source: radartype.SourceAPI})
			require.NoError(t, err)
			serviceCalls[res.Request.ID] = called
			serviceIDs = append(serviceIDs, res.Request.ID)
			waitService = append(waitService, *res.Request.RiverJobID)
			laneLast[lane] = *res.Request.RiverJobID
			if waitEach {
				serviceDone.Wait(*res.Request.RiverJobID)
			}
			<-turn.C
			called = time.Now()
			inserted, err := rawInsert.Insert(ctx, apptest.RawNoopArgs{}, &river.InsertOpts{Queue: "bench"})
			require.NoError(t, err)
			rawCalls[inserted.Job.ID] = called
			riverIDs = append(riverIDs, inserted.Job.ID)
			waitRaw = append(waitRaw, inserted.Job.ID)
			if waitEach {
				rawDone.Wait(inserted.Job.ID)
			}
			<-turn.C
		}
		for _, id := range waitService {
			serviceDone.Wait(id)
		}
		for _, id := range waitRaw {
			rawDone.Wait(id)
		}
		var rawMs, rawCallMs, rawStartedMs []float64
		rawMu.Lock()
		for _, id := range riverIDs {
			rawMs = append(rawMs, float64(rawLatency[id].Microseconds())/1000)
			rawCallMs = append(rawCallMs, float64(rawAttempted[id].Sub(rawCalls[id]).Microseconds())/1000)
			rawStartedMs = append(rawStartedMs, float64(rawStarted.latencyOf(id).Microseconds())/1000)
		}
		rawMu.Unlock()
		service, serviceCall, serviceStarted := serviceLatency(serviceIDs, serviceCalls)
		return sample{service: service, raw: rawMs, serviceCall: serviceCall, rawCall: rawCallMs, serviceStarted: serviceStarted, rawStarted: rawStartedMs}
	}
	pct := func(xs []float64, p float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		i := int(float64(len(s)-1) * p)
		return s[i]
	}
	var rows []*benchRow
	for _, mode := range []struct {
		name     string
		gap      time.Duration
		waitEach bool
	}{{"idle (one at a time, 200 ms apart)", 200 * time.Millisecond, true}, {"back to back (20 ms apart)", 20 * time.Millisecond, false}} {
		p50 := &benchRow{name: "pickup created → claimed p50, " + mode.name, unit: "ms", refName: "raw River (FetchCooldown 1 ms)"}
		p99 := &benchRow{name: "pickup created → claimed p99, " + mode.name, unit: "ms", refName: "raw River (FetchCooldown 1 ms)", target: "figure ≤ 25 ms"}
		callP50 := &benchRow{name: "same, call → claimed p50 (one clock for both), " + mode.name, unit: "ms", refName: "raw River, call → fetched"}
		callP99 := &benchRow{name: "same, call → claimed p99 (one clock for both), " + mode.name, unit: "ms", refName: "raw River, call → fetched"}
		startedP50 := &benchRow{name: "same, created → run started p50 (its execution created), " + mode.name, unit: "ms", refName: "raw River, created → its Work called"}
		startedP99 := &benchRow{name: "same, created → run started p99 (its execution created), " + mode.name, unit: "ms", refName: "raw River, created → its Work called"}
		for range scale.reps {
			smp := measure(mode.gap, mode.waitEach)
			p50.add(pct(smp.service, 0.5), pct(smp.raw, 0.5))
			p99.add(pct(smp.service, 0.99), pct(smp.raw, 0.99))
			callP50.add(pct(smp.serviceCall, 0.5), pct(smp.rawCall, 0.5))
			callP99.add(pct(smp.serviceCall, 0.99), pct(smp.rawCall, 0.99))
			startedP50.add(pct(smp.serviceStarted, 0.5), pct(smp.rawStarted, 0.5))
			startedP99.add(pct(smp.serviceStarted, 0.99), pct(smp.rawStarted, 0.99))
		}
		rows = append(rows, p50, p99, callP50, callP99, startedP50, startedP99)
	}
	return rows
}

// stampWorker is raw River's no-op worker that records, for each job, how
// long after its created_at (the inserting client's clock, the same as the
// worker's) it was handed the job.
type stampWorker struct {
	river.WorkerDefaults[apptest.RawNoopArgs]
	mu      sync.Mutex
	latency map[int64]time.Duration
}

func (w *stampWorker) Work(_ context.Context, job *river.Job[apptest.RawNoopArgs]) error {
	latency := time.Since(job.CreatedAt)
	w.mu.Lock()
	w.latency[job.ID] = latency
	w.mu.Unlock()
	return nil
}

// latencyOf returns created → Work called of job id.
func (w *stampWorker) latencyOf(id int64) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latency[id]
}

// teeEvents calls fn on every event and passes it on.
func teeEvents(in <-chan *river.Event, fn func(*river.Event)) <-chan *river.Event {
	out := make(chan *river.Event, 1000)
	go func() {
		defer close(out)
		for e := range in {
			fn(e)
			out <- e
		}
	}()
	return out
}

// benchChunk: an aptTrade chunk (one region × month, 0 ms provider) through
// the runner against the bare work: GET + parse + the same upsert
// transaction. Both sides are warmed up once first (connections, prepared
// statements), the repetitions alternate which side goes first, and each
// side is timed in its steady state: from the end of its first chunk to the
// end of its last, over the chunks in between. What a run costs beyond its
// chunks (claim, plan, accounting, outcome) is a row of its own. A second
// reference sends the bare upsert in one round trip, as the service sends
// its chunk commit: against it, the ratio is the bookkeeping's own cost.
func benchChunk(t *testing.T, scale benchScale) []*benchRow {
	s := apptest.New(t, nil)
	productionTelemetry(t, s)
	runner, enqueuer := benchRunner(t, s, nil)
	regions := apptest.SixRegions
	for len(regions) < scale.chunkRegions {
		regions = append(regions, fmt.Sprintf("4%04d", len(regions)))
	}
	regions = regions[:scale.chunkRegions]
	months := []string{}
	for m := 1; m <= 12; m++ {
		months = append(months, fmt.Sprintf("2025%02d", m))
	}
	chunks := len(regions) * len(months)
	row := &benchRow{name: fmt.Sprintf("aptTrade chunk, 0 ms provider (%d chunks, steady state)", chunks), unit: "ms", refName: "GET + parse + the same upsert transaction", target: "≤ 1.2"}
	// The service sends a chunk's commit in one round trip; this row holds
	// it against bare work sent the same way, so what it shows is the
	// bookkeeping's own cost, not the round trips pipelining saves.
	pipelinedRow := &benchRow{name: "same, against the bare work with its upsert pipelined (one round trip)", unit: "ms", refName: "GET + parse + the upsert as one implicit transaction"}
	fixed := &benchRow{name: fmt.Sprintf("aptTrade run of %d chunks: time beyond its chunks (claim, plan, accounting, outcome)", chunks), unit: "ms"}
	client := &http.Client{Transport: app.ProviderTransport(1)}
	params, err := json.Marshal(map[string]any{"regions": regions, "from": "2025-01", "to": "2025-12"})
	require.NoError(t, err)

	// service runs the job through the runner: per chunk in the steady
	// state, and the rest of the run.
	service := func() (perChunk, rest float64) {
		res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: jobs.AptTrade, Params: params, Source: radartype.SourceCLI, WorkerID: "1@bench#b"})
		require.NoError(t, err)
		var first, last time.Time
		began := time.Now()
		out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: res.Request.ID, OnChunk: func(done, _ int) {
			if done == 1 {
				first = time.Now()
			}
			last = time.Now()
		}})
		took := time.Since(began)
		require.NoError(t, err)
		require.Equal(t, "COMPLETED", out.Status, out.Message)
		perChunk = float64(last.Sub(first).Microseconds()) / 1000 / float64(chunks-1)
		return perChunk, float64(took.Microseconds())/1000 - perChunk*float64(chunks)
	}
	// bare does each chunk's work by hand, timed like service: GET, parse
	// and the upsert in a transaction of its own, sent as a plain
	// implementation sends it (BEGIN, the upsert, COMMIT: three round trips)
	// or, pipelined, as the service now sends a chunk's commit (the upsert
	// alone in one implicit transaction: one round trip).
	// Each bare run stamps its rows with a run id of its own, as each
	// service run stamps them with its new execution's: the rows exist from
	// the warm-up on, so every upsert updates them, and with the same id
	// every time PostgreSQL could update them in place (a HOT update, no
	// index entries) while the service's never can (execution_id is
	// indexed).
	bareRun := int64(0)
	bare := func(pipelined bool) float64 {
		bareRun--
		var first time.Time
		for i, region := range regions {
			for j, month := range months {
				q := upstream.AptTradeQuery(region, month, 1, 1000)
				q.Set(upstream.ProviderMOLIT.KeyParam(), "test-molit-key")
				resp, err := client.Get(s.FakeURL + upstream.EndpointAptTrade.Path + "?" + q.Encode())
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				trades, _, err := upstream.ParseAptTrades(region, month, body)
				require.NoError(t, err)
				p := apttrade.UpsertParams(bareRun, trades)
				if pipelined {
					require.NoError(t, pgtx.InImplicitTx(context.Background(), s.Pool, func(b *pgx.Batch) {
						queries.Queue(b, func(db queries.DBTX) { _, _ = queries.New().AptTradeUpsert(context.Background(), db, p) })
					}))
				} else {
					require.NoError(t, pgtx.InTx(context.Background(), s.Pool, func(tx pgx.Tx) error {
						_, err := queries.New().AptTradeUpsert(context.Background(), tx, p)
						return err
					}))
				}
				if i == 0 && j == 0 {
					first = time.Now()
				}
			}
		}
		return float64(time.Since(first).Microseconds()) / 1000 / float64(chunks-1)
	}

	service() // warm-up: connections, prepared statements, the rows exist
	bare(false)
	bare(true)
	for rep := range scale.chunkReps {
		var svc, rest, ref, refPipelined float64
		if rep%2 == 0 {
			svc, rest = service()
			ref = bare(false)
			refPipelined = bare(true)
		} else {
			refPipelined = bare(true)
			ref = bare(false)
			svc, rest = service()
		}
		row.add(svc, ref)
		pipelinedRow.add(svc, refPipelined)
		fixed.figure = append(fixed.figure, rest)
	}
	client.CloseIdleConnections()
	return []*benchRow{row, pipelinedRow, fixed}
}

// seedHistory adds n finished executions (with their requests and
// instances) spread over the catalog's jobs.
func seedHistory(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`
WITH jobs AS (SELECT ARRAY['aptTrade','corpCodeSync','creditEval','filingParse','metrics','rules','stockPrice'] AS names),
req AS (
  INSERT INTO job_request (job, source, status, created_at, claimed_at, finished_at)
  SELECT (SELECT names FROM jobs)[1 + g %% 7], 'api', 'DONE', now(), now(), now() FROM generate_series(1, %[1]d) g
  RETURNING id, job
), inst AS (
  INSERT INTO job_instance (job, params, params_hash)
  SELECT job, '{}', id::text FROM req
  RETURNING id, job, params_hash
)
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
SELECT i.id, i.job, i.params_hash::bigint, 'COMPLETED', 'seed', now(), now() FROM inst i;
ANALYZE;`, n))
	require.NoError(t, err)
}

// benchJobList: GET /v1/jobs with ~100k executions in history against the
// same with ~1k.
func benchJobList(t *testing.T, scale benchScale) *benchRow {
	s := apptest.New(t, nil)
	rate := func() float64 {
		began := time.Now()
		for range scale.jobsGets {
			status, _ := s.Get("/v1/jobs")
			require.Equal(t, http.StatusOK, status)
		}
		return float64(scale.jobsGets) / time.Since(began).Seconds()
	}
	seedHistory(t, s.Pool, 1000)
	var small []float64
	for range scale.reps {
		small = append(small, rate())
	}
	seedHistory(t, s.Pool, scale.jobsBig-1000)
	row := &benchRow{name: fmt.Sprintf("GET /v1/jobs with %d executions in history", scale.jobsBig), unit: "req/s", refName: "same with 1,000", target: "≥ 0.5"}
	for i := range scale.reps {
		row.add(rate(), small[i])
	}
	return row
}

// maxRSS runs bin and returns its peak resident set in MB: the process's
// own high-water mark (VmHWM), read every few milliseconds until it exits.
// getrusage's maxrss is no use here: Linux carries the forking test
// process's resident set over into the child's across exec.
func maxRSS(t *testing.T, bin string, env map[string]string, args ...string) float64 {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peakKB int64
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		if raw, err := os.ReadFile(status); err == nil {
			for line := range strings.Lines(string(raw)) {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var kb int64
					if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil && kb > peakKB {
						peakKB = kb
					}
				}
			}
		}
		select {
		case err := <-done:
			require.NoError(t, err, "%s", out.String())
			return float64(peakKB) / 1024
		case <-ticker.C:
		}
	}
}

// benchImportMemory: peak RSS of `radar import exposure` at two file sizes.
func benchImportMemory(t *testing.T, scale benchScale, bin string) *benchRow {
	s := apptest.New(t, nil)
	write := func(n int) string {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("exposure-%d.csv", n))
		f, err := os.Create(path)
		require.NoError(t, err)
		w := bufio.NewWriter(f)
		fmt.Fprintln(w, "corp_code,outstanding_krw")
		for i := range n {
			fmt.Fprintf(w, "%08d,%d\n", 10_000_000+i, 1_000_000+i)
		}
		require.NoError(t, w.Flush())
		require.NoError(t, f.Close())
		return path
	}
	small, big := write(scale.importSmall), write(scale.importBig)
	env := s.ProcessEnv(nil)
	row := &benchRow{name: fmt.Sprintf("`radar import exposure` peak RSS, %d lines", scale.importBig), unit: "MB",
		refName: fmt.Sprintf("%d lines", scale.importSmall), target: "≤ 1.3"}
	for range scale.reps {
		row.add(maxRSS(t, bin, env, "import", "exposure", big), maxRSS(t, bin, env, "import", "exposure", small))
	}
	return row
}

// benchWorkerMemory: peak RSS of a creditEval run (`radar run`, the
// worker's runner in a process) at two target counts, FANOUT 64, 0 ms calls.
func benchWorkerMemory(t *testing.T, scale benchScale, bin string) *benchRow {
	peak := func(n int) float64 {
		s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: max(n+1, fakeupstream.CompaniesDefault)}})
		seedTargets(t, s, n)
		return maxRSS(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_FANOUT": "64", "BUILDRISK_DAILY_CAP_CREDIT": "1000000"}), "run", jobs.CreditEval)
	}
	row := &benchRow{name: fmt.Sprintf("worker peak RSS, creditEval %d targets (radar run, FANOUT 64)", scale.workerBig), unit: "MB",
		refName: fmt.Sprintf("%d targets", scale.workerSmall), target: "≤ 1.3"}
	for range scale.reps {
		row.add(peak(scale.workerBig), peak(scale.workerSmall))
	}
	return row
}

// benchDrain: SIGTERM to a worker process in the middle of a 1 s chunk;
// the figure is how long after that chunk's call answered the process
// exited.
func benchDrain(t *testing.T, scale benchScale, bin string) *benchRow {
	row := &benchRow{name: "drain: SIGTERM → exit, beyond the chunk in flight (1 s chunks)", unit: "ms", target: "small"}
	for range scale.reps {
		s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: time.Second}})
		w := startRadar(t, bin, s.ProcessEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
		s.Gate.Arm(0)
		s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03"))
		<-s.Gate.Blocked // the first chunk's call is at the provider
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		opened := time.Now()
		s.Gate.Open() // the provider answers one latency (1 s) after the gate opens
		require.Equal(t, 0, w.Wait(t, time.Minute))
		exited := time.Now()
		row.figure = append(row.figure, float64(exited.Sub(opened.Add(time.Second)).Microseconds())/1000)
	}
	return row
}

// benchStale: kill -9 of a worker process holding a request; the figure is
// how long until its request is FAILED by a live worker's reaper, against
// the configured window (STALE_AFTER + REAP_INTERVAL).
func benchStale(t *testing.T, scale benchScale, bin string) *benchRow {
	row := &benchRow{name: "stale detection: kill -9 → request FAILED", unit: "s", refName: "STALE_AFTER 2 s + REAP_INTERVAL 0.5 s", target: "≤ 1"}
	for range scale.reps {
		s := apptest.New(t, nil)
		w := startRadar(t, bin, s.ProcessEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
		s.Gate.Arm(0)
		id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03"))
		<-s.Gate.Blocked
		s.StartWorker() // the survivor that reaps
		require.NoError(t, w.cmd.Process.Kill())
		killed := time.Now()
		s.WaitRequest(id, "FAILED")
		s.Gate.Open()
		row.add(time.Since(killed).Seconds(), (s.Env.StaleAfter + s.Env.ReapInterval).Seconds())
	}
	return row
}

// sleepJob is chunks of simulated provider time: what scale-out spreads.
type sleepJob struct {
	chunks int
	each   time.Duration
}

func (j sleepJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	chunks := make([]string, j.chunks)
	for i := range chunks {
		chunks[i] = strconv.Itoa(i)
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

func (j sleepJob) Process(ctx context.Context, _ *batch.Run, _ string) (*batch.ChunkResult, error) {
	select {
	case <-time.After(j.each):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// benchScaleOut: four different jobs requested at once, run by 1, 2 and 4
// workers of one job slot each; the reference is the single worker's time
// divided by the number of workers (perfect scaling).
func benchScaleOut(t *testing.T, scale benchScale) []*benchRow {
	const jobCount = 4
	names := make([]string, jobCount)
	registry := map[string]batch.Job{}
	var defs []jobs.Definition
	for i := range names {
		names[i] = fmt.Sprintf("scale%d", i)
		registry[names[i]] = sleepJob{chunks: scale.scaleChunks, each: 25 * time.Millisecond}
		defs = append(defs, &jobs.Spec[struct{}]{JobName: names[i], Desc: "benchmark sleep"})
	}
	runAll := func(workerCount int) time.Duration {
		s := apptest.New(t, nil)
		var ws []*worker.Worker
		for range workerCount {
			w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) {
				rc.Jobs = registry
				wc.MaxConcurrentJobs = 1
			})
			ws = append(ws, w)
		}
		insertOnly, err := app.NewInsertOnlyRiver(s.Pool, s.Tel)
		require.NoError(t, err)
		enqueuer, err := request.NewEnqueuer(s.Pool, insertOnly, request.Config{Catalog: jobs.NewCatalog(defs...), Instruments: s.Tel.Instruments})
		require.NoError(t, err)
		began := time.Now()
		var ids []string
		for _, name := range names {
			res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: name, Source: radartype.SourceAPI})
			require.NoError(t, err)
			ids = append(ids, formatRequestID(res.Request.ID))
		}
		for _, id := range ids {
			s.WaitRequest(id, "DONE")
		}
		took := time.Since(began)
		for _, w := range ws {
			require.NoError(t, w.Drain(context.Background()))
		}
		return took
	}
	var rows []*benchRow
	one := make([]float64, scale.reps)
	for i := range scale.reps {
		one[i] = runAll(1).Seconds()
	}
	for _, n := range []int{1, 2, 4} {
		row := &benchRow{name: fmt.Sprintf("scale-out: %d jobs × %d chunks of 25 ms, %d worker(s) of one slot", jobCount, scale.scaleChunks, n),
			unit: "s", refName: "1 worker's time ÷ workers", target: "≈ 1"}
		for i := range scale.reps {
			took := one[i]
			if n > 1 {
				took = runAll(n).Seconds()
			}
			row.add(took, one[i]/float64(n))
		}
		rows = append(rows, row)
	}
	return rows
}

func formatRequestID(id int64) string { return strconv.FormatInt(id, 10) }

// benchAPIRate returns how many calls of do per second conc clients make
// together, n calls in all.
func benchAPIRate(t *testing.T, n, conc int, do func(client *http.Client) int, want int) float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	var next, bad atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if do(client) != want {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	require.Zero(t, bad.Load(), "every call answered %d", want)
	return float64(n) / took.Seconds()
}

// benchAPICall sends one call to the api and returns its status, the body
// read and dropped.
func benchAPICall(t *testing.T, client *http.Client, method, url, token, body string) int {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// benchAPI: cheap api calls beside GET /healthz (the api's floor: routing,
// one handler, no database), each measured by 8 concurrent clients on
// kept-alive connections in the same repetition: POST of a duplicate
// request (409) while the job's request is active, and GET
// /v1/requests/{id} of a finished request with jobsBig executions in
// history.
func benchAPI(t *testing.T, scale benchScale) []*benchRow {
	s := apptest.New(t, nil)
	const conc = 8
	n := scale.jobsGets * 5
	status, out := s.Post("/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	healthz := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodGet, s.API.URL+"/healthz", "", "")
	}
	duplicate := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodPost, s.API.URL+"/v1/jobs/aptTrade/requests", apptest.OperatorToken,
			`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
	}
	// A finished request with an execution, its instance holding chunks,
	// among jobsBig executions of history.
	seedHistory(t, s.Pool, scale.jobsBig)
	var requestID int64
	require.NoError(t, s.Pool.QueryRow(context.Background(), `
		WITH e AS (SELECT id, instance_id, request_id FROM job_execution ORDER BY id DESC LIMIT 1),
		     c AS (INSERT INTO job_checkpoint (instance_id, chunk, execution_id, targets, written)
		           SELECT e.instance_id, 'c' || g, e.id, 10, 10 FROM e, generate_series(1, 40) g)
		UPDATE job_request r SET execution_id = e.id FROM e WHERE r.id = e.request_id RETURNING r.id`).Scan(&requestID))
	getRequest := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodGet, s.API.URL+"/v1/requests/"+formatRequestID(requestID), apptest.ViewerToken, "")
	}
	dup := &benchRow{name: "POST of a duplicate request (409), 8 clients", unit: "req/s", refName: "GET /healthz", target: "—"}
	get := &benchRow{name: fmt.Sprintf("GET /v1/requests/{id} with %d executions in history, 8 clients", scale.jobsBig),
		unit: "req/s", refName: "GET /healthz", target: "≥ 0.25"}
	for range scale.reps {
		ref := benchAPIRate(t, n, conc, healthz, http.StatusOK)
		dup.add(benchAPIRate(t, n, conc, duplicate, http.StatusConflict), ref)
		get.add(benchAPIRate(t, n, conc, getRequest, http.StatusOK), ref)
	}
	return []*benchRow{dup, get}
}

// cpuTicksPerSecond is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times (100 on every architecture Go builds for Linux).
const cpuTicksPerSecond = 100

// processCPU returns the test process's CPU time (user + system) so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat returns a process's parent pid and its CPU ticks: its own user +
// system, and with children its waited-for children's too.
func procStat(pid int, children bool) (ppid int, ticks int64, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command is in parentheses and may hold spaces: fields start after
	// the last ')'. Field 4 is the ppid, 14-17 utime stime cutime cstime.
	rest := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(rest) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(rest[1])
	n := 2
	if children {
		n = 4
	}
	for _, f := range rest[11 : 11+n] {
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	return ppid, ticks, true
}

// postgresCPU returns the CPU time of the whole PostgreSQL cluster behind
// pool: the postmaster with the children it has reaped (ended backends)
// and every live child (backends, walwriter, checkpointer...). The cluster
// is the test package's own (sql/pgtest), so nothing else runs on it.
func postgresCPU(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	var backend int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend))
	postmaster, _, ok := procStat(backend, false)
	require.True(t, ok, "read /proc/%d/stat", backend)
	_, ticks, ok := procStat(postmaster, true)
	require.True(t, ok, "read /proc/%d/stat", postmaster)
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, own, ok := procStat(pid, false); ok && ppid == postmaster {
			ticks += own
		}
	}
	return time.Duration(ticks) * time.Second / cpuTicksPerSecond
}

// cpuSample is the CPU both sides of the CPU-bound row spend.
type cpuSample struct{ process, postgres time.Duration }

func sampleCPU(t *testing.T, pool *pgxpool.Pool) cpuSample {
	return cpuSample{process: processCPU(t), postgres: postgresCPU(t, pool)}
}

// plainCreditLoop is the CPU-bound row's reference: 64 goroutines making
// creditEval's calls (the lookup, the fallback when it has no grade),
// parsing them as the job does, and upserting the grades 1,000 at a time
// with the job's statement, as a plain Go program would. It returns items
// per second.
func plainCreditLoop(t *testing.T, client *http.Client, pool *pgxpool.Pool, base string, codes []string, day time.Time, executionID int64) float64 {
	t.Helper()
	const goroutines, batchSize = 64, 1000
	ctx := context.Background()
	get := func(ep upstream.Endpoint, q url.Values, code string) (upstream.CreditGrade, error) {
		q.Set(upstream.ProviderCREDIT.KeyParam(), "test-credit-key")
		q.Set("date", day.Format("20060102"))
		resp, err := client.Get(base + ep.Path + "?" + q.Encode())
		if err != nil {
			return upstream.CreditGrade{}, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return upstream.CreditGrade{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return upstream.CreditGrade{}, fmt.Errorf("%s %s: status %d", ep.Path, code, resp.StatusCode)
		}
		return upstream.ParseCreditGrade(body)
	}
	var mu sync.Mutex
	var firstErr error
	pending := &queries.CreditGradeUpsertParams{EvalDate: day, ExecutionID: executionID}
	flush := func(p *queries.CreditGradeUpsertParams) {
		if len(p.CorpCodes) == 0 {
			return
		}
		if _, err := queries.New().CreditGradeUpsert(ctx, pool, p); err != nil {
			mu.Lock()
			firstErr = err
			mu.Unlock()
		}
	}
	work := make(chan string)
	var wg sync.WaitGroup
	began := time.Now()
	for range goroutines {
		wg.Go(func() {
			for code := range work {
				g, err := get(upstream.EndpointCreditLookup, upstream.CreditLookupQuery(code), code)
				source := "lookup"
				if err == nil && g.Grade == "" {
					g, err = get(upstream.EndpointCreditFallback, upstream.CreditFallbackQuery(code), code)
					source = "fallback"
				}
				mu.Lock()
				if err != nil {
					firstErr = err
					mu.Unlock()
					continue
				}
				pending.CorpCodes = append(pending.CorpCodes, code)
				pending.Grades = append(pending.Grades, g.Grade)
				pending.Outlooks = append(pending.Outlooks, g.Outlook)
				pending.Sources = append(pending.Sources, source)
				var full *queries.CreditGradeUpsertParams
				if len(pending.CorpCodes) == batchSize {
					full, pending = pending, &queries.CreditGradeUpsertParams{EvalDate: day, ExecutionID: executionID}
				}
				mu.Unlock()
				if full != nil {
					flush(full)
				}
			}
		})
	}
	for _, code := range codes {
		work <- code
	}
	close(work)
	wg.Wait()
	flush(pending)
	took := time.Since(began)
	require.NoError(t, firstErr)
	return float64(len(codes)) / took.Seconds()
}

// benchCPUBound: creditEval with 0 ms calls at FANOUT 64, where the
// service's own CPU is what limits it, against plainCreditLoop on the same
// database, fake upstream and transport; items per second, and CPU per
// item of the test process (runner, HTTP client and the in-process fake
// upstream; both sides run there) and of the PostgreSQL cluster.
func benchCPUBound(t *testing.T, scale benchScale) []*benchRow {
	const fanOut = 64
	n := scale.cpuN
	s := apptest.New(t, &apptest.Opts{
		Env:  map[string]string{"BUILDRISK_FANOUT": strconv.Itoa(fanOut)},
		Fake: fakeupstream.Config{Companies: max(n+1, fakeupstream.CompaniesDefault)},
	})
	productionTelemetry(t, s)
	codes := seedTargets(t, s, n)
	runner, enqueuer := benchRunner(t, s, nil)
	client := &http.Client{Transport: app.ProviderTransport(fanOut), Timeout: time.Minute}
	defer client.CloseIdleConnections()
	pool, err := app.OpenPool(context.Background(), s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, app.SessionLimits{})
	require.NoError(t, err)
	defer pool.Close()
	day := app.BudgetDay(s.Env, s.Pool)()
	name := fmt.Sprintf("creditEval %d targets, 0 ms calls, FANOUT %d", n, fanOut)
	ref := "plain loop (64 goroutines, upsert per 1,000)"
	rate := &benchRow{name: name + ": items/s", unit: "items/s", refName: ref, target: "≥ 0.8"}
	total := &benchRow{name: "same: CPU per item, test process + PostgreSQL", unit: "ms", refName: ref, target: "≤ 1.25"}
	proc := &benchRow{name: "same: CPU per item, test process (runner or loop, client, fake upstream)", unit: "ms", refName: ref}
	pg := &benchRow{name: "same: CPU per item, PostgreSQL", unit: "ms", refName: ref}
	perItem := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	// BUILDRISK_BENCH_CPUPROFILE=FILE writes a CPU profile of the service's
	// runs (not the loop's) for go tool pprof.
	profile := os.Getenv("BUILDRISK_BENCH_CPUPROFILE")
	for range scale.reps {
		if profile != "" {
			f, err := os.Create(profile)
			require.NoError(t, err)
			require.NoError(t, pprof.StartCPUProfile(f))
			t.Cleanup(func() { _ = f.Close() })
		}
		before := sampleCPU(t, s.Pool)
		out, took := benchRun(t, runner, enqueuer, jobs.CreditEval, `{}`)
		mid := sampleCPU(t, s.Pool)
		if profile != "" {
			pprof.StopCPUProfile()
			profile = "" // the first repetition's
		}
		plain := plainCreditLoop(t, client, pool, s.FakeURL, codes, day, out.ExecutionID)
		after := sampleCPU(t, s.Pool)
		rate.add(float64(n)/took.Seconds(), plain)
		sp, pp := mid.process-before.process, after.process-mid.process
		sg, pg2 := mid.postgres-before.postgres, after.postgres-mid.postgres
		total.add(perItem(sp+sg), perItem(pp+pg2))
		proc.add(perItem(sp), perItem(pp))
		pg.add(perItem(sg), perItem(pg2))
	}
	return []*benchRow{rate, total, proc, pg}
}
