package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The invariants of bounds and losses: what a fault may cost a run (paid
// calls repeated, the time a stop takes) and what the database may lose
// (a planned chunk of a COMPLETED run, an accepted request, calls the cap
// ledger did not count), with the failovers each process must have seen.

// Metric names these checks read (the contract's).
const (
	metricFailovers   = "buildrisk_database_failovers_total"
	metricCommitsLost = "buildrisk_commits_lost_total"
)

// paidRepeat is a provider call that repeated a call whose answer its
// instance had already been given whole: a paid answer thrown away.
type paidRepeat struct {
	call     int // index into the calls
	instance int64
	at       time.Time
}

// paidRepeats returns the successful provider calls (200, body whole) that
// repeated a call, same endpoint and parameters, whose answer the same
// instance had already been given whole, in the order the calls were made.
// A call attributed to no single instance is not counted. An answer given
// while a fault spoiled answers (Fault.Spoils: garbage, a short page, an
// empty grade) is not one the run could use: the call after it is a retry,
// not a repeat.
func paidRepeats(ctx context.Context, db querier, calls []UpstreamCall, events []FaultEvent) ([]paidRepeat, error) {
	instances, _, err := callInstances(ctx, db, calls)
	if err != nil {
		return nil, err
	}
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return calls[order[a]].At.Before(calls[order[b]].At) })
	seen := map[string]bool{}
	var out []paidRepeat
	for _, i := range order {
		call := calls[i]
		if call.Status != 200 || call.BodyBroken || len(instances[i]) != 1 {
			continue
		}
		key := fmt.Sprintf("%d %s?%s", instances[i][0], call.Endpoint, sortedParams(call.Params))
		if seen[key] {
			out = append(out, paidRepeat{call: i, instance: instances[i][0], at: call.At})
		}
		if !spoiledAt(events, call.At) {
			seen[key] = true
		}
	}
	return out, nil
}

// spoiledAt reports whether a fault that spoils answers was under way at t.
func spoiledAt(events []FaultEvent, t time.Time) bool {
	for _, e := range events {
		if f := faultNamed(e.Name); f != nil && f.Spoils && !t.Before(e.Start) && !t.After(e.End) {
			return true
		}
	}
	return false
}

// faultNamed returns the fault of that name, nil for none.
func faultNamed(name string) *Fault {
	for i := range faults {
		if faults[i].Name == name {
			return &faults[i]
		}
	}
	return nil
}

// repeatBound is the documented bound on the paid calls one fault may make
// one execution repeat: 2 × FANOUT, the calls a run may have in hand
// uncommitted (docs/architecture.md).
func (e *Evidence) repeatBound() int { return 2 * max(e.FanOut, 1) }

// repeatKey is one instance under one fault injection (-1: before any).
type repeatKey struct {
	instance int64
	event    int
}

// repeatsByInjection counts the paid repeats of each instance put down to
// each fault injection (the latest of each stream begun before the repeat,
// as the per-fault table reads time), and keeps the moment of each.
func repeatsByInjection(reps []paidRepeat, events []FaultEvent) map[repeatKey][]time.Time {
	out := map[repeatKey][]time.Time{}
	for _, r := range reps {
		latest := latestEvents(events, r.at)
		if len(latest) == 0 {
			latest = []int{-1}
		}
		for _, e := range latest {
			k := repeatKey{r.instance, e}
			out[k] = append(out[k], r.at)
		}
	}
	return out
}

