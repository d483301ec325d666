package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory/bulk"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
)

// historySmall is the busy job's history in the reference database of the
// history group.
const historySmall = 1000

// liveWorker holds the skewed history's one live run.
const liveWorker = bulk.LiveWorker

// seedSkewedHistory adds bulk.SkewedHistory of n busy runs as the schema
// owner, then does what autovacuum does after a bulk of inserts.
func seedSkewedHistory(t *testing.T, ownerURL string, n int) {
	t.Helper()
	ctx := context.Background()
	owner, err := pgxpool.New(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close()
	bulk.SkewedHistory(ctx, t, owner, n)
	// Statistics, and the visibility map that index-only scans read.
	_, err = owner.Exec(ctx, "VACUUM ANALYZE")
	require.NoError(t, err)
}

// historyEndpoints are the calls the console polls (api/web/static/
// console.js), as it sends them; {job} takes each catalog job in turn.
var historyEndpoints = []string{
	"/v1/jobs", "/v1/jobs/{job}", "/v1/requests?limit=25", "/v1/workers", "/v1/coverage",
	"/v1/alerts", "/v1/audit?limit=20", "/v1/jobs/{job}/history?days=14",
}

// benchGet returns a call of GET path (an operator's, on client's
// kept-alive connection, {job} taking each catalog job in turn) to the api
// at base.
func benchGet(t *testing.T, client *http.Client, base, path string) func() {
	names := jobset.Catalog().Names()
	i := 0
	return func() {
		p := strings.ReplaceAll(path, "{job}", url.PathEscape(names[i%len(names)]))
		i++
		status := benchAPICall(t, client, http.MethodGet, base+p, apptest.OperatorToken, "")
		require.Equal(t, http.StatusOK, status, "GET %s", p)
	}
}

// benchInterleaved calls fig and ref one after the other, sequentially,
// in turns of d each (which goes first alternating), turns times, and
// returns each one's calls per second (in benchRow.add's order): a shared
// machine's load falls on both alike.
func benchInterleaved(turns int, d time.Duration, fig, ref func()) (figRate, refRate float64) {
	sides := [2]func(){fig, ref}
	var calls [2]int
	var took [2]time.Duration
	for k := range turns {
		for j := range 2 {
			side := (j + k) % 2
			began := time.Now()
			for time.Since(began) < d {
				sides[side]()
				calls[side]++
			}
			took[side] += time.Since(began)
		}
	}
	return float64(calls[0]) / took[0].Seconds(), float64(calls[1]) / took[1].Seconds()
}

// historyPass is one background pass of every process whose statements
// read the history.
type historyPass struct {
	name string
	run  func(ctx context.Context) error
}

// historyPasses returns the reaper's, reconcile's and the gauges' passes
// (and the freshness every scrape reads, and the scheduler's state) as a
// worker runs them, on a worker-sized pool of s's database, with
// the live run's worker holding its request, so each pass finds nothing
// to do: their steady state.
func historyPasses(t *testing.T, s *apptest.System) []historyPass {
	t.Helper()
	ctx := context.Background()
	pool, err := dbpool.Open(ctx, s.DBURL, s.Env.WorkerMaxConns(), s.Env.DBTimeout, false, config.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// A stale window longer than the bench: the live worker's heartbeat
	// never goes stale, so the reaper finds no request to reap.
	const stale = 24 * time.Hour
	reaper, err := request.NewOwner(pool, nil, request.Config{Catalog: jobset.Catalog(), StaleAfter: stale, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger})
	require.NoError(t, err)
	gauges := &worker.Gauges{Pool: pool, Jobs: jobset.Catalog().Names(), StaleAfter: stale, Instruments: s.Tel.Instruments}
	names := jobset.Catalog().Names()
	q := queries.New()
	return []historyPass{
		{"reaper pass", func(ctx context.Context) error {
			_, err := reaper.Reap(ctx, "")
			return err
		}},
		{"reconcile pass", func(ctx context.Context) error {
			_, err := reaper.Reconcile(ctx, liveWorker, heldAll{})
			return err
		}},
		{"gauges pass", gauges.Record},
		{"freshness read (every scrape)", func(ctx context.Context) error {
			_, err := q.JobFreshnessByJob(ctx, pool, names)
			return err
		}},
		{"scheduler state read (every pass)", func(ctx context.Context) error {
			_, err := q.ScheduleTickStateByJob(ctx, pool, names)
			return err
		}},
	}
}

// heldAll holds every request: the reconcile pass of a worker whose runs
// are all its own.
type heldAll struct{}

func (heldAll) Has(int64) bool { return true }

// call returns one pass as a call, failing the test on its error.
func (p historyPass) call(t *testing.T) func() {
	return func() { require.NoError(t, p.run(context.Background()), p.name) }
}

// benchHistory: every call the console polls, and the background passes
// every process runs, on a skewed history of scale.jobsBig runs of one job
// (quiet jobs beside it) against the same on historySmall runs: two
// databases, each call or pass measured on both in turns
// (benchInterleaved), sequentially, as the console polls. GET /v1/jobs is
// also held against a database with no history of the busy job at all.
func benchHistory(t *testing.T, scale benchScale) []*benchRow {
	small, big, empty := apptest.New(t, nil), apptest.New(t, nil), apptest.New(t, nil)
	began := time.Now()
	seedSkewedHistory(t, small.OwnerURL, historySmall)
	seedSkewedHistory(t, big.OwnerURL, scale.jobsBig)
	seedSkewedHistory(t, empty.OwnerURL, 0)
	t.Logf("history: seeded %d and %d runs in %s", historySmall, scale.jobsBig, time.Since(began).Round(time.Millisecond))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()

	ref := fmt.Sprintf("same with %d", historySmall)
	gets := make([]*benchRow, len(historyEndpoints))
	for i, path := range historyEndpoints {
		gets[i] = &benchRow{name: fmt.Sprintf("GET %s, skewed history of %d runs", path, scale.jobsBig), unit: "req/s",
			refName: ref, target: "≥ 0.8"}
	}
	jobsEmpty := &benchRow{name: fmt.Sprintf("GET /v1/jobs, skewed history of %d runs", scale.jobsBig), unit: "req/s",
		refName: "no history of the busy job", target: "≥ 0.8"}
	smallPasses, bigPasses := historyPasses(t, small), historyPasses(t, big)
	passes := make([]*benchRow, len(bigPasses))
	for i, p := range bigPasses {
		passes[i] = &benchRow{name: fmt.Sprintf("%s, skewed history of %d runs", p.name, scale.jobsBig), unit: "passes/s",
			refName: ref, target: "≥ 0.8"}
	}
	turns, turn := scale.historyTurns, scale.historyTurn
	for range scale.reps {
		for i, path := range historyEndpoints {
			gets[i].add(benchInterleaved(turns, turn, benchGet(t, client, big.API.URL, path), benchGet(t, client, small.API.URL, path)))
		}
		jobsEmpty.add(benchInterleaved(turns, turn, benchGet(t, client, big.API.URL, "/v1/jobs"), benchGet(t, client, empty.API.URL, "/v1/jobs")))
		for i := range bigPasses {
			passes[i].add(benchInterleaved(turns, turn, bigPasses[i].call(t), smallPasses[i].call(t)))
		}
	}
	return append(append(gets, jobsEmpty), passes...)
}
