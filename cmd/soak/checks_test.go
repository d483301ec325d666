package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// auditedDB is a fresh migrated database with the soak's audit installed;
// as returns a connection that writes as the given process (its
// application_name), the way each radar process the soak starts does.
type auditedDB struct {
	t    *testing.T
	url  string
	pool *pgxpool.Pool
}

func newAuditedDB(t *testing.T) *auditedDB {
	t.Helper()
	url := pgtest.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "soak-harness"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), auditSQL)
	require.NoError(t, err)
	return &auditedDB{t: t, url: url, pool: pool}
}

func (d *auditedDB) as(appName string) *pgx.Conn {
	d.t.Helper()
	cfg, err := pgx.ParseConfig(d.url)
	require.NoError(d.t, err)
	cfg.RuntimeParams["application_name"] = appName
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(d.t, err)
	d.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// startExecution writes, as the process conn, what a worker writes to start
// a run (testfactory.Execution): a request it claimed, an instance (unless
// given) and a STARTED execution of 10 targets owned by workerID at the
// instance's next lease epoch. It returns the execution and instance ids.
func startExecution(t *testing.T, conn *pgx.Conn, job, workerID string, instance int64) (int64, int64) {
	t.Helper()
	exec := testfactory.Execution(context.Background(), t, conn, &testfactory.ExecutionOpts{Job: job, WorkerID: workerID, InstanceID: instance, Targets: 10})
	return exec.ID, exec.InstanceID
}

// commitChunk writes, as the process conn, a chunk commit without any
// ownership guard: the checkpoint and the execution's figures in one
// statement, whatever the execution's state (a zombie's write).
func commitChunk(t *testing.T, conn *pgx.Conn, exec, instance int64, chunk string, targets, written, skipped, failed int64) {
	t.Helper()
	testfactory.Checkpoint(context.Background(), t, conn, &queries.JobExecution{ID: exec, InstanceID: instance}, &testfactory.CheckpointOpts{
		Chunk: chunk, Targets: targets, Written: written, Skipped: skipped, Failed: failed, Unfenced: true,
	})
}

// finish ends an execution with status as its owner records it (as the
// reaper for ABANDONED), and its request with it.
func finish(t *testing.T, conn *pgx.Conn, exec int64, status string, opts ...func(*testfactory.FinishOpts)) {
	t.Helper()
	finish := &testfactory.FinishOpts{Status: radartype.ExecutionStatus(status), Message: "x"}
	for _, o := range opts {
		o(finish)
	}
	testfactory.FinishExecution(context.Background(), t, conn, exec, finish)
}

// domainRows sets the domain rows an execution reports as it ends.
func domainRows(n int64) func(*testfactory.FinishOpts) {
	return func(o *testfactory.FinishOpts) { o.DomainRows = &n }
}

func check(t *testing.T, name string, db querier, ev *Evidence) []string {
	t.Helper()
	for _, inv := range Invariants {
		if inv.Name == name {
			breaches, err := inv.Check(context.Background(), db, ev)
			require.NoError(t, err)
			return texts(breaches)
		}
	}
	t.Fatalf("no invariant %s", name)
	return nil
}

// requireBreach asserts exactly the breaches whose lines contain each of
// wants, in order.
func requireBreaches(t *testing.T, breaches []string, wants ...string) {
	t.Helper()
	require.Len(t, breaches, len(wants), "%q", breaches)
	for i, want := range wants {
		require.Contains(t, breaches[i], want)
	}
}

func workerRecord(app, id string, started time.Time) *ProcessRecord {
	return &ProcessRecord{AppName: app, WorkerID: id, Started: started}
}

func TestRequestsFinished(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	for _, r := range []struct{ status, message string }{{"DONE", "completed"}, {"FAILED", ""}, {"RUNNING", ""}, {"QUEUED", ""}} {
		testfactory.Request(context.Background(), t, d.pool, &testfactory.RequestOpts{Job: "j" + r.status, Status: radartype.RequestStatus(r.status), Message: r.message})
	}
	requireBreaches(t, check(t, "requests-finished", d.pool, &Evidence{}),
		"request 2 (jFAILED) is FAILED", "request 3 (jRUNNING) is RUNNING", "request 4 (jQUEUED) is QUEUED")
}

// The split brain of a false reap: worker A's execution is abandoned by
// worker B while A lives, B starts the next execution of the job, and A
// commits another chunk into its ABANDONED execution. Four invariants see
// it; the same story without the zombie write, with A dead before the reap,
// breaches none.
func TestSplitBrain(t *testing.T) {
	t.Parallel()
	for _, zombie := range []bool{true, false} {
		d := newAuditedDB(t)
		began := time.Now().Add(-time.Minute)
		a, b := d.as("soak-worker-1.1"), d.as("soak-worker-2.1")
		ev := &Evidence{Workers: []*ProcessRecord{workerRecord("soak-worker-1.1", "wA", began), workerRecord("soak-worker-2.1", "wB", began)}}

		exec1, inst := startExecution(t, a, "aptTrade", "wA", 0)
		commitChunk(t, a, exec1, inst, "11110:202501", 1, 1, 0, 0)
		if !zombie {
			ev.Workers[0].Ended, ev.Workers[0].Killed = time.Now(), true
		}
		finish(t, b, exec1, "ABANDONED")
		exec2, _ := startExecution(t, b, "aptTrade", "wB", inst)
		if zombie {
			commitChunk(t, a, exec1, inst, "11110:202502", 1, 1, 0, 0)
		}
		commitChunk(t, b, exec2, inst, "11110:202503", 1, 1, 0, 0)

		if !zombie {
			for _, name := range []string{"no-overlap", "writes-owned", "no-live-abandoned"} {
				require.Empty(t, check(t, name, d.pool, ev), name)
			}
			continue
		}
		requireBreaches(t, check(t, "no-overlap", d.pool, ev), "aptTrade: execution 1 (worker wA")
		// The figures' update is audited as it happens, the checkpoint at
		// its transaction's commit.
		requireBreaches(t, check(t, "writes-owned", d.pool, ev),
			"execution 1 (aptTrade): figures changed", "execution 1 (aptTrade): checkpoint 11110:202502 committed")
		require.Contains(t, check(t, "writes-owned", d.pool, ev)[0], "while it was ABANDONED (by soak-worker-1.1)")
		requireBreaches(t, check(t, "no-live-abandoned", d.pool, ev), "execution 1 (aptTrade) ABANDONED at")
	}
}

// A write by a process that is not the execution's owner is a breach even
// while the execution runs; so is one by a process the harness did not start.
func TestWritesOwned_NotOwner(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	began := time.Now().Add(-time.Minute)
	ev := &Evidence{Workers: []*ProcessRecord{workerRecord("soak-worker-1.1", "wA", began), workerRecord("soak-worker-2.1", "wB", began)}}
	exec, inst := startExecution(t, d.as("soak-worker-1.1"), "stockPrice", "wA", 0)
	commitChunk(t, d.as("soak-worker-2.1"), exec, inst, "A-B", 1, 1, 0, 0)
	commitChunk(t, d.as("psql"), exec, inst, "C-D", 1, 1, 0, 0)
	requireBreaches(t, check(t, "writes-owned", d.pool, ev),
		"figures changed", "checkpoint A-B committed", "figures changed", "checkpoint C-D committed")
	all := strings.Join(check(t, "writes-owned", d.pool, ev), "\n")
	require.Contains(t, all, "by soak-worker-2.1, not its owner wA")
	require.Contains(t, all, `by "psql", not a worker process`)
}

func TestNoCallAfterCommit(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	a := d.as("soak-worker-1.1")
	before := time.Now()
	exec, inst := startExecution(t, a, "aptTrade", "wA", 0)
	inRun := time.Now()
	commitChunk(t, a, exec, inst, "11110:202501", 1, 1, 0, 0)
	afterCommit := time.Now()
	credit, creditInst := startExecution(t, a, "creditEval", "wA", 0)
	commitChunk(t, a, credit, creditInst, "00100000-00200000", 1, 1, 0, 0)
	finish(t, a, credit, "COMPLETED")
	afterCredit := time.Now()
	// A later instance of creditEval may call the same company again.
	credit2, _ := startExecution(t, a, "creditEval", "wA", 0)
	_ = credit2
	later := time.Now()

	apt := func(at time.Time, region, ym string) UpstreamCall {
		return UpstreamCall{At: at, Endpoint: "aptTrade", Params: map[string]string{"LAWD_CD": region, "DEAL_YMD": ym}, Status: 200}
	}
	lookup := func(at time.Time, corp string) UpstreamCall {
		return UpstreamCall{At: at, Endpoint: "creditLookup", Params: map[string]string{"corpCode": corp}, Status: 200}
	}
	ev := &Evidence{Calls: []UpstreamCall{
		apt(before, "11110", "202501"),      // before any execution: no instance
		apt(inRun, "11110", "202501"),       // the chunk's own call
		apt(afterCommit, "11110", "202501"), // repeated after the commit: breach
		apt(afterCommit, "11110", "202502"), // another item
		lookup(afterCommit, "00150000"),     // creditEval's own call
		lookup(afterCredit, "00150000"),     // after its instance committed it, no new instance yet: breach
		lookup(later, "00150000"),           // a new instance's call
		lookup(later, "00300000"),           // outside the committed range
	}}
	requireBreaches(t, check(t, "no-call-after-commit", d.pool, ev),
		"aptTrade DEAL_YMD=202501&LAWD_CD=11110", "creditLookup corpCode=00150000")

	repeated, err := paidRepeats(context.Background(), d.pool, ev.Calls, nil)
	require.NoError(t, err)
	require.Len(t, repeated, 1, "the aptTrade call after the commit repeated its instance's call")
}

func TestUpstreamCallsSeen(t *testing.T) {
	t.Parallel()
	ev := &Evidence{Calls: make([]UpstreamCall, 3), FakeTotal: 4}
	requireBreaches(t, check(t, "upstream-calls-seen", nil, ev), "the fake upstream counted 4 provider calls, the proxy forwarded 3")
	ev.FakeTotal = 3
	require.Empty(t, check(t, "upstream-calls-seen", nil, ev))
	ev.FakeTotal = -1
	requireBreaches(t, check(t, "upstream-calls-seen", nil, ev), "could not read")
}

func TestAccounting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")

	good, inst := startExecution(t, w, "aptTrade", "wA", 0) // targets 10
	commitChunk(t, w, good, inst, "a", 6, 4, 1, 1)
	commitChunk(t, w, good, inst, "b", 4, 4, 0, 0)
	finish(t, w, good, "COMPLETED", domainRows(8))

	short, inst := startExecution(t, w, "filingParse", "wA", 0) // targets 10
	commitChunk(t, w, short, inst, "a", 9, 9, 0, 0)
	finish(t, w, short, "COMPLETED", domainRows(7))

	netted, inst := startExecution(t, w, "stockPrice", "wA", 0) // +1 and -1 net to 10
	commitChunk(t, w, netted, inst, "a", 5, 6, 0, 0)
	commitChunk(t, w, netted, inst, "b", 5, 4, 0, 0)
	finish(t, w, netted, "COMPLETED")

	// One item written that no checkpoint holds.
	drift := testfactory.Execution(ctx, t, w, &testfactory.ExecutionOpts{Job: "creditEval", WorkerID: "wA", Targets: 10, ItemsWritten: 1}).ID
	commitChunk(t, w, drift, testfactory.ExecutionByID(ctx, t, w, drift).InstanceID, "a", 10, 10, 0, 0)
	finish(t, w, drift, "COMPLETED")

	rules, inst := startExecution(t, w, "rules", "wA", 0) // alerts are not items
	commitChunk(t, w, rules, inst, "a", 10, 10, 0, 0)
	finish(t, w, rules, "COMPLETED", domainRows(3))

	failed, inst := startExecution(t, w, "metrics", "wA", 0) // not COMPLETED: only its checkpoints count
	commitChunk(t, w, failed, inst, "a", 1, 1, 0, 0)
	finish(t, w, failed, "FAILED")

	// A resumed chunk's commit folds the parts an earlier execution of the
	// instance committed (3 items) into its own checkpoint: the instance's
	// executions wrote what its checkpoints hold, no breach.
	stopped, inst := startExecution(t, w, "corpCodeSync", "wA", 0)
	testfactory.CheckpointPart(ctx, t, w, testfactory.ExecutionByID(ctx, t, w, stopped), "a", "i1", "i2", "i3")
	finish(t, w, stopped, "STOPPED")
	resumed, _ := startExecution(t, w, "corpCodeSync", "wA", inst)
	// The run's own commit (fenced), which folds the parts: targets 7 + 3,
	// written 7 + 3.
	testfactory.Checkpoint(ctx, t, w, testfactory.ExecutionByID(ctx, t, w, resumed), &testfactory.CheckpointOpts{Chunk: "a", Targets: 7, Written: 7})
	finish(t, w, resumed, "COMPLETED")

	requireBreaches(t, check(t, "accounting", d.pool, &Evidence{}),
		"chunk a (execution 3): targets 5, written 6",
		"chunk b (execution 3): targets 5, written 4",
		"execution 2 (filingParse) COMPLETED with targets 10, its instance's checkpoints account for 9",
		"execution 2 (filingParse): 7 domain rows, its instance's checkpoints wrote 9",
		"execution 4 (creditEval): its instance's executions wrote 11 items, its instance's checkpoints hold 10")
}