// checkRepeatsBounded checks that no fault made an execution pay for more
// answers again than the documented bound, 2 × FANOUT: the answers a run
// held uncommitted when the fault hit. A lock on job_execution, a stalled
// commit, a failover, a kill: each may cost what was in flight, never the
// same items over and over. A repeat is put down to the fault injections
// it followed (as the per-fault table does: the latest of each stream, so
// up to two), and it is charged to one of them: an instance breaches when
// no way of charging its repeats keeps every injection within the bound.
// So a kill and a SIGSTOP that each cost a run ten answers during one
// upstream fault are two faults within their bound, not one past it.
func checkRepeatsBounded(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	reps, err := paidRepeats(ctx, db, ev.Calls, ev.Faults)
	if err != nil {
		return nil, err
	}
	bound := ev.repeatBound()
	byInstance := map[int64][]paidRepeat{}
	var instances []int64
	for _, r := range reps {
		if _, ok := byInstance[r.instance]; !ok {
			instances = append(instances, r.instance)
		}
		byInstance[r.instance] = append(byInstance[r.instance], r)
	}
	slices.Sort(instances)
	var out []Breach
	for _, inst := range instances {
		list := byInstance[inst]
		candidates := make([][]int, len(list))
		involved := map[int]bool{}
		for i, r := range list {
			candidates[i] = latestEvents(ev.Faults, r.at)
			if len(candidates[i]) == 0 {
				candidates[i] = []int{-1} // before any fault
			}
			for _, e := range candidates[i] {
				involved[e] = true
			}
		}
		unexplained := chargeRepeats(candidates, bound)
		if len(unexplained) == 0 {
			continue
		}
		var names []string
		for _, e := range sortedInts(involved) {
			if e < 0 {
				names = append(names, "no fault")
				continue
			}
			f := ev.Faults[e]
			names = append(names, fmt.Sprintf("%s (injected %s..%s)", f.Name, clock(f.Start), clock(f.End)))
		}
		out = append(out, breachf(list[unexplained[0]].at, "instance %d paid for %d answers again, %s..%s, after %s: %d more than 2 × FANOUT = %d per fault",
			inst, len(list), clock(list[0].at), clock(list[len(list)-1].at), strings.Join(names, ", "), len(unexplained), bound))
	}
	return out, nil
}

// chargeRepeats charges each repeat to one of its candidate injections,
// at most bound per injection, as many as can be (a bipartite matching of
// repeats to the injections' bound slots, by augmenting paths), and
// returns the repeats left uncharged, in order.
func chargeRepeats(candidates [][]int, bound int) []int {
	load := map[int][]int{} // injection → the repeats charged to it
	var try func(r int, seen map[int]bool) bool
	try = func(r int, seen map[int]bool) bool {
		for _, e := range candidates[r] {
			if seen[e] {
				continue
			}
			seen[e] = true
			if len(load[e]) < bound {
				load[e] = append(load[e], r)
				return true
			}
			// Move one of e's repeats to another of its injections.
			for i, other := range load[e] {
				if try(other, seen) {
					load[e][i] = r
					return true
				}
			}
		}
		return false
	}
	var left []int
	for r := range candidates {
		if !try(r, map[int]bool{}) {
			left = append(left, r)
		}
	}
	return left
}

