package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
)

// metricsOf builds a scrape from name, labels, value triples.
func metricsOf(kv ...any) Metrics {
	m := Metrics{}
	for i := 0; i < len(kv); i += 3 {
		name, labels, v := kv[i].(string), kv[i+1].(map[string]string), kv[i+2].(float64)
		m[name] = append(m[name], Sample{Labels: labels, Value: v})
	}
	return m
}

// A COMPLETED execution whose instance holds fewer checkpoints than its
// plan's chunks is a run that reads as success with work missing; one
// whose instance holds them all (some committed by an earlier execution)
// is whole.
func TestCompletedWhole(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	ctx := context.Background()
	shortRun := testfactory.Execution(ctx, t, w, &testfactory.ExecutionOpts{Job: "aptTrade", WorkerID: "wA", ChunksTotal: 3, Targets: 10})
	short, inst := shortRun.ID, shortRun.InstanceID
	commitChunk(t, w, short, inst, "11110:202501", 1, 1, 0, 0)
	commitChunk(t, w, short, inst, "11110:202502", 1, 1, 0, 0)
	finish(t, w, short, "COMPLETED")

	first, inst := startExecution(t, w, "creditEval", "wA", 0)
	commitChunk(t, w, first, inst, "1-2", 1, 1, 0, 0)
	finish(t, w, first, "STOPPED")
	resumed := testfactory.Execution(ctx, t, w, &testfactory.ExecutionOpts{Job: "creditEval", WorkerID: "wA", InstanceID: inst, ChunksTotal: 2, Targets: 10}).ID
	commitChunk(t, w, resumed, inst, "3-4", 1, 1, 0, 0)
	finish(t, w, resumed, "COMPLETED")

	requireBreaches(t, check(t, "completed-whole", d.pool, &Evidence{}),
		fmt.Sprintf("execution %d (aptTrade) COMPLETED with 3 planned chunks, its instance holds 2 checkpoints", short))
}

// A stop ends STOPPED by the operator within the stop timeout and the
// margin, or COMPLETED; FAILED is a breach whatever happened meanwhile, a
// late end or another cause only when no process or database fault got in
// the way; a stop whose execution is gone is a breach unless an
// asynchronous failover may have taken it.
func TestStopBounded(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	end := func(job, status, cause string, after time.Duration) (int64, time.Time) {
		stoppedAt := time.Now().Add(-after)
		exec := testfactory.Execution(context.Background(), t, w, &testfactory.ExecutionOpts{
			Job: job, WorkerID: "wA", Targets: 10, Status: radartype.ExecutionStatus(status), StopCause: radartype.StopCause(cause), ExitMessage: "x",
		})
		return exec.ID, stoppedAt
	}
	var stops []StopEvent
	add := func(job, status, cause string, after time.Duration, fault string) StopEvent {
		id, at := end(job, status, cause, after)
		s := StopEvent{At: at, Job: job, ExecutionID: id, Fault: fault, Stream: 1}
		stops = append(stops, s)
		return s
	}
	add("okStopped", "STOPPED", "operator", 2*time.Second, "slow-provider")
	add("okCompleted", "COMPLETED", "", time.Second, "slow-provider")
	failed := add("failed", "FAILED", "failure", time.Second, "slow-provider")
	late := add("late", "STOPPED", "operator", 20*time.Second, "api-stop")
	drained := add("drained", "STOPPED", "drain", time.Second, "slow-provider")
	stops = append(stops, StopEvent{At: time.Now(), Job: "gone", ExecutionID: 999999, Fault: "slow-provider"})
	ev := &Evidence{StopTimeout: 5 * time.Second, Stops: stops,
		// The late stop's own injection (api-stop) is no excuse.
		Faults: []FaultEvent{{Name: "api-stop", Stream: 0, Start: late.At.Add(-time.Second), End: late.At}}}
	requireBreaches(t, check(t, "stop-bounded", d.pool, ev),
		fmt.Sprintf("execution %d (failed) stopped at", failed.ExecutionID),
		fmt.Sprintf("execution %d (late) stopped at", late.ExecutionID),
		fmt.Sprintf("execution %d (drained) stopped at", drained.ExecutionID),
		"execution 999999 (gone) stopped at")

	// A worker killed while the late and drained runs stopped excuses both,
	// not the FAILED one; an asynchronous failover excuses the gone one.
	ev.Faults = append(ev.Faults, FaultEvent{Name: "worker-kill9", Stream: 0, Start: late.At.Add(time.Second), End: drained.At.Add(time.Second)})
	ev.Replication, ev.Failovers = replicationAsync, []FailoverEvent{{Start: time.Now(), Promoted: time.Now()}}
	requireBreaches(t, check(t, "stop-bounded", d.pool, ev),
		fmt.Sprintf("execution %d (failed) stopped at", failed.ExecutionID))
	require.Contains(t, check(t, "stop-bounded", d.pool, ev)[0], "(slow-provider) ended FAILED: x")
}