func TestNoLiveAbandoned(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	began := time.Now().Add(-time.Minute)
	ev := &Evidence{Workers: []*ProcessRecord{
		workerRecord("soak-worker-1.1", "wA", began), // alive throughout
		workerRecord("soak-worker-2.1", "wB", began), // killed before the reap
		workerRecord("soak-worker-3.1", "wC", began), // SIGTERM: ended after the reap
	}}
	reaper := d.as("soak-worker-3.2")
	var ids []int64
	for _, id := range []string{"wA", "wB", "wC", "wX"} {
		exec, _ := startExecution(t, d.as("soak-worker-x"), "job"+id, id, 0)
		ids = append(ids, exec)
	}
	ev.Workers[1].Ended, ev.Workers[1].Killed = time.Now(), true
	for _, id := range ids {
		testfactory.FinishExecution(context.Background(), t, reaper, id, &testfactory.FinishOpts{Status: radartype.ExecutionAbandoned, KeepRequest: true})
	}
	ev.Workers[2].Ended = time.Now()
	requireBreaches(t, check(t, "no-live-abandoned", d.pool, ev),
		"execution 1 (jobwA) ABANDONED at", "execution 3 (jobwC) ABANDONED at", "execution 4 (jobwX) ABANDONED at")
	require.Contains(t, check(t, "no-live-abandoned", d.pool, ev)[2], "is no process the harness started")

	// Right after a database outage longer than the stale window, no worker
	// could heartbeat: a live process's execution reaped then is the design
	// (the worker fenced itself), not a false reap. A short outage exempts
	// nothing.
	ev.StaleAfter = 4 * time.Second
	ev.Outages = []Outage{{Start: time.Now().Add(-2 * time.Second), End: time.Now().Add(-time.Second)}}
	requireBreaches(t, check(t, "no-live-abandoned", d.pool, ev),
		"execution 1 (jobwA) ABANDONED at", "execution 3 (jobwC) ABANDONED at", "execution 4 (jobwX) ABANDONED at")
	ev.Outages = []Outage{{Start: began, End: time.Now().Add(-time.Second)}}
	requireBreaches(t, check(t, "no-live-abandoned", d.pool, ev), "execution 4 (jobwX) ABANDONED at")
}

