// Package bulk writes volumes of history for the plan tests and the
// benchmarks: hundreds of thousands of rows in a few statements, by
// generate_series (no query of the service writes rows in bulk, and one
// factory call per row would take minutes). The shapes are the ones the
// service's plans must survive: years of one busy job beside quiet ones, a
// million coverage targets.
//
// Unlike its parent queries/testfactory it imports nothing of this module,
// so that package queries' own tests may use it. It is for _test.go files
// only.
package bulk

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs statements: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Jobs are the jobs the histories spread their rows over.
var Jobs = []string{"aptTrade", "corpCodeSync", "creditEval", "filingParse", "metrics", "rules", "stockPrice"}

// LiveWorker holds SkewedHistory's one live run.
const LiveWorker = "live@host#b"

func exec(ctx context.Context, tb testing.TB, db Execer, what, sql string) {
	tb.Helper()
	if _, err := db.Exec(ctx, sql); err != nil {
		tb.Fatalf("bulk: writing %s: %v", what, err)
	}
}

// History writes n runs spread evenly over Jobs: n/10 stopped workers
// (worker g beat g seconds ago), n requests (every tenth FAILED, the others
// DONE, request g held by worker 1+g%1000), n instances, n executions
// (execution g of instance g for request g, COMPLETED or FAILED with its
// request), one checkpoint per instance and n apt_trade rows, then a few
// live rows among them: request and execution n RUNNING and STARTED on
// worker live@host#b (registered now), requests 5 and n naming their
// executions, and a schedule of aptTrade missed every minute for n minutes.
func History(ctx context.Context, tb testing.TB, db Execer, n int) {
	tb.Helper()
	exec(ctx, tb, db, "history", fmt.Sprintf(`
INSERT INTO worker (id, hostname, pid, boot, started_at, heartbeat_at, status)
SELECT g || '@host#b', 'host', g, 'b', now() - make_interval(secs => g), now() - make_interval(secs => g), 'stopped'
FROM generate_series(1, %[1]d / 10) g;
INSERT INTO job_request (job, source, status, worker_id, created_at, claimed_at, finished_at)
SELECT (ARRAY['aptTrade','corpCodeSync','creditEval','filingParse','metrics','rules','stockPrice'])[1 + g %% 7], 'api',
       CASE WHEN g %% 10 = 0 THEN 'FAILED' ELSE 'DONE' END, (1 + g %% 1000) || '@host#b', now(), now(), now()
FROM generate_series(1, %[1]d) g;
INSERT INTO job_instance (job, params, params_hash)
SELECT (ARRAY['aptTrade','corpCodeSync','creditEval','filingParse','metrics','rules','stockPrice'])[1 + g %% 7], '{}', md5(g::text)
FROM generate_series(1, %[1]d) g;
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
SELECT g, (ARRAY['aptTrade','corpCodeSync','creditEval','filingParse','metrics','rules','stockPrice'])[1 + g %% 7], g,
       CASE WHEN g %% 10 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, (1 + g %% 1000) || '@host#b', now(), now()
FROM generate_series(1, %[1]d) g;
INSERT INTO job_checkpoint (instance_id, chunk, execution_id, targets, written)
SELECT g, 'chunk', g, 1, 1 FROM generate_series(1, %[1]d) g;
INSERT INTO apt_trade (region, deal_ym, serial, apt_name, deal_date, deal_amount_krw, area_m2, execution_id)
SELECT lpad((g %% 250)::text, 5, '1'), '2025' || lpad((1 + g %% 12)::text, 2, '0'), g::text, 'apt', '2025-01-01', 1, 84, g
FROM generate_series(1, %[1]d) g;
-- A few live rows among the history: a running execution, an active request.
UPDATE job_request SET status = 'RUNNING', worker_id = 'live@host#b' WHERE id = %[1]d;
UPDATE job_execution SET status = 'STARTED' WHERE id = %[1]d;
INSERT INTO worker (id, hostname, pid, boot) VALUES ('live@host#b', 'host', 1, 'b');
UPDATE job_request SET execution_id = id WHERE id IN (5, %[1]d);
-- A schedule missed every minute for as long (the history's days).
INSERT INTO schedule_tick (job, due_at, outcome)
SELECT 'aptTrade', now() - make_interval(mins => g), 'missed' FROM generate_series(1, %[1]d) g;`, n))
}

