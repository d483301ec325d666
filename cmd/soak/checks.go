package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// querier is the part of a pool or connection the checks use.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Invariant is one property the soak checks after quiescence. Check returns
// one breach per violation (none when the invariant held) or an error when
// it could not look.
type Invariant struct {
	Name        string
	Description string
	Check       func(ctx context.Context, db querier, ev *Evidence) ([]Breach, error)
}

// Breach is one violation of an invariant: a line for the report and, when
// the violation happened at a moment the harness can name (a write, a call,
// an answer), that moment, by which the report attributes it to the faults
// injected just before. A breach of the run as a whole (a count that does
// not add up) has a zero At.
type Breach struct {
	At   time.Time
	Text string
}

// breachf formats a breach that happened at at (zero: not at one moment).
func breachf(at time.Time, format string, args ...any) Breach {
	return Breach{At: at, Text: fmt.Sprintf(format, args...)}
}

// Invariants are the soak's checks, in the order the table prints them.
var Invariants = []Invariant{
	{"requests-finished", "every request DONE or FAILED with a message", checkRequestsFinished},
	{"river-agrees", "no River job live under an ended request, no QUEUED request whose River job ended", checkRiverAgrees},
	{"no-overlap", "no two executions of one job overlapped in time", checkNoOverlap},
	{"writes-owned", "no write landed in an execution that was not running under its owner", checkWritesOwned},
	{"no-call-after-commit", "no provider call repeated for an item its instance had committed", checkNoCallAfterCommit},
	{"repeats-bounded", "no fault made an execution pay again for more than 2 × FANOUT answers it had been given", checkRepeatsBounded},
	{"upstream-calls-seen", "the proxy saw every provider call the fake upstream counted", checkUpstreamCallsSeen},
	{"accounting", "checkpoints and COMPLETED executions: targets = written + skipped + failed, domain rows agree", checkAccounting},
	{"completed-whole", "no execution COMPLETED with a planned chunk missing (chunks_total > its instance's checkpoints)", checkCompletedWhole},
	{"accepted-kept", "every request answered 202 is in the database", checkAcceptedKept},
	{"cap-ledger", "the daily-cap ledger counts at least every call made, per provider", checkCapLedger},
	{"stop-bounded", "every operator stop ended STOPPED (operator) within STOP_TIMEOUT + 5 s, never FAILED", checkStopBounded},
	{"demoted-untouched", "no row written on a demoted primary while it answered read-write beside the promoted one (split brain)", checkDemotedUntouched},
	{"failovers-counted", "every process counted each failover it lived through; lost commits were counted", checkFailoversCounted},
	{"no-live-abandoned", "no execution of a live worker was ABANDONED", checkNoLiveAbandoned},
	{"counters", "counters equal the events the harness caused (api requests, each live worker's executions and items)", checkCounters},
	{"no-500", "no API answer was a 500 (or another 5xx than 503)", checkNo500},
	{"api-answers-in-time", "every API call answered within the client timeout", checkAnswersInTime},
	{"invalid-4xx", "every invalid request got a 4xx", checkInvalid4xx},
}

// runningStatuses are the execution statuses of a run in progress.
var runningStatuses = []string{"STARTING", "STARTED", "STOPPING"}

func isRunning(status string) bool { return slices.Contains(runningStatuses, status) }