func TestCounters(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.2")
	exec, inst := startExecution(t, w, "aptTrade", "wA", 0)
	commitChunk(t, w, exec, inst, "a", 5, 3, 1, 1)
	finish(t, w, exec, "COMPLETED")
	exec, inst = startExecution(t, w, "filingParse", "wA", 0)
	commitChunk(t, w, exec, inst, "a", 2, 0, 0, 2)
	finish(t, w, exec, "FAILED")

	metrics := func(kv ...any) Metrics {
		m := Metrics{}
		for i := 0; i < len(kv); i += 3 {
			name, labels, v := kv[i].(string), kv[i+1].(map[string]string), kv[i+2].(float64)
			m[name] = append(m[name], Sample{Labels: labels, Value: v})
		}
		return m
	}
	req := func(kind RequestKind, status int) Answer {
		return Answer{Kind: kind, Method: "POST", Path: "/v1/jobs/aptTrade/requests", Status: status}
	}
	api := func(result string) map[string]string {
		return map[string]string{"job": "aptTrade", "source": "api", "result": result}
	}
	ev := &Evidence{
		Workers: []*ProcessRecord{workerRecord("soak-worker-1.2", "wA", time.Now().Add(-time.Minute))},
		Answers: []Answer{
			req(KindValid, 202), req(KindControl, 202), req(KindDuplicate, 409),
			req(KindValid, 0), // no answer: may have been accepted
			req(KindInvalid, 400), req(KindInvalid, 404), req(KindInvalid, 400),
			{Kind: KindControl, Method: "POST", Path: "/v1/jobs/aptTrade/stop", Status: 202}, // not a request
			{Kind: KindControl, Method: "GET", Path: "/v1/jobs", Status: 200},
		},
		APIMetrics: metrics(metricRequests, api("accepted"), 2.0, metricRequests, api("duplicate"), 1.0, metricRequests, api("invalid"), 2.0,
			metricRequests, map[string]string{"job": "aptTrade", "source": "schedule", "result": "invalid"}, 5.0),
		WorkerMetrics: map[string]Metrics{"soak-worker-1.2": metrics(
			metricExecutions, map[string]string{"job": "aptTrade", "status": "COMPLETED"}, 1.0,
			metricItems, map[string]string{"job": "aptTrade", "outcome": "written"}, 3.0,
			metricItems, map[string]string{"job": "aptTrade", "outcome": "skipped"}, 1.0,
			metricItems, map[string]string{"job": "aptTrade", "outcome": "failed"}, 1.0,
		)},
	}
	requireBreaches(t, check(t, "counters", d.pool, ev),
		"buildrisk_requests_total{source=api,result=invalid} = 2, the load got 3",
		"soak-worker-1.2: buildrisk_executions_total{status=FAILED} = 0, the database shows 1",
		"soak-worker-1.2: buildrisk_items_total{outcome=failed} = 1, its executions hold 3")

	ev.APIMetrics = metrics(metricRequests, api("accepted"), 5.0)
	requireBreaches(t, check(t, "counters", d.pool, &Evidence{Answers: ev.Answers, APIMetrics: ev.APIMetrics}),
		"result=accepted} = 5, the load got 2..3", "result=duplicate} = 0, the load got 1..2", "result=invalid} = 0, the load got 3")
}

