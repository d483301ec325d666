package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
)

type rawNoopWorker struct {
	river.WorkerDefaults[apptest.RawNoopArgs]
}

func (rawNoopWorker) Work(context.Context, *river.Job[apptest.RawNoopArgs]) error { return nil }

// BenchmarkServiceVsRiver runs the same workload through the service
// (enqueue under the advisory lock with dedupe → claim → execution → one
// chunk commit → record outcome + River completion) and through raw River
// (insert → no-op work → completion) on the same database, and reports both
// rates and their ratio. Each lane is one job name: the service allows one
// active request per job, so a lane waits for its request to finish.
func BenchmarkServiceVsRiver(b *testing.B) {
	const laneCount, perLane = 10, 20
	s := apptest.New(b, nil)
	ctx := context.Background()

	names := make([]string, laneCount)
	registry := map[string]batch.Job{}
	var defs []catalog.Definition
	for i := range names {
		names[i] = fmt.Sprintf("bench%d", i)
		registry[names[i]] = apptest.NoopJob{}
		defs = append(defs, &catalog.Spec[struct{}]{JobName: names[i], Desc: "benchmark no-op"})
	}
	w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) { rc.Jobs = registry })
	enqueuer, err := request.NewOwner(s.Pool, w.River(), request.Config{Catalog: catalog.NewCatalog(defs...), Instruments: s.Tel.Instruments})
	require.NoError(b, err)
	serviceEvents, cancelService := w.River().Subscribe(river.EventKindJobCompleted)
	defer cancelService()
	serviceDone := apptest.NewCompletions(serviceEvents)

	workers := river.NewWorkers()
	river.AddWorker(workers, rawNoopWorker{})
	raw, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{
		Queues: map[string]river.QueueConfig{"bench": {MaxWorkers: 10}}, Workers: workers,
		FetchCooldown: 50 * time.Millisecond, FetchPollInterval: 500 * time.Millisecond,
	})
	require.NoError(b, err)
	require.NoError(b, raw.Start(ctx))
	defer func() { _ = raw.Stop(ctx) }()
	rawEvents, cancelRaw := raw.Subscribe(river.EventKindJobCompleted)
	defer cancelRaw()
	rawDone := apptest.NewCompletions(rawEvents)

	var serviceElapsed, rawElapsed time.Duration
	for b.Loop() {
		serviceElapsed += apptest.Lanes(b, laneCount, perLane, func(lane int) {
			res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: names[lane], Source: radartype.SourceAPI})
			require.NoError(b, err)
			serviceDone.Wait(*res.Request.RiverJobID)
		})
		rawElapsed += apptest.Lanes(b, laneCount, perLane, func(lane int) {
			res, err := raw.Insert(ctx, apptest.RawNoopArgs{Lane: lane}, &river.InsertOpts{Queue: "bench"})
			require.NoError(b, err)
			rawDone.Wait(res.Job.ID)
		})
	}
	total := float64(laneCount * perLane * b.N)
	serviceRate := total / serviceElapsed.Seconds()
	rawRate := total / rawElapsed.Seconds()
	b.ReportMetric(serviceRate, "service_req/s")
	b.ReportMetric(rawRate, "river_jobs/s")
	b.ReportMetric(serviceRate/rawRate, "service/river")
	b.ReportMetric(0, "ns/op")

}

// BenchmarkReapLatency measures, by the database's clock, how long after a
// dead worker's last heartbeat its request reads FAILED when a reaper runs
// every REAP_INTERVAL (the tests' 2 s stale window, 500 ms interval): the
// contract is STALE_AFTER + REAP_INTERVAL at most. Reported as
// reap-seconds per request.
func BenchmarkReapLatency(b *testing.B) {
	s := apptest.New(b, nil)
	reaper := s.Role.Owner().ReapService(s.Env.ReapInterval)
	ctx, cancel := context.WithCancel(context.Background())
	var reaping sync.WaitGroup
	reaping.Go(func() { reaper.Run(ctx) })
	defer func() { cancel(); reaping.Wait() }()
	var total float64
	for i := range b.N {
		dead := testfactory.Worker(context.Background(), b, s.Pool, &testfactory.WorkerOpts{ID: fmt.Sprintf("%d@dead-host#bench", i)})
		id := testfactory.Request(context.Background(), b, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", Status: radartype.RequestRunning, WorkerID: dead.ID}).ID
		var latency float64
		deadline := time.Now().Add(time.Minute)
		for {
			err := s.Pool.QueryRow(context.Background(), `SELECT extract(epoch FROM r.finished_at - w.heartbeat_at)::float8
				FROM job_request r JOIN worker w ON w.id = r.worker_id WHERE r.id = $1 AND r.status = 'FAILED'`, id).Scan(&latency)
			if err == nil {
				break
			}
			require.True(b, time.Now().Before(deadline), "request %d never reaped", id)
			time.Sleep(20 * time.Millisecond)
		}
		total += latency
	}
	b.ReportMetric(total/float64(b.N), "reap-seconds/op")
}