// Every 202 must be in the database; after an asynchronous failover, the
// requests accepted just before it are excused.
func TestAcceptedKept(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	kept := testfactory.Request(context.Background(), t, w, &testfactory.RequestOpts{Job: "rules", Status: radartype.RequestDone, Message: "x"}).ID
	now := time.Now()
	accepted := func(id int64, at time.Time) Answer {
		return Answer{At: at, Kind: KindValid, Method: "POST", Path: "/v1/jobs/rules/requests", Job: "rules", Status: 202, RequestID: fmt.Sprint(id)}
	}
	ev := &Evidence{Answers: []Answer{
		accepted(kept, now.Add(-time.Minute)),
		accepted(kept+100, now.Add(-time.Minute)), // long before the failover
		accepted(kept+101, now.Add(-time.Second)), // just before it
		{At: now, Kind: KindValid, Method: "POST", Path: "/v1/jobs/rules/requests", Status: 409},
	}}
	requireBreaches(t, check(t, "accepted-kept", d.pool, ev),
		fmt.Sprintf("request %d (rules) answered 202", kept+100), fmt.Sprintf("request %d (rules) answered 202", kept+101))
	ev.Failovers = []FailoverEvent{{Start: now, Promoted: now.Add(time.Second)}}
	ev.Replication = replicationSync
	require.Len(t, check(t, "accepted-kept", d.pool, ev), 2, "a synchronous standby loses nothing")
	ev.Replication = replicationAsync
	requireBreaches(t, check(t, "accepted-kept", d.pool, ev), fmt.Sprintf("request %d (rules) answered 202", kept+100))
}

// The ledger (calls_used less what open leases have not claimed) must
// count at least every call made, per provider.
func TestCapLedger(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	ctx := context.Background()
	for _, b := range []testfactory.ProviderCallBudgetOpts{
		{Provider: "CREDIT", CallsUsed: 10}, {Provider: "MOLIT", CallsUsed: 2}, {Provider: "MOLIT", DaysAgo: 1, CallsUsed: 1},
	} {
		testfactory.ProviderCallBudget(ctx, t, w, &b)
	}
	testfactory.ProviderCallLease(ctx, t, w, &testfactory.ProviderCallLeaseOpts{Provider: "CREDIT", Holder: "w", Granted: 8, Claimed: 3, TTL: time.Minute})
	calls := func(endpoint string, n int) []UpstreamCall {
		out := make([]UpstreamCall, n)
		for i := range out {
			out[i] = UpstreamCall{Endpoint: endpoint, Status: 200}
		}
		return out
	}
	ev := &Evidence{Calls: append(append(append(calls("creditLookup", 4), calls("creditFallback", 2)...), calls("aptTrade", 3)...), calls("stockPrice", 1)...)}
	// CREDIT: 10 - (8 - 3) = 5 for 6 made; MOLIT 3 for 3; KRX 0 for 1.
	requireBreaches(t, check(t, "cap-ledger", d.pool, ev),
		"CREDIT: the daily-cap ledger counts 5 calls, 6 were made", "KRX: the daily-cap ledger counts 0 calls, 1 were made")
	ev.Replication, ev.Failovers = replicationAsync, []FailoverEvent{{Start: time.Now(), Promoted: time.Now()}}
	require.Empty(t, check(t, "cap-ledger", d.pool, ev), "an asynchronous failover's shortfall is reported, not breached")
}