func TestAnswers(t *testing.T) {
	t.Parallel()
	ev := &Evidence{Answers: []Answer{
		{Kind: KindValid, Method: "POST", Path: "/ok", Status: 202},
		{Kind: KindValid, Method: "POST", Path: "/blip", Status: 500},
		{Kind: KindControl, Method: "GET", Path: "/outage", Status: 503},
		{Kind: KindControl, Method: "GET", Path: "/gateway", Status: 502},
		{Kind: KindValid, Method: "POST", Path: "/hung", Err: "timeout", Latency: 5 * time.Second},
		{Kind: KindInvalid, Method: "POST", Path: "/refused", Status: 422},
		{Kind: KindInvalid, Method: "POST", Path: "/accepted", Status: 202},
		{Kind: KindInvalid, Method: "POST", Path: "/crashed", Status: 500},
	}}
	requireBreaches(t, check(t, "no-500", nil, ev), "POST /blip", "GET /gateway", "POST /crashed")
	requireBreaches(t, check(t, "api-answers-in-time", nil, ev), "POST /hung at")
	requireBreaches(t, check(t, "invalid-4xx", nil, ev), "POST /accepted", "POST /crashed")
}

func TestInRange(t *testing.T) {
	t.Parallel()
	require.True(t, inRange("00100000-00200000", "00100000"))
	require.True(t, inRange("00100000-00200000", "00200000"))
	require.False(t, inRange("00100000-00200000", "00200001"))
	require.False(t, inRange("00100000-00200000", ""))
	require.False(t, inRange("00100000", "00100000"))
}

