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
-- schedule_tick primary key; the counts are one pass over the range of
-- the job's date index (00008_coverage.sql); only @job's branch runs.
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
    SELECT CASE
        WHEN @job::text = 'creditEval' THEN (SELECT count(*) FROM exposure e WHERE e.outstanding_krw > 0)
        WHEN @job::text = 'stockPrice' THEN (SELECT count(*) FROM company c WHERE c.tracked AND c.stock_code IS NOT NULL)
        WHEN @job::text = 'metrics' THEN (SELECT count(*) FROM company c WHERE c.tracked)
        WHEN @job::text = 'rules' THEN (SELECT count(*) FROM risk_metric m, today t WHERE m.metric_date = t.today)
    END AS n
    FROM p
), cur AS (
    -- Today's targets with the job's row, per day of the range: one pass
    -- over the range of the job's date index (only @job's branch runs).
    SELECT g.eval_date AS day, count(*) AS n
    FROM credit_grade g JOIN exposure e ON e.corp_code = g.corp_code, today t
    WHERE @job::text = 'creditEval' AND g.eval_date > t.today - t.days AND g.eval_date <= t.today AND e.outstanding_krw > 0
    GROUP BY g.eval_date
    UNION ALL
    SELECT sp.trade_date, count(*)
    FROM stock_price sp JOIN company c ON c.stock_code = sp.short_code, today t
    WHERE @job::text = 'stockPrice' AND sp.trade_date > t.today - t.days AND sp.trade_date <= t.today AND c.tracked
    GROUP BY sp.trade_date
    UNION ALL
    SELECT m.metric_date, count(*)
    FROM risk_metric m JOIN company c ON c.corp_code = m.corp_code, today t
    WHERE @job::text = 'metrics' AND m.metric_date > t.today - t.days AND m.metric_date <= t.today AND c.tracked
    GROUP BY m.metric_date
    UNION ALL
    SELECT k.alert_date, count(*)
    FROM risk_rule_check k, today t
    JOIN risk_metric m ON m.metric_date = t.today
    WHERE @job::text = 'rules' AND k.alert_date > t.today - t.days AND k.alert_date <= t.today AND m.corp_code = k.corp_code
    GROUP BY k.alert_date
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
       (x.n IS NOT NULL AND NOT (@job::text = 'stockPrice' AND extract(isodow FROM d.day) IN (6, 7)))::boolean AS covered,
       COALESCE(x.n, 0)::bigint AS targets,
       COALESCE(c.n, 0)::bigint AS current_targets
FROM d CROSS JOIN tgt x LEFT JOIN cur c ON c.day = d.day
ORDER BY d.day DESC;