// SkewedHistory writes a skewed history: n runs of aptTrade (a request, an
// instance and a COMPLETED or FAILED execution each, one a minute) and n
// due times of its schedule, n DONE requests of stockPrice that never ran,
// n audit events, beside 0 to 10 runs of each other job (older), a
// thousand stopped workers and the live run of rules (the newest rows) on
// LiveWorker. With n = 0 there is no busy job: the quiet jobs, the workers
// and the live run only.
func SkewedHistory(ctx context.Context, tb testing.TB, db Execer, n int) {
	tb.Helper()
	exec(ctx, tb, db, "skewed history", fmt.Sprintf(`
-- Past processes, and the live one.
INSERT INTO worker (id, hostname, pid, boot, started_at, heartbeat_at, status)
SELECT g || '@host#b', 'host', g, 'b', now() - make_interval(hours => g), now() - make_interval(hours => g), 'stopped'
FROM generate_series(1, 1000) g;
INSERT INTO worker (id, hostname, pid, boot) VALUES ('%[2]s', 'host', 1, 'b');
-- The quiet jobs' runs first (the oldest ids): 0 to 10 each.
WITH quiet(job, n) AS (VALUES ('corpCodeSync', 0), ('creditEval', 3), ('filingParse', 10), ('metrics', 1), ('rules', 5), ('stockPrice', 2)),
r AS (
  INSERT INTO job_request (job, source, status, worker_id, created_at, claimed_at, finished_at)
  SELECT q.job, 'api', 'DONE', '1@host#b', now(), now(), now() FROM quiet q, generate_series(1, q.n) g
  RETURNING id, job
), i AS (
  INSERT INTO job_instance (job, params, params_hash) SELECT r.job, '{}', r.id::text FROM r
  RETURNING id, job, params_hash
)
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
SELECT i.id, i.job, i.params_hash::bigint, 'COMPLETED', '1@host#b', now(), now() FROM i;
-- Years of a busy job: aptTrade's runs, one a minute, and its due times.
WITH r AS (
  INSERT INTO job_request (job, source, status, worker_id, created_at, claimed_at, finished_at)
  SELECT 'aptTrade', 'schedule', CASE WHEN g %% 10 = 0 THEN 'FAILED' ELSE 'DONE' END, (1 + g %% 1000) || '@host#b',
         now() - make_interval(mins => %[1]d - g), now(), now()
  FROM generate_series(1, %[1]d) g
  RETURNING id, job, created_at
), i AS (
  INSERT INTO job_instance (job, params, params_hash) SELECT r.job, '{}', r.id::text FROM r
  RETURNING id, job, params_hash
)
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
SELECT i.id, i.job, r.id, CASE WHEN r.id %% 10 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, '1@host#b', r.created_at, r.created_at
FROM i JOIN r ON r.id = i.params_hash::bigint;
INSERT INTO schedule_tick (job, due_at, outcome)
SELECT 'aptTrade', now() - make_interval(mins => g), CASE WHEN g %% 10 = 0 THEN 'missed' ELSE 'enqueued' END
FROM generate_series(1, %[1]d) g;
-- stockPrice's requests that never ran (refused by its daily cap, say).
INSERT INTO job_request (job, source, status, created_at, finished_at)
SELECT 'stockPrice', 'schedule', 'DONE', now(), now() FROM generate_series(1, %[1]d) g;
INSERT INTO audit_event (actor, client, action, target, detail)
SELECT 'operator', 'console', 'request', 'aptTrade', '' FROM generate_series(1, %[1]d) g;
-- A quiet job's live run, the newest rows.
WITH r AS (
  INSERT INTO job_request (job, source, status, worker_id, claimed_at) VALUES ('rules', 'api', 'RUNNING', '%[2]s', now())
  RETURNING id
), i AS (
  INSERT INTO job_instance (job, params, params_hash) VALUES ('rules', '{}', 'live') RETURNING id
), e AS (
  INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at)
  SELECT i.id, 'rules', r.id, 'STARTED', '%[2]s', now() FROM i, r
  RETURNING id, request_id
)
UPDATE job_request SET execution_id = e.id FROM e WHERE job_request.id = e.request_id;`, n, LiveWorker))
}

