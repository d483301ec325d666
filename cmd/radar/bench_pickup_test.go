package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
)

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
	var defs []catalog.Definition
	for i := range names {
		names[i] = fmt.Sprintf("pickup%d", i)
		registry[names[i]] = apptest.NoopJob{}
		defs = append(defs, &catalog.Spec[struct{}]{JobName: names[i], Desc: "benchmark no-op"})
	}
	openWorkerPool := func() *pgxpool.Pool {
		pool, err := dbpool.Open(ctx, s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, config.SessionLimits{})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	heartbeatPool, err := dbpool.OpenHeartbeat(ctx, s.DBURL, config.HeartbeatPoolConns, s.Env.DBTimeout, false, config.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(heartbeatPool.Close)
	w, _ := s.StartWorkerWith(openWorkerPool(), func(wc *worker.Config, rc *batch.Config) {
		rc.Jobs = registry
		wc.HeartbeatPool = heartbeatPool
	})
	// The production path (cleanup, lock, dedupe, InsertTx) for the no-op
	// catalog, built as internal/app builds a role's.
	insertOnly, err := river.NewClient(riverpgxv5.New(s.APIPool), &river.Config{FetchCooldown: river.FetchCooldownMin})
	require.NoError(t, err)
	enqueuer, err := request.NewOwner(s.APIPool, insertOnly, request.Config{
		Catalog: catalog.NewCatalog(defs...), Instruments: s.Tel.Instruments, StaleAfter: s.Env.StaleAfter, Resume: s.Env.AutoResume,
	})
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
	rawInsertPool, err := dbpool.OpenAPI(ctx, s.Env, s.DBURL)
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