// The table names every fault (with the reason for one not injected) and
// every invariant, and a breach or a run that never quiesced fails it.
func TestReport(t *testing.T) {
	t.Parallel()
	rep := &report{
		seed: 7, quiesced: true, faultCounts: map[string]int{"worker-kill9": 2},
		faults: []faultRow{{fault: faults[0]}, {fault: Fault{Name: "day-rollover", Description: "d"}, reason: "no clock"}},
		results: []result{
			{inv: Invariant{Name: "a", Description: "held one"}},
			{inv: Invariant{Name: "b", Description: "breached one"}, breaches: []Breach{{Text: "x1"}, {Text: "x2"}}},
		},
	}
	var out strings.Builder
	rep.print(&out)
	require.Contains(t, out.String(), "| worker-kill9 | 2 |")
	require.Contains(t, out.String(), "| day-rollover | not injected | d: no clock |")
	require.Contains(t, out.String(), "| a | held |")
	require.Contains(t, out.String(), "| b | BREACHED (2) |")
	require.Contains(t, out.String(), "  - x2")
	require.True(t, rep.breached())

	rep.results = rep.results[:1]
	require.False(t, rep.breached())
	rep.quiesced = false
	require.True(t, rep.breached(), "a run that never quiesced fails")
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags([]string{"-duration", "1m", "-seed", "5", "-env", "BUILDRISK_X=1"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(5), cfg.seed)
	require.Equal(t, "1", cfg.env["BUILDRISK_X"])
	require.Equal(t, replicationNone, cfg.replication, "one server unless asked")
	require.Equal(t, fanOutDefault, cfg.fanOut())
	cfg, err = parseFlags([]string{"-replication", "sync", "-env", "BUILDRISK_FANOUT=8"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, replicationSync, cfg.replication)
	require.Equal(t, 8, cfg.fanOut(), "the fleet's fan-out, for the repeats' bound")
	_, err = parseFlags([]string{"-replication", "streaming"}, io.Discard)
	require.ErrorContains(t, err, "-replication must be one of none, async, sync")
	_, err = parseFlags([]string{"-stop-timeout", "0s"}, io.Discard)
	require.ErrorContains(t, err, "-stop-timeout")
	cfg, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.NotZero(t, cfg.seed, "a random seed is picked and printed")
	_, err = parseFlags([]string{"-workers", "1"}, io.Discard)
	require.ErrorContains(t, err, "-workers")
	_, err = parseFlags([]string{"-stale-after", "1s", "-heartbeat", "2s"}, io.Discard)
	require.ErrorContains(t, err, "-stale-after")
	_, err = parseFlags([]string{"-env", "novalue"}, io.Discard)
	require.Error(t, err)
}

// A call made while executions of two instances overlapped may be either's:
// it is a repeat only when both had committed the item.
func TestNoCallAfterCommit_Ambiguous(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	a, b := d.as("soak-worker-1.1"), d.as("soak-worker-2.1")
	zombie, inst := startExecution(t, a, "creditEval", "wA", 0)
	testfactory.FinishRequest(context.Background(), t, b, testfactory.ExecutionByID(context.Background(), t, b, zombie).RequestID, radartype.RequestFailed, "x")
	resumed, _ := startExecution(t, b, "creditEval", "wB", inst)
	commitChunk(t, b, resumed, inst, "00100000-00200000", 1, 1, 0, 0)
	finish(t, b, resumed, "COMPLETED")
	fresh, freshInst := startExecution(t, b, "creditEval", "wB", 0)
	during := time.Now() // the zombie and the new instance both run
	commitChunk(t, a, zombie, inst, "00300000-00400000", 1, 1, 0, 0)
	commitChunk(t, b, fresh, freshInst, "00100000-00200000", 1, 1, 0, 0)
	finish(t, b, fresh, "COMPLETED")
	after := time.Now()

	lookup := func(at time.Time) UpstreamCall {
		return UpstreamCall{At: at, Endpoint: "creditLookup", Params: map[string]string{"corpCode": "00150000"}, Status: 200}
	}
	requireBreaches(t, check(t, "no-call-after-commit", d.pool, &Evidence{Calls: []UpstreamCall{lookup(during), lookup(after)}}),
		"creditLookup corpCode=00150000 at "+clock(after)+": instance 2 had committed it")
}

// texts returns the breaches' lines.
func texts(breaches []Breach) []string {
	out := make([]string, len(breaches))
	for i, b := range breaches {
		out[i] = b.Text
	}
	return out
}

// A request and its River job agree, or the invariant names the request:
// a DONE request over a River job still available and a QUEUED request
// whose River job was cancelled or is gone breach it; a DONE request over
// a cancelled River job and a QUEUED one over an available River job do
// not.
func TestRiverAgrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newAuditedDB(t)
	client, err := river.NewClient(riverpgxv5.New(d.pool), &river.Config{})
	require.NoError(t, err)
	riverJob := func(cancelled bool) *int64 {
		res, err := client.Insert(ctx, catalog.RequestArgs{Job: "aptTrade"}, nil)
		require.NoError(t, err)
		if cancelled {
			_, err = client.JobCancel(ctx, res.Job.ID)
			require.NoError(t, err)
		}
		return &res.Job.ID
	}
	gone := int64(999999)
	for _, r := range []struct {
		status radartype.RequestStatus
		job    *int64
	}{
		{radartype.RequestDone, riverJob(true)},
		{radartype.RequestQueued, riverJob(false)},
		{radartype.RequestDone, riverJob(false)},
		{radartype.RequestQueued, riverJob(true)},
		{radartype.RequestQueued, &gone},
	} {
		testfactory.Request(ctx, t, d.pool, &testfactory.RequestOpts{Job: fmt.Sprintf("j%d", *r.job), Status: r.status, Message: "m", RiverJobID: r.job})
	}
	requireBreaches(t, check(t, "river-agrees", d.pool, &Evidence{}),
		"request 3 is DONE but its River job is available", "request 4 is QUEUED but its River job is cancelled",
		"request 5 is QUEUED but its River job is gone")
}

// The split-brain count sees what a transaction wrote after the mark, and
// the demoted-untouched invariant breaches on it.
func TestDemotedUntouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE written (n int); INSERT INTO written VALUES (0)`)
	require.NoError(t, err)
	var mark int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT txid_current() % 4294967296`).Scan(&mark))
	_, err = conn.Exec(ctx, `INSERT INTO written VALUES (1), (2)`)
	require.NoError(t, err)
	rows, err := rowsWrittenSince(ctx, conn, mark+1)
	require.NoError(t, err)
	require.Equal(t, 2, rows)

	ev := &Evidence{SplitBrains: []SplitBrainEvent{{Start: time.Now(), Rows: rows}, {Start: time.Now()}}}
	requireBreaches(t, check(t, "demoted-untouched", nil, ev), "2 rows written on the demoted primary")
}