// CoverageTargets writes the coverage of targets creditEval targets (the
// exposure ledger, 1 in 20 of its companies without exposure) and of
// otherTargets for the other jobs' tables (companies, 1 in 10 untracked
// and 1 in 4 unlisted; prices; metrics and rule checks), current on today
// but one in a thousand, with yesterday's day of history (a week for the
// rules' tables). The dates are YYYY-MM-DD.
func CoverageTargets(ctx context.Context, tb testing.TB, db Execer, targets, otherTargets int, today, yesterday string) {
	tb.Helper()
	exec(ctx, tb, db, "coverage targets", fmt.Sprintf(`
INSERT INTO exposure (corp_code, outstanding_krw) SELECT lpad(g::text, 8, '0'), g %% 20 FROM generate_series(1, %[1]d * 20 / 19) g;
INSERT INTO credit_grade (corp_code, eval_date, grade, source, execution_id)
SELECT lpad(g::text, 8, '0'), d, 'A', 'lookup', 1 FROM generate_series(1, %[1]d * 20 / 19) g, (VALUES ('%[3]s'::date), ('%[4]s')) v(d)
WHERE g %% 1000 <> 7;
INSERT INTO company (corp_code, name, stock_code, tracked, execution_id)
SELECT lpad(g::text, 8, '0'), 'c', CASE WHEN g %% 4 <> 0 THEN lpad(g::text, 7, '0') END, g %% 10 <> 0, 1 FROM generate_series(1, %[2]d * 10 / 9) g;
INSERT INTO stock_price (short_code, trade_date, corp_code, close, open, high, low, volume, market_cap, execution_id)
SELECT lpad(g::text, 7, '0'), d, 'x', 1, 1, 1, 1, 1, 1, 1 FROM generate_series(1, %[2]d * 10 / 9) g, (VALUES ('%[3]s'::date), ('%[4]s')) v(d)
WHERE g %% 4 <> 0 AND g %% 1000 <> 7;
INSERT INTO risk_metric (corp_code, metric_date, execution_id)
SELECT lpad(g::text, 8, '0'), d, 1 FROM generate_series(1, %[2]d * 10 / 9) g, (SELECT '%[3]s'::date - k FROM generate_series(0, 7) k) v(d)
WHERE g %% 10 <> 0 AND g %% 1000 <> 7;
INSERT INTO risk_rule_check (alert_date, corp_code, execution_id)
SELECT d, lpad(g::text, 8, '0'), 1 FROM generate_series(1, %[2]d * 10 / 9) g, (SELECT '%[3]s'::date - k FROM generate_series(0, 7) k) v(d)
WHERE g %% 10 <> 0 AND g %% 1000 <> 8;`, targets, otherTargets, today, yesterday))
}

// FinishedRuns writes n finished runs spread over Jobs: a DONE request, its
// instance and a COMPLETED execution on worker "seed" each (the request
// does not name its execution), then analyzes the tables.
func FinishedRuns(ctx context.Context, tb testing.TB, db Execer, n int) {
	tb.Helper()
	exec(ctx, tb, db, "finished runs", fmt.Sprintf(`
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
}
