-- name: JobHistory :many
-- JobHistory returns, for each of the last @days days of job (in time zone
-- @tz, by the database's clock; newest first), the day's outcome and, for
-- a job with a coverage definition (queries/coverage.sql), the day's
-- coverage, in one statement:
--
--   outcome  the status of the job's newest execution that started that
--            day, lower case (completed, failed, stopped, abandoned;
--            running while it is active), else 'missed' when a due time of
--            that day was recorded missed (schedule_tick), else 'none'.
--   targets  TODAY's target set of the job (the set is not kept per day,
--            so past days are measured against today's): 0 without a
--            coverage definition.
--   current  how many of today's targets have the job's row for that day.
--   covered  false when the job has no coverage definition, or the day is
--            not one of its data dates (stockPrice on a weekend).
--
-- Each day is one probe of job_execution_job_started_idx, of the
-- schedule_tick primary key, and one count on the job's date index
-- (00008_coverage.sql); only the branch of @job is executed.
WITH p AS (
    SELECT @job::text AS job, @tz::text AS tz, @days::int AS days
), today AS (
    SELECT (clock_timestamp() AT TIME ZONE p.tz)::date AS today, p.job, p.tz, p.days FROM p
), d AS (
    SELECT (t.today - g)::date AS day,
           ((t.today - g)::timestamp AT TIME ZONE t.tz) AS day_start,
           ((t.today - g + 1)::timestamp AT TIME ZONE t.tz) AS day_end,
           t.today, t.job
    FROM today t, generate_series(0, t.days - 1) AS g
), tgt AS (
    SELECT CASE p.job
        WHEN 'creditEval' THEN (SELECT count(*) FROM exposure e WHERE e.outstanding_krw > 0)
        WHEN 'stockPrice' THEN (SELECT count(*) FROM company c WHERE c.tracked AND c.stock_code IS NOT NULL)
        WHEN 'metrics' THEN (SELECT count(*) FROM company c WHERE c.tracked)
        WHEN 'rules' THEN (SELECT count(*) FROM risk_metric m, today t WHERE m.metric_date = t.today)
    END AS n
    FROM p
)
SELECT d.day::date AS day,
       COALESCE((SELECT CASE WHEN e.status IN ('STARTING', 'STARTED', 'STOPPING') THEN 'running' ELSE lower(e.status) END
                 FROM job_execution e
                 WHERE e.job = d.job AND e.started_at >= d.day_start AND e.started_at < d.day_end
                 ORDER BY e.started_at DESC, e.id DESC LIMIT 1),
                CASE WHEN EXISTS (SELECT 1 FROM schedule_tick s
                                  WHERE s.job = d.job AND s.due_at >= d.day_start AND s.due_at < d.day_end
                                    AND s.outcome = 'missed') THEN 'missed' END,
                'none')::text AS outcome,
       (x.n IS NOT NULL AND NOT (d.job = 'stockPrice' AND extract(isodow FROM d.day) IN (6, 7)))::boolean AS covered,
       COALESCE(x.n, 0)::bigint AS targets,
       COALESCE(CASE d.job
           WHEN 'creditEval' THEN (SELECT count(*) FROM credit_grade g JOIN exposure e ON e.corp_code = g.corp_code
                                   WHERE g.eval_date = d.day AND e.outstanding_krw > 0)
           WHEN 'stockPrice' THEN (SELECT count(*) FROM stock_price sp JOIN company c ON c.stock_code = sp.short_code
                                   WHERE sp.trade_date = d.day AND c.tracked)
           WHEN 'metrics' THEN (SELECT count(*) FROM risk_metric m JOIN company c ON c.corp_code = m.corp_code
                                WHERE m.metric_date = d.day AND c.tracked)
           WHEN 'rules' THEN (SELECT count(*) FROM risk_rule_check k JOIN risk_metric m
                                ON m.corp_code = k.corp_code AND m.metric_date = d.today
                              WHERE k.alert_date = d.day)
       END, 0)::bigint AS current_targets
FROM d, tgt x
ORDER BY d.day DESC;