func sortedInts(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// repeatFigures summarises the paid repeats per fault kind for the report:
// the repeats put down to each kind and the worst of one instance under
// one injection, against the bound.
func repeatFigures(reps []paidRepeat, events []FaultEvent, bound int) string {
	total := map[string]int{}
	worst := map[string]int{}
	for k, ats := range repeatsByInjection(reps, events) {
		name := beforeAnyFault
		if k.event >= 0 {
			name = events[k.event].Name
		}
		total[name] += len(ats)
		worst[name] = max(worst[name], len(ats))
	}
	if len(total) == 0 {
		return fmt.Sprintf("paid calls repeated per fault: none (bound 2 × FANOUT = %d per execution and fault)", bound)
	}
	names := make([]string, 0, len(total))
	for name := range total {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %d (worst %d)", name, total[name], worst[name])
	}
	return fmt.Sprintf("paid calls repeated per fault (worst: one instance under one injection; bound %d): %s", bound, strings.Join(parts, ", "))
}

// checkStopBounded checks how each operator stop the soak made ended: a
// stop is bounded like a drain, so the stopped execution ends within
// BUILDRISK_STOP_TIMEOUT (and stopMargin to notice the stop and record the
// end) of the api's 202, STOPPED with cause operator (or COMPLETED, when
// its last chunk committed meanwhile), and never FAILED because of it,
// however slow the provider. A process or database fault that hit the run
// while it stopped (a kill, an outage, a lock) excuses an end that is late
// or has another cause (drain, database, a reap), not a FAILED one.
func checkStopBounded(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	bound := ev.StopTimeout + stopMargin
	var out []Breach
	for _, stop := range ev.Stops {
		rows, err := db.Query(ctx, `SELECT status, stop_cause, exit_message, ended_at FROM job_execution WHERE id = $1`, stop.ExecutionID)
		if err != nil {
			return nil, err
		}
		var (
			status, cause, message string
			ended                  *time.Time
			found                  bool
		)
		if _, err := pgx.ForEachRow(rows, []any{&status, &cause, &message, &ended}, func() error { found = true; return nil }); err != nil {
			return nil, err
		}
		what := fmt.Sprintf("execution %d (%s) stopped at %s (%s)", stop.ExecutionID, stop.Job, clock(stop.At), stop.Fault)
		if !found {
			if !ev.asyncFailovers() {
				out = append(out, breachf(stop.At, "%s is not in the database", what))
			}
			continue
		}
		excused := interfered(ev.Faults, stop, bound)
		switch {
		case status == "FAILED":
			out = append(out, breachf(stop.At, "%s ended FAILED: %s", what, message))
			continue
		case isRunning(status) || ended == nil:
			out = append(out, breachf(stop.At, "%s is still %s", what, status))
			continue
		case status == "STOPPED" && cause == "operator", status == "COMPLETED":
		case !excused:
			out = append(out, breachf(stop.At, "%s ended %s (cause %q), not STOPPED by the operator: %s", what, status, cause, message))
			continue
		}
		if took := ended.Sub(stop.At); took > bound && !excused {
			out = append(out, breachf(stop.At, "%s ended %s %s after the stop, past the stop timeout %s + %s", what, status, took.Round(time.Millisecond), ev.StopTimeout, stopMargin))
		}
	}
	return out, nil
}

// interfered reports whether a process or database fault (the first
// stream's) other than the stop's own injection overlapped the stop's
// bound: a worker killed or cut off, the database down or locked, which
// the stop's bound does not cover.
func interfered(events []FaultEvent, stop StopEvent, bound time.Duration) bool {
	end := stop.At.Add(bound)
	for _, e := range events {
		if e.Stream != 0 || e.Start.After(end) || e.End.Before(stop.At) {
			continue
		}
		if e.Name == stop.Fault && !e.Start.After(stop.At) && !e.End.Before(stop.At) {
			continue // the stop's own injection (api-stop)
		}
		return true
	}
	return false
}

// checkCompletedWhole checks that no execution ended COMPLETED with a
// planned chunk missing: its plan's chunk count (chunks_total, recorded
// when the run started) is never more than the checkpoints its instance
// holds. A commit the database acknowledged and then lost (a failover to
// an asynchronous standby) must be found and done again before a run
// reads as success.
func checkCompletedWhole(ctx context.Context, db querier, _ *Evidence) ([]Breach, error) {
	rows, err := db.Query(ctx, `SELECT e.id, e.job, e.chunks_total, count(c.chunk), e.exit_message
		FROM job_execution e LEFT JOIN job_checkpoint c ON c.instance_id = e.instance_id
		WHERE e.status = 'COMPLETED'
		GROUP BY e.id HAVING e.chunks_total > count(c.chunk) ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	var out []Breach
	var (
		id           int64
		job, message string
		planned      int32
		held         int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &job, &planned, &held, &message}, func() error {
		out = append(out, breachf(time.Time{}, "execution %d (%s) COMPLETED with %d planned chunks, its instance holds %d checkpoints: %s", id, job, planned, held, message))
		return nil
	})
	return out, err
}

// lossWindow is how long before a failover to an asynchronous standby a
// request answered 202 may be lost with the primary: the standby's lag on
// a loaded machine, generously.
const lossWindow = 30 * time.Second

// lostAccepted returns the requests answered 202 that the database does
// not hold, and which of them an asynchronous failover may have taken
// (accepted within lossWindow before one).
func lostAccepted(ctx context.Context, db querier, ev *Evidence) (lost []Answer, excused []bool, err error) {
	var ids []int64
	byID := map[int64]Answer{}
	for _, a := range ev.Answers {
		if a.RequestID == "" {
			continue
		}
		id, err := strconv.ParseInt(a.RequestID, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("request id %q of a 202: %w", a.RequestID, err)
		}
		ids = append(ids, id)
		byID[id] = a
	}
	rows, err := db.Query(ctx, `SELECT id FROM unnest($1::bigint[]) AS t(id) WHERE NOT EXISTS (SELECT 1 FROM job_request r WHERE r.id = t.id) ORDER BY id`, ids)
	if err != nil {
		return nil, nil, err
	}
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		a := byID[id]
		lost = append(lost, a)
		excused = append(excused, ev.Replication == replicationAsync && afterFailover(ev.Failovers, a.At, lossWindow))
		return nil
	})
	return lost, excused, err
}

// afterFailover reports whether t lies within window before the kill of a
// failover (or during it).
func afterFailover(failovers []FailoverEvent, t time.Time, window time.Duration) bool {
	for _, f := range failovers {
		if !t.Before(f.Start.Add(-window)) && !t.After(f.Promoted) {
			return true
		}
	}
	return false
}

// checkAcceptedKept checks that every request the api answered 202 is in
// the database at the end: an accepted request is never lost, a failover
// to a synchronous standby included. After a failover to an asynchronous
// standby, the requests accepted just before it may be gone with the
// primary: those are reported in the figures, not breaches.
func checkAcceptedKept(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	lost, excused, err := lostAccepted(ctx, db, ev)
	if err != nil {
		return nil, err
	}
	var out []Breach
	for i, a := range lost {
		if !excused[i] {
			out = append(out, breachf(a.At, "request %s (%s) answered 202 at %s is not in the database", a.RequestID, a.Job, clock(a.At)))
		}
	}
	return out, nil
}

// endpointProvider maps each provider endpoint to the provider whose daily
// cap it spends.
var endpointProvider = map[string]string{
	"aptTrade": "MOLIT", "corpCode": "DART", "filingList": "DART", "stockPrice": "KRX",
	"creditLookup": "CREDIT", "creditFallback": "CREDIT",
}

// capLedger returns, per provider, the calls the daily-cap ledger holds as
// spent or possibly made (provider_call_budget.calls_used less what open
// leases have not claimed, summed over the days) and the calls the proxy
// forwarded.
func capLedger(ctx context.Context, db querier, calls []UpstreamCall) (ledger, made map[string]int64, err error) {
	rows, err := db.Query(ctx, `SELECT b.provider, sum(b.calls_used - coalesce((SELECT sum(l.granted - l.claimed) FROM provider_call_lease l
			WHERE l.provider = b.provider AND l.day = b.day), 0))::bigint
		FROM provider_call_budget b GROUP BY b.provider`)
	if err != nil {
		return nil, nil, err
	}
	ledger = map[string]int64{}
	var (
		provider string
		n        int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&provider, &n}, func() error { ledger[provider] = n; return nil }); err != nil {
		return nil, nil, err
	}
	made = map[string]int64{}
	for _, c := range calls {
		if p, ok := endpointProvider[c.Endpoint]; ok {
			made[p]++
		}
	}
	return ledger, made, nil
}

// checkCapLedger checks that the daily-cap ledger counts every call made:
// per provider, the ledger's spent calls are at least the calls the proxy
// forwarded, or a cap could be exceeded. It may count more (calls a killed
// worker had claimed and never made stay spent, by design). After a
// failover to an asynchronous standby the ledger may have lost leases
// with the primary: the shortfall is then reported, not a breach.
func checkCapLedger(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	ledger, made, err := capLedger(ctx, db, ev.Calls)
	if err != nil {
		return nil, err
	}
	if ev.asyncFailovers() {
		return nil, nil
	}
	var out []Breach
	for _, p := range sortedKeys(made) {
		if ledger[p] < made[p] {
			out = append(out, breachf(time.Time{}, "%s: the daily-cap ledger counts %d calls, %d were made", p, ledger[p], made[p]))
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// failoversLived counts the failovers a process started at started lived
// through with a probe of the database before each: started a couple of
// heartbeats before the kill.
func failoversLived(failovers []FailoverEvent, started time.Time) int {
	n := 0
	for _, f := range failovers {
		if started.Add(2 * time.Second).Before(f.Start) {
			n++
		}
	}
	return n
}

// checkFailoversCounted checks, when the run failed over, that every
// process alive at the end counted each failover it lived through
// (buildrisk_database_failovers_total), and, after a failover to an
// asynchronous standby, that lost work did not go unnoticed: a worker
// whose buildrisk_items_total{outcome=written} exceeds what its executions
// hold (items the database acknowledged and then lost) must have counted
// buildrisk_commits_lost_total.
func checkFailoversCounted(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	if len(ev.Failovers) == 0 {
		return nil, nil
	}
	var out []Breach
	if ev.APIMetrics != nil {
		want := failoversLived(ev.Failovers, ev.APIStarted)
		if got := int(ev.APIMetrics.Sum(metricFailovers, nil)); got != want {
			out = append(out, breachf(time.Time{}, "soak-api: %s = %d, it lived through %d failovers", metricFailovers, got, want))
		}
	}
	for _, name := range sortedKeys(ev.WorkerMetrics) {
		m := ev.WorkerMetrics[name]
		p := ev.workerByAppName(name)
		if p == nil {
			continue
		}
		want := failoversLived(ev.Failovers, p.Started)
		if got := int(m.Sum(metricFailovers, nil)); got != want {
			out = append(out, breachf(time.Time{}, "%s: %s = %d, it lived through %d failovers", name, metricFailovers, got, want))
		}
		if !ev.asyncFailovers() || p.WorkerID == "" {
			continue
		}
		items, err := itemsCommitted(ctx, db, p.WorkerID)
		if err != nil {
			return nil, err
		}
		excess := int64(m.Sum(metricItems, map[string]string{"outcome": "written"})) - items["written"]
		if lost := m.Sum(metricCommitsLost, nil); excess > 0 && lost == 0 {
			out = append(out, breachf(time.Time{}, "%s counted %d written items its executions do not hold, and %s = 0: the loss went unnoticed", name, excess, metricCommitsLost))
		}
	}
	return out, nil
}

// lossFigures are the report's lines on what the database lost and what
// the processes saw of it: accepted requests gone, the cap ledger against
// the calls made, the failovers and lost commits each process counted.
func lossFigures(ctx context.Context, db querier, ev *Evidence) []string {
	var out []string
	if lost, excused, err := lostAccepted(ctx, db, ev); err == nil && len(lost) > 0 {
		n := 0
		for _, e := range excused {
			if e {
				n++
			}
		}
		out = append(out, fmt.Sprintf("requests answered 202 and lost: %d (%d within %s before an asynchronous failover)", len(lost), n, lossWindow))
	}
	if ledger, made, err := capLedger(ctx, db, ev.Calls); err == nil {
		var parts []string
		for _, p := range sortedKeys(made) {
			parts = append(parts, fmt.Sprintf("%s %d for %d made", p, ledger[p], made[p]))
		}
		out = append(out, "daily-cap ledger: "+strings.Join(parts, ", "))
	}
	if len(ev.Failovers) > 0 || ev.Replication != replicationNone {
		var parts []string
		for _, f := range ev.Failovers {
			parts = append(parts, fmt.Sprintf("%s (promoted after %s)", clock(f.Start), f.Promoted.Sub(f.Start).Round(time.Millisecond)))
		}
		counted := []string{fmt.Sprintf("soak-api %d", int(ev.APIMetrics.Sum(metricFailovers, nil)))}
		var lost float64
		for _, name := range sortedKeys(ev.WorkerMetrics) {
			m := ev.WorkerMetrics[name]
			counted = append(counted, fmt.Sprintf("%s %d", name, int(m.Sum(metricFailovers, nil))))
			lost += m.Sum(metricCommitsLost, nil)
		}
		out = append(out, fmt.Sprintf("replication %s; failovers: %d %s; counted: %s; commits lost (live workers): %d",
			ev.Replication, len(ev.Failovers), strings.Join(parts, ", "), strings.Join(counted, ", "), int(lost)))
	}
	if len(ev.Stops) > 0 {
		var parts []string
		for _, s := range ev.Stops {
			var status, cause string
			var took *time.Duration
			rows, err := db.Query(ctx, `SELECT status, stop_cause, ended_at - $2::timestamptz FROM job_execution WHERE id = $1`, s.ExecutionID, s.At)
			if err == nil {
				_, _ = pgx.ForEachRow(rows, []any{&status, &cause, &took}, func() error { return nil })
			}
			end := status
			if cause != "" {
				end += " " + cause
			}
			if took != nil {
				end += " after " + took.Round(100*time.Millisecond).String()
			}
			parts = append(parts, fmt.Sprintf("%s %s: %s", s.Fault, s.Job, end))
		}
		out = append(out, "operator stops: "+strings.Join(parts, "; "))
	}
	return out
}