func checkRequestsFinished(ctx context.Context, db querier, _ *Evidence) ([]Breach, error) {
	rows, err := db.Query(ctx, `SELECT id, job, status, message FROM job_request
		WHERE status NOT IN ('DONE', 'FAILED') OR btrim(message) = '' ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var out []Breach
	var (
		id                   int64
		job, status, message string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &job, &status, &message}, func() error {
		out = append(out, breachf(time.Time{}, "request %d (%s) is %s, message %q", id, job, status, message))
		return nil
	})
	return out, err
}

// checkRiverAgrees holds every request and the River job that delivered it
// to agreeing about work still to do: no River job still live (available,
// pending, running, retryable, scheduled) under an ended request, and no
// QUEUED request whose River job ended or is gone. A River job River was
// handing to a worker that died before the claim is the one exception:
// River's public API can only mark it (cancel_attempted_at).
func checkRiverAgrees(ctx context.Context, db querier, _ *Evidence) ([]Breach, error) {
	rows, err := db.Query(ctx, `
		SELECT r.id, r.status, coalesce(j.state::text, 'gone') FROM job_request r LEFT JOIN river_job j ON j.id = r.river_job_id
		WHERE r.river_job_id IS NOT NULL AND (
		    (r.status IN ('DONE', 'FAILED') AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
		     AND NOT (j.state = 'running' AND j.metadata ? 'cancel_attempted_at'))
		 OR (r.status = 'QUEUED' AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))))
		ORDER BY r.id`)
	if err != nil {
		return nil, err
	}
	var out []Breach
	var (
		id            int64
		status, state string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &state}, func() error {
		out = append(out, breachf(time.Time{}, "request %d is %s but its River job is %s", id, status, state))
		return nil
	})
	return out, err
}

// checkDemotedUntouched holds every split brain the soak made to no row
// written on the demoted primary while it answered read-write.
func checkDemotedUntouched(_ context.Context, _ querier, ev *Evidence) ([]Breach, error) {
	var out []Breach
	for _, sb := range ev.SplitBrains {
		switch {
		case sb.Err != "":
			out = append(out, breachf(sb.Start, "split brain at %s: the rows written on the demoted primary could not be counted: %s", sb.Start.Format(time.RFC3339), sb.Err))
		case sb.Rows > 0:
			out = append(out, breachf(sb.Start, "split brain at %s: %d rows written on the demoted primary", sb.Start.Format(time.RFC3339), sb.Rows))
		}
	}
	return out, nil
}

// window is the span of one execution as the audit saw it: from its insert
// to the last write that touched it (its end, or a write after its end).
type window struct {
	execution, instance int64
	job, worker         string
	first, last         time.Time
}

func loadWindows(ctx context.Context, db querier) ([]window, error) {
	rows, err := db.Query(ctx, `SELECT execution_id, max(instance_id), job, max(exec_worker), min(at), max(at)
		FROM soak_audit GROUP BY execution_id, job ORDER BY execution_id`)
	if err != nil {
		return nil, err
	}
	var out []window
	var w window
	_, err = pgx.ForEachRow(rows, []any{&w.execution, &w.instance, &w.job, &w.worker, &w.first, &w.last}, func() error {
		out = append(out, w)
		return nil
	})
	return out, err
}

func checkNoOverlap(ctx context.Context, db querier, _ *Evidence) ([]Breach, error) {
	var out []Breach
	rows, err := db.Query(ctx, `SELECT e.id, e.job FROM job_execution e
		WHERE NOT EXISTS (SELECT 1 FROM soak_audit a WHERE a.execution_id = e.id) ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	var (
		id  int64
		job string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &job}, func() error {
		out = append(out, breachf(time.Time{}, "execution %d (%s) has no audit rows: its span cannot be checked", id, job))
		return nil
	}); err != nil {
		return nil, err
	}
	windows, err := loadWindows(ctx, db)
	if err != nil {
		return nil, err
	}
	for i, a := range windows {
		for _, b := range windows[i+1:] {
			if a.job == b.job && a.first.Before(b.last) && b.first.Before(a.last) {
				out = append(out, breachf(maxTime(a.first, b.first), "%s: execution %d (worker %s, %s..%s) and %d (worker %s, %s..%s) overlapped by %s",
					a.job, a.execution, a.worker, clock(a.first), clock(a.last), b.execution, b.worker, clock(b.first), clock(b.last),
					minTime(a.last, b.last).Sub(maxTime(a.first, b.first)).Round(time.Millisecond)))
			}
		}
	}
	return out, nil
}

// auditRow is one row of soak_audit.
type auditRow struct {
	at                   time.Time
	kind                 string
	execution            int64
	job, execWorker      string
	oldStatus, newStatus *string
	counters             bool
	chunk                *string
	writer               string
}

