package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// benchRunner is a runner on the system's database for requests run in the
// test process, as `radar run` does.
func benchRunner(t *testing.T, s *apptest.System, jobsByName map[string]batch.Job) (*batch.Runner, *request.Owner) {
	t.Helper()
	// The runner works on a pool of the worker's size, as deployed (the
	// test system's own pool has pgxpool's default of 4 connections).
	pool, err := dbpool.Open(context.Background(), s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, config.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	up, err := app.NewUpstream(pool, s.Env, s.Tel, "bench")
	require.NoError(t, err)
	if jobsByName == nil {
		jobsByName = batch.Implementations(app.Jobs(s.Env, s.Pool))
	}
	runner, err := batch.NewRunner(pool, batch.Config{
		Owner: s.Role.Owner(), WorkerID: "1@bench#b", Jobs: jobsByName, Upstream: up, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger, FanOut: s.Env.FanOut,
	})
	require.NoError(t, err)
	return runner, s.Role.Owner()
}

func benchRun(t *testing.T, runner *batch.Runner, enqueuer *request.Owner, job, params string) (*batch.Outcome, time.Duration) {
	t.Helper()
	res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: job, Params: json.RawMessage(params), Source: radartype.SourceCLI, WorkerID: "1@bench#b"})
	require.NoError(t, err)
	began := time.Now()
	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: res.Request.ID})
	took := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
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
			_, took := benchRun(t, runner, enqueuer, credit.Name, `{}`)
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
		res, err := enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: apttrade.Name, Params: params, Source: radartype.SourceCLI, WorkerID: "1@bench#b"})
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
		require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
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
	var defs []catalog.Definition
	for i := range names {
		names[i] = fmt.Sprintf("scale%d", i)
		registry[names[i]] = sleepJob{chunks: scale.scaleChunks, each: 25 * time.Millisecond}
		defs = append(defs, &catalog.Spec[struct{}]{JobName: names[i], Desc: "benchmark sleep"})
	}
	runAll := func(workerCount int) time.Duration {
		s := apptest.New(t, nil)
		var ws []*app.Worker
		for range workerCount {
			w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) {
				rc.Jobs = registry
				wc.MaxConcurrentJobs = 1
			})
			ws = append(ws, w)
		}
		insertOnly, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{FetchCooldown: river.FetchCooldownMin})
		require.NoError(t, err)
		enqueuer, err := request.NewOwner(s.Pool, insertOnly, request.Config{Catalog: catalog.NewCatalog(defs...), Instruments: s.Tel.Instruments})
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
			require.NoError(t, w.Stop(context.Background()))
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