// Paid repeats are put down to the injections they followed, per
// instance: more than 2 × FANOUT under one injection is a breach; a call
// after an answer a fault spoiled is a retry, not a repeat.
func TestRepeatsBounded(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	began := time.Now()
	exec, inst := startExecution(t, w, "creditEval", "wA", 0)
	_ = exec
	time.Sleep(10 * time.Millisecond)
	t0 := time.Now()
	finish(t, w, exec, "COMPLETED") // the run's last write: its window's end
	lookup := func(at time.Time, corp int) UpstreamCall {
		return UpstreamCall{At: at, Endpoint: "creditLookup", Params: map[string]string{"corpCode": fmt.Sprintf("%08d", corp)}, Status: 200}
	}
	ms := func(n int) time.Time { return t0.Add(-5*time.Millisecond + time.Duration(n)*10*time.Microsecond) }
	var calls []UpstreamCall
	for i := range 12 {
		calls = append(calls, lookup(ms(i), i)) // first answers
	}
	for i := range 11 {
		calls = append(calls, lookup(ms(100+i), i)) // paid again, after the lock stall
	}
	stall := FaultEvent{Name: "lock-stall", Stream: 0, Start: ms(50), End: ms(200)}
	ev := &Evidence{FanOut: 5, Calls: calls, Faults: []FaultEvent{stall}}
	breaches := check(t, "repeats-bounded", d.pool, ev)
	requireBreaches(t, breaches, fmt.Sprintf("instance %d paid for 11 answers again", inst))
	require.Contains(t, breaches[0], "after lock-stall (injected")
	require.Contains(t, breaches[0], "1 more than 2 × FANOUT = 10 per fault")
	_ = began

	// The same repeats after two faults of the process stream, ten after
	// the first and one after the second, both under one upstream fault:
	// each within its bound.
	kill := FaultEvent{Name: "worker-kill9", Stream: 0, Start: ms(50), End: ms(60)}
	sigstop := FaultEvent{Name: "worker-sigstop", Stream: 0, Start: ms(110), End: ms(120)}
	slow := FaultEvent{Name: "upstream-latency", Stream: 1, Start: ms(40), End: ms(300)}
	ev.Faults = []FaultEvent{kill, slow, sigstop}
	require.Empty(t, check(t, "repeats-bounded", d.pool, ev))
	// One fault of each stream and eleven repeats after both: ten can be
	// the process fault's, the eleventh the upstream fault's.
	ev.Faults = []FaultEvent{kill, slow}
	require.Empty(t, check(t, "repeats-bounded", d.pool, ev))

	// The first answers given while garbage spoiled answers: the calls
	// after them are retries.
	ev.Faults = []FaultEvent{{Name: "upstream-garbage", Stream: 1, Start: ms(0), End: ms(20)}, stall}
	require.Empty(t, check(t, "repeats-bounded", d.pool, ev))
	reps, err := paidRepeats(context.Background(), d.pool, calls, ev.Faults)
	require.NoError(t, err)
	require.Empty(t, reps)

	// Ten repeats are within the bound.
	ev = &Evidence{FanOut: 5, Calls: calls[:22], Faults: []FaultEvent{stall}}
	require.Empty(t, check(t, "repeats-bounded", d.pool, ev))
}

// Each process alive at the end counts every failover it lived through;
// after an asynchronous failover, a worker that counted items its
// executions do not hold must have counted lost commits.
func TestFailoversCounted(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	exec, inst := startExecution(t, w, "aptTrade", "wA", 0)
	commitChunk(t, w, exec, inst, "a", 5, 5, 0, 0)
	finish(t, w, exec, "COMPLETED")
	now := time.Now()
	failovers := func(n, written float64) Metrics {
		return metricsOf(metricFailovers, map[string]string{}, n, metricItems, map[string]string{"outcome": "written"}, written)
	}
	ev := &Evidence{
		Replication: replicationSync,
		APIStarted:  now.Add(-time.Hour),
		Failovers:   []FailoverEvent{{Start: now.Add(-time.Minute), Promoted: now.Add(-time.Minute + time.Second)}},
		Workers: []*ProcessRecord{
			workerRecord("soak-worker-1.1", "wA", now.Add(-time.Hour)),
			workerRecord("soak-worker-2.2", "wB", now.Add(-time.Minute+time.Second)), // started after it
		},
		APIMetrics:    failovers(0, 0),
		WorkerMetrics: map[string]Metrics{"soak-worker-1.1": failovers(1, 7), "soak-worker-2.2": failovers(0, 0)},
	}
	requireBreaches(t, check(t, "failovers-counted", d.pool, ev),
		"soak-api: buildrisk_database_failovers_total = 0, it lived through 1 failovers")

	ev.APIMetrics = failovers(1, 0)
	require.Empty(t, check(t, "failovers-counted", d.pool, ev), "synchronous: the counters' excess is the counters check's")
	ev.Replication = replicationAsync
	requireBreaches(t, check(t, "failovers-counted", d.pool, ev),
		"soak-worker-1.1 counted 2 written items its executions do not hold, and buildrisk_commits_lost_total = 0")
	ev.WorkerMetrics["soak-worker-1.1"]["buildrisk_commits_lost_total"] = []Sample{{Labels: map[string]string{"job": "aptTrade"}, Value: 1}}
	require.Empty(t, check(t, "failovers-counted", d.pool, ev))
	require.Empty(t, check(t, "failovers-counted", d.pool, &Evidence{}), "no failover, nothing to count")
}

// Charging repeats to faults: each to one of the faults it followed, at
// most the bound each, moving earlier charges when that makes room.
func TestChargeRepeats(t *testing.T) {
	t.Parallel()
	require.Empty(t, chargeRepeats([][]int{{0, 1}, {0}, {0}}, 2), "the first moves to fault 1")
	require.Equal(t, []int{2}, chargeRepeats([][]int{{0}, {0}, {0}}, 2))
	require.Empty(t, chargeRepeats([][]int{{0, 1}, {1}, {0}, {0, 1}}, 2), "four repeats, four slots")
	require.Equal(t, []int{4}, chargeRepeats([][]int{{0, 1}, {1}, {0}, {0, 1}, {1}}, 2))
}