func loadAudit(ctx context.Context, db querier, where string) ([]auditRow, error) {
	rows, err := db.Query(ctx, `SELECT at, kind, execution_id, job, exec_worker, old_status, new_status, counters, chunk, writer
		FROM soak_audit WHERE `+where+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var out []auditRow
	var r auditRow
	_, err = pgx.ForEachRow(rows, []any{&r.at, &r.kind, &r.execution, &r.job, &r.execWorker, &r.oldStatus, &r.newStatus, &r.counters, &r.chunk, &r.writer}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// writerOwns reports whether the process whose connections carry writer is
// the execution owner workerID; known is false when the writer is no worker
// the harness started.
func writerOwns(ev *Evidence, writer, workerID string) (owns, known bool) {
	p := ev.workerByAppName(writer)
	if p == nil {
		return false, false
	}
	return p.WorkerID == workerID, true
}

func checkWritesOwned(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	rows, err := loadAudit(ctx, db, `(kind = 'update' AND counters) OR kind = 'checkpoint'`)
	if err != nil {
		return nil, err
	}
	var out []Breach
	for _, r := range rows {
		what := "figures changed"
		if r.kind == "checkpoint" {
			what = "checkpoint " + deref(r.chunk) + " committed"
		}
		status := deref(r.newStatus)
		if r.kind == "update" {
			status = deref(r.oldStatus)
		}
		if !isRunning(status) {
			out = append(out, breachf(r.at, "execution %d (%s): %s at %s while it was %s (by %s)", r.execution, r.job, what, clock(r.at), status, r.writer))
			continue
		}
		owns, known := writerOwns(ev, r.writer, r.execWorker)
		switch {
		case !known:
			out = append(out, breachf(r.at, "execution %d (%s): %s at %s by %q, not a worker process (owner %s)", r.execution, r.job, what, clock(r.at), r.writer, r.execWorker))
		case !owns:
			out = append(out, breachf(r.at, "execution %d (%s): %s at %s by %s, not its owner %s", r.execution, r.job, what, clock(r.at), r.writer, r.execWorker))
		}
	}
	return out, nil
}

// endpointJob maps each provider endpoint to the job that calls it and the
// function that tells whether a chunk key covers a call. corpCode (one
// download per run, not per item) has no items to repeat.
var endpointJob = map[string]struct {
	job    string
	covers func(chunk string, params map[string]string) bool
}{
	"aptTrade":       {"aptTrade", func(c string, p map[string]string) bool { return c == p["LAWD_CD"]+":"+p["DEAL_YMD"] }},
	"filingList":     {"filingParse", func(c string, p map[string]string) bool { return c == p["corp_code"] }},
	"stockPrice":     {"stockPrice", func(c string, p map[string]string) bool { return inRange(c, p["likeSrtnCd"]) }},
	"creditLookup":   {"creditEval", func(c string, p map[string]string) bool { return inRange(c, p["corpCode"]) }},
	"creditFallback": {"creditEval", func(c string, p map[string]string) bool { return inRange(c, p["corpCode"]) }},
}

// inRange reports whether key lies in the chunk range "FIRST-LAST".
func inRange(chunk, key string) bool {
	first, last, ok := strings.Cut(chunk, "-")
	return ok && key != "" && first <= key && key <= last
}

// commit is one committed checkpoint as the audit saw it.
type commit struct {
	at    time.Time
	chunk string
}

// callInstances attributes each provider call to the instances of its job
// that were running when it was made: those with an execution whose window
// holds the call, else the one with the job's latest execution begun before
// it (a zombie run calling after its last write). It also returns every
// instance's commits. Calls of endpoints without items get no instance.
func callInstances(ctx context.Context, db querier, calls []UpstreamCall) ([][]int64, map[int64][]commit, error) {
	windows, err := loadWindows(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	byJob := map[string][]window{}
	instanceOf := map[int64]int64{}
	for _, w := range windows {
		byJob[w.job] = append(byJob[w.job], w)
		instanceOf[w.execution] = w.instance
	}
	rows, err := loadAudit(ctx, db, `kind = 'checkpoint'`)
	if err != nil {
		return nil, nil, err
	}
	commits := map[int64][]commit{}
	for _, c := range rows {
		inst := instanceOf[c.execution]
		commits[inst] = append(commits[inst], commit{c.at, deref(c.chunk)})
	}
	out := make([][]int64, len(calls))
	for i, call := range calls {
		ep, ok := endpointJob[call.Endpoint]
		if !ok {
			continue
		}
		var latest *window
		for j, w := range byJob[ep.job] {
			if !w.first.After(call.At) {
				latest = &byJob[ep.job][j]
				if !w.last.Before(call.At) && !slices.Contains(out[i], w.instance) {
					out[i] = append(out[i], w.instance)
				}
			}
		}
		if len(out[i]) == 0 && latest != nil {
			out[i] = append(out[i], latest.instance)
		}
	}
	return out, commits, nil
}

func checkNoCallAfterCommit(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	instances, commits, err := callInstances(ctx, db, ev.Calls)
	if err != nil {
		return nil, err
	}
	var out []Breach
	for i, call := range ev.Calls {
		ep := endpointJob[call.Endpoint]
		// When executions of several instances overlapped (itself a
		// breach), the call may be any of theirs: it is a repeat only if
		// every one of them had committed the item.
		var first Breach
		repeat := len(instances[i]) > 0
		for _, inst := range instances[i] {
			found := false
			for _, c := range commits[inst] {
				if c.at.Before(call.At) && ep.covers(c.chunk, call.Params) {
					found = true
					if first.Text == "" {
						first = breachf(call.At, "%s %s at %s: instance %d had committed it in chunk %s at %s",
							call.Endpoint, sortedParams(call.Params), clock(call.At), inst, c.chunk, clock(c.at))
					}
					break
				}
			}
			repeat = repeat && found
		}
		if repeat {
			out = append(out, first)
		}
	}
	return out, nil
}

func checkUpstreamCallsSeen(_ context.Context, _ querier, ev *Evidence) ([]Breach, error) {
	if ev.FakeTotal < 0 {
		return []Breach{breachf(time.Time{}, "could not read the fake upstream's stats")}, nil
	}
	if n := int64(len(ev.Calls)); n != ev.FakeTotal {
		return []Breach{breachf(time.Time{}, "the fake upstream counted %d provider calls, the proxy forwarded %d", ev.FakeTotal, n)}, nil
	}
	return nil, nil
}

// checkAccounting reads the committed results as the runner writes them:
// whole chunks (job_checkpoint) and the items of a fan-out chunk committed
// in parts before the chunk ended (job_checkpoint_part, each item a target
// written). A chunk's commit folds its parts into its checkpoint, also the
// parts an earlier execution of the instance committed, so written items
// are compared per instance (the sum of its executions' written counts);
// skipped and failed items are only ever in the execution's own
// checkpoints.
func checkAccounting(ctx context.Context, db querier, _ *Evidence) ([]Breach, error) {
	var out []Breach
	rows, err := db.Query(ctx, `SELECT c.instance_id, c.chunk, c.execution_id, c.targets, c.written, c.skipped, c.failed
		FROM job_checkpoint c WHERE c.targets <> c.written + c.skipped + c.failed ORDER BY c.instance_id, c.chunk`)
	if err != nil {
		return nil, err
	}
	var (
		inst, exec                        int64
		chunk                             string
		targets, written, skipped, failed int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&inst, &chunk, &exec, &targets, &written, &skipped, &failed}, func() error {
		out = append(out, breachf(time.Time{}, "instance %d chunk %s (execution %d): targets %d, written %d + skipped %d + failed %d",
			inst, chunk, exec, targets, written, skipped, failed))
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, `
		SELECT e.id, e.job, e.targets, e.domain_rows,
		       e.items_written, e.items_skipped, e.items_failed,
		       coalesce(mine.written, 0), coalesce(mine.skipped, 0), coalesce(mine.failed, 0),
		       coalesce(inst.written, 0), coalesce(inst.skipped, 0), coalesce(inst.failed, 0),
		       (SELECT coalesce(sum(ie.items_written), 0) FROM job_execution ie WHERE ie.instance_id = e.instance_id)
		FROM job_execution e
		LEFT JOIN LATERAL (SELECT sum(written) AS written, sum(skipped) AS skipped, sum(failed) AS failed FROM (
		                       SELECT c.written, c.skipped, c.failed FROM job_checkpoint c WHERE c.execution_id = e.id) x) mine ON true
		LEFT JOIN LATERAL (SELECT sum(written) AS written, sum(skipped) AS skipped, sum(failed) AS failed FROM (
		                       SELECT c.written, c.skipped, c.failed FROM job_checkpoint c WHERE c.instance_id = e.instance_id
		                       UNION ALL
		                       SELECT cardinality(p.items), 0, 0 FROM job_checkpoint_part p WHERE p.instance_id = e.instance_id) x) inst ON true
		WHERE e.status = 'COMPLETED' ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	var (
		id                          int64
		job                         string
		domainRows                  *int64
		eWritten, eSkipped, eFailed int64
		mWritten, mSkipped, mFailed int64
		iWritten, iSkipped, iFailed int64
		instanceWritten             int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &job, &targets, &domainRows, &eWritten, &eSkipped, &eFailed,
		&mWritten, &mSkipped, &mFailed, &iWritten, &iSkipped, &iFailed, &instanceWritten}, func() error {
		if accounted := iWritten + iSkipped + iFailed; targets != accounted {
			out = append(out, breachf(time.Time{}, "execution %d (%s) COMPLETED with targets %d, its instance's checkpoints account for %d (written %d, skipped %d, failed %d)",
				id, job, targets, accounted, iWritten, iSkipped, iFailed))
		}
		if eSkipped != mSkipped || eFailed != mFailed {
			out = append(out, breachf(time.Time{}, "execution %d (%s): its figures (skipped %d, failed %d) differ from its own checkpoints (%d, %d)",
				id, job, eSkipped, eFailed, mSkipped, mFailed))
		}
		if instanceWritten != iWritten {
			out = append(out, breachf(time.Time{}, "execution %d (%s): its instance's executions wrote %d items, its instance's checkpoints hold %d",
				id, job, instanceWritten, iWritten))
		}
		if domainRows != nil && !domainRowsNotItems[job] && *domainRows != iWritten {
			out = append(out, breachf(time.Time{}, "execution %d (%s): %d domain rows, its instance's checkpoints wrote %d", id, job, *domainRows, iWritten))
		}
		return nil
	})
	return out, err
}

// domainRowsNotItems are the jobs whose domain rows are not their written
// items: rules writes alerts (any number, none included) for the companies
// it evaluates.
var domainRowsNotItems = map[string]bool{"rules": true}

func checkNoLiveAbandoned(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	rows, err := loadAudit(ctx, db, `kind = 'update' AND new_status = 'ABANDONED' AND old_status IS DISTINCT FROM 'ABANDONED'`)
	if err != nil {
		return nil, err
	}
	var out []Breach
	for _, r := range rows {
		p := ev.workerByID(r.execWorker)
		switch {
		case p == nil:
			out = append(out, breachf(r.at, "execution %d (%s) ABANDONED at %s: its worker %s is no process the harness started", r.execution, r.job, clock(r.at), r.execWorker))
		case p.aliveAt(r.at) && !ev.cutOffAt(r.at) && !p.cutOffAt(r.at, ev.StaleAfter):
			out = append(out, breachf(r.at, "execution %d (%s) ABANDONED at %s by %s while its worker %s (%s) was alive", r.execution, r.job, clock(r.at), r.writer, p.AppName, r.execWorker))
		}
	}
	return out, nil
}

// Metric names the counters check reads (the contract's).
const (
	metricRequests   = "buildrisk_requests_total"
	metricExecutions = "buildrisk_executions_total"
	metricItems      = "buildrisk_items_total"
)

func checkCounters(ctx context.Context, db querier, ev *Evidence) ([]Breach, error) {
	var out []Breach
	// The api: requests by result, against the answers the load got.
	var accepted, duplicate, invalid, unknown int
	for _, a := range ev.Answers {
		// Requests to run a job, the harness's own (the seeding) included;
		// not its other calls (a stop also answers 202).
		isRequest := a.Method == http.MethodPost && strings.HasSuffix(a.Path, "/requests")
		switch {
		case !isRequest:
		case a.Kind == KindInvalid:
			invalid++
		case a.Status == 202:
			accepted++
		case a.Status == 409:
			duplicate++
		case a.Status == 0 || a.Status >= 500:
			unknown++ // may or may not have been enqueued
		}
	}
	if ev.APIMetrics == nil {
		out = append(out, breachf(time.Time{}, "the api's /metrics could not be read"))
	} else {
		for _, c := range []struct {
			result string
			want   int
			slack  int
		}{{"accepted", accepted, unknown}, {"duplicate", duplicate, unknown}, {"invalid", invalid, 0}} {
			got := int(ev.APIMetrics.Sum(metricRequests, map[string]string{"source": "api", "result": c.result}))
			if got < c.want || got > c.want+c.slack {
				want := fmt.Sprint(c.want)
				if c.slack > 0 {
					want = fmt.Sprintf("%d..%d", c.want, c.want+c.slack)
				}
				out = append(out, breachf(time.Time{}, "%s{source=api,result=%s} = %d, the load got %s", metricRequests, c.result, got, want))
			}
		}
	}
	// Each live worker: executions it ended and items it committed.
	names := make([]string, 0, len(ev.WorkerMetrics))
	for name := range ev.WorkerMetrics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := ev.WorkerMetrics[name]
		ended, err := countByStatus(ctx, db, name)
		if err != nil {
			return nil, err
		}
		for _, status := range []string{"COMPLETED", "FAILED", "STOPPED"} {
			got := int64(m.Sum(metricExecutions, map[string]string{"status": status}))
			if got > ended[status] && ev.asyncFailovers() {
				continue // an end the asynchronous standby never had (failovers-counted)
			}
			if got != ended[status] {
				out = append(out, breachf(time.Time{}, "%s: %s{status=%s} = %d, the database shows %d executions it ended so", name, metricExecutions, status, got, ended[status]))
			}
		}
		p := ev.workerByAppName(name)
		if p == nil || p.WorkerID == "" {
			out = append(out, breachf(time.Time{}, "%s: no worker id known for its metrics", name))
			continue
		}
		items, err := itemsCommitted(ctx, db, p.WorkerID)
		if err != nil {
			return nil, err
		}
		for _, outcome := range []string{"written", "skipped", "failed"} {
			got := int64(m.Sum(metricItems, map[string]string{"outcome": outcome}))
			if got > items[outcome] && ev.asyncFailovers() {
				continue // items the asynchronous standby never had (failovers-counted)
			}
			if got != items[outcome] {
				out = append(out, breachf(time.Time{}, "%s: %s{outcome=%s} = %d, its executions hold %d", name, metricItems, outcome, got, items[outcome]))
			}
		}
	}
	return out, nil
}

// countByStatus counts the executions the process writer ended, by status.
func countByStatus(ctx context.Context, db querier, writer string) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT new_status, count(*) FROM soak_audit
		WHERE kind = 'update' AND writer = $1 AND old_status IN ('STARTING', 'STARTED', 'STOPPING')
		  AND new_status IN ('COMPLETED', 'FAILED', 'STOPPED')
		GROUP BY new_status`, writer)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var (
		status string
		n      int64
	)
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error { out[status] = n; return nil })
	return out, err
}

// itemsCommitted sums the item figures of the executions the worker ran:
// every figure of a run is written by its own worker only (each write is
// fenced on the owner), when it commits whole chunks, parts of a fan-out
// chunk, or the failed items of a chunk over its tolerance, which is when
// the worker counts them.
func itemsCommitted(ctx context.Context, db querier, workerID string) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT coalesce(sum(items_written), 0), coalesce(sum(items_skipped), 0), coalesce(sum(items_failed), 0)
		FROM job_execution WHERE worker_id = $1`, workerID)
	if err != nil {
		return nil, err
	}
	var w, s, f int64
	_, err = pgx.ForEachRow(rows, []any{&w, &s, &f}, func() error { return nil })
	return map[string]int64{"written": w, "skipped": s, "failed": f}, err
}

func checkNo500(_ context.Context, _ querier, ev *Evidence) ([]Breach, error) {
	var out []Breach
	for _, a := range ev.Answers {
		if a.Status >= 500 && a.Status != 503 {
			out = append(out, breachf(a.At, "%s %s at %s: %d %s", a.Method, a.Path, clock(a.At), a.Status, a.Body))
		}
	}
	return out, nil
}

func checkAnswersInTime(_ context.Context, _ querier, ev *Evidence) ([]Breach, error) {
	var out []Breach
	for _, a := range ev.Answers {
		if a.Status == 0 {
			out = append(out, breachf(a.At, "%s %s at %s: no answer after %s (%s)", a.Method, a.Path, clock(a.At), a.Latency.Round(time.Millisecond), a.Err))
		}
	}
	return out, nil
}

func checkInvalid4xx(_ context.Context, _ querier, ev *Evidence) ([]Breach, error) {
	var out []Breach
	for _, a := range ev.Answers {
		if a.Kind == KindInvalid && (a.Status < 400 || a.Status > 499) {
			out = append(out, breachf(a.At, "%s %s at %s: invalid request answered %d %s", a.Method, a.Path, clock(a.At), a.Status, a.Body))
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// clock renders t as a time of day with milliseconds, enough to line up a
// breach with the logs of one run.
func clock(t time.Time) string { return t.Format("15:04:05.000") }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sortedParams(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, "&")
}
