package pack

import "time"

// Rules are buildrisk-radar's alerts, the one source of
// deploy/prometheus/rules.yml and of the Grafana-managed rules in
// deploy/grafana/provisioning/alerting/buildrisk.yaml. Each uses only the
// metric names of observability.MetricNames (plus Prometheus's own up), and
// deploy/prometheus/rules_test.yml has a firing and a non-firing case for
// every one.
//
// Counters that "should never move" (rejections, stale workers, unaccounted
// items) alert on increase() OR on a series that appeared within the window
// with a value > 0: a counter series is born with its first increment, and
// increase() of a series that goes absent -> 1 -> 1 is 0, so the very first
// event would otherwise never alert. (Instruments.InitSeries pre-creates the
// series at 0 as well; the rules don't rely on it.) The price: after a gap in
// Prometheus's data longer than the window, a counter already above 0 looks
// new once and fires; it is above 0 only if the event did happen since the
// process started.
var Rules = []Rule{
	{
		Alert: "BuildriskFanoutRejections",
		Comment: `Any refusal pages: pool refusals (closed, queue_full,
submit_failed) are lost items; cap, provider_429 and
provider_limit_lowered (a 429 under BUILDRISK_RATE_<P>) are upstream
refusals that stop or slow a job. The reason label tells which.`,
		Expr: `sum by (job, reason) (increase(buildrisk_fanout_rejections_total[5m])) > 0
or
sum by (job, reason) (
  buildrisk_fanout_rejections_total
  unless buildrisk_fanout_rejections_total offset 5m
) > 0
`,
		Severity:    Critical,
		Summary:     "Fan-out pool of job {{ $labels.job }} rejected items (reason {{ $labels.reason }}) in the last 5m",
		Description: "reason closed/queue_full/submit_failed: items were refused by the fan-out pool, backpressure before submit is broken; compare buildrisk_items_total and the job's executions and re-request affected runs. reason cap: a provider's daily cap or maxCalls stopped the job (resumable). reason provider_429: the provider is throttling calls. reason provider_limit_lowered: the provider answered 429 under its BUILDRISK_RATE_<P>, so its real limit is below the configured rate; the fleet waits out its Retry-After, lower the rate.",
		Grafana:     Grafana{From: 10 * time.Minute},
	},
	{
		Alert: "BuildriskStaleWorkerReaped",
		Expr: `sum(increase(buildrisk_worker_stale_heartbeats_total[15m])) > 0
or
sum(buildrisk_worker_stale_heartbeats_total unless buildrisk_worker_stale_heartbeats_total offset 15m) > 0
`,
		Severity:    Warning,
		Summary:     "A worker stopped heartbeating and was reaped in the last 15m",
		Description: "The requests it held were marked FAILED and its executions ABANDONED; they can be requested again. Check why the worker died (OOM, node loss, kill without drain).",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskUnaccountedItems",
		Expr: `sum by (job) (increase(buildrisk_items_total{outcome="unaccounted"}[15m])) > 0
or
sum by (job) (buildrisk_items_total{outcome="unaccounted"} unless buildrisk_items_total{outcome="unaccounted"} offset 15m) > 0
`,
		Severity:    Critical,
		Summary:     "Job {{ $labels.job }} ended with unaccounted items in the last 15m",
		Description: "An execution's targets did not equal written + skipped + failed; it ended FAILED. Items were lost silently: find the execution's exit message ('unaccounted: k').",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskAutoResumeExhausted",
		Comment: `A run stopped by infrastructure resumes by itself a few times a
day (BUILDRISK_AUTO_RESUME_MAX); past that it stays stopped and
someone must act.`,
		Expr: `sum by (job, cause) (increase(buildrisk_auto_resumes_refused_total[1h])) > 0
or
sum by (job, cause) (buildrisk_auto_resumes_refused_total unless buildrisk_auto_resumes_refused_total offset 1h) > 0
`,
		Severity:    Critical,
		Summary:     "Job {{ $labels.job }} used every automatic resume of the day (last cause {{ $labels.cause }}) and stays stopped",
		Description: "The same run was stopped by infrastructure (drain, reap, database) again and again; a run that crashes its worker every time looks like this. Find the worker logs of its executions, fix the cause, then request the job again: it resumes from its last commit.",
		Grafana:     Grafana{From: 2 * time.Hour},
	},
	{
		Alert: "BuildriskOwnershipLost",
		Comment: `A run's fenced write found its execution no longer its own: a
worker was cut off long enough to be reaped while still alive.`,
		Expr: `sum by (job) (increase(buildrisk_ownership_lost_total[15m])) > 0
or
sum by (job) (buildrisk_ownership_lost_total unless buildrisk_ownership_lost_total offset 15m) > 0
`,
		Severity:    Warning,
		Summary:     "A run of job {{ $labels.job }} lost the ownership of its execution in the last 15m",
		Description: "A run found its execution abandoned or taken over (the reaper took its worker for dead, or a newer execution of the instance started) and stopped without writing anything more. Check the worker's pauses (GC, node, network partition, database outage) and whether the reaper or a resume took over; nothing is lost: a resume continues from the last commit.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskCommitsLost",
		Comment: `The database acknowledged commits it no longer holds: a failover
to an asynchronous replica. The runs redid them; the alert says
the database lost work.`,
		Expr: `sum by (job) (increase(buildrisk_commits_lost_total[15m])) > 0
or
sum by (job) (buildrisk_commits_lost_total unless buildrisk_commits_lost_total offset 15m) > 0
`,
		Severity:    Warning,
		Summary:     "Runs of job {{ $labels.job }} found commits the database had lost in the last 15m",
		Description: "Commits the database acknowledged were missing when the run checked its plan against the database: a failover to an asynchronous replica lost them. Each run did its lost chunks again before completing, so no run reported success over the hole; the provider was paid again for the lost items. Check the replication mode and the failover.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert:       "BuildriskQueueAgeHigh",
		Expr:        "max by (job) (buildrisk_queue_oldest_age_seconds) > 900",
		For:         "5m",
		Severity:    Warning,
		Summary:     "Oldest queued request of job {{ $labels.job }} has waited {{ $value | humanizeDuration }}",
		Description: "A request has been QUEUED for more than 15 minutes: no worker is claiming it. Check that workers are alive and not all busy or draining.",
		Threshold:   "900s",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "max by (job) (buildrisk_queue_oldest_age_seconds)", Evaluator: Above, Param: 900, Summary: "Oldest queued request of job {{ $labels.job }} has waited more than 900s"},
	},
	{
		Alert: "BuildriskProviderBudgetLow",
		Expr: `min by (provider) (buildrisk_provider_calls_remaining)
  / max by (provider) (buildrisk_provider_daily_cap > 0)
< 0.10
`,
		For:         "5m",
		Severity:    Warning,
		Summary:     "Provider {{ $labels.provider }} has {{ $value | humanizePercentage }} of its daily call cap left",
		Description: "Jobs calling this provider will stop (STOPPED, resumable tomorrow) when the cap is reached.",
		Threshold:   "10%",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "min by (provider) (buildrisk_provider_calls_remaining) / max by (provider) (buildrisk_provider_daily_cap > 0)", Evaluator: Below, Param: 0.1, Summary: "Provider {{ $labels.provider }} has less than 10% of its daily call cap left"},
	},
	{
		Alert:       "BuildriskNoLiveWorker",
		Expr:        "(max(buildrisk_workers_alive) or on() vector(0)) < 1",
		For:         "2m",
		Severity:    Critical,
		Summary:     "No live buildrisk-radar worker for 2m",
		Description: "No worker has a fresh heartbeat (or none reports buildrisk_workers_alive): requests are accepted but nothing runs them.",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "max(buildrisk_workers_alive) or on() vector(0)", Evaluator: Below, Param: 1},
	},
	{
		Alert:       "BuildriskTargetDown",
		Expr:        "up{job=~\"buildrisk-.*\"} == 0",
		For:         "5m",
		Severity:    Warning,
		Summary:     "Prometheus can't scrape {{ $labels.instance }} ({{ $labels.job }})",
		Description: "The process is down or its /metrics endpoint is unreachable; its counters are invisible to the other alerts.",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "up{job=~\"buildrisk-.*\"}", Evaluator: Below, Param: 1},
	},
	{
		Alert: "BuildriskJobNotCompleted",
		Comment: `The dead man's switch of every scheduled job: nothing completed
within the schedule's longest gap plus an hour. The freshness gauge
is read from the database by every process (max() picks any);
the period exists only for scheduled jobs, so the match limits the
alert to them. A job that never completed counts from its
schedule's first recorded due time.`,
		Expr: `time() - max by (job) (buildrisk_job_last_completed_timestamp_seconds)
  > on (job) (max by (job) (buildrisk_schedule_period_seconds) + 3600)
`,
		Severity:    Critical,
		Summary:     "Job {{ $labels.job }} has not completed within its schedule period plus 1h",
		Description: "No COMPLETED execution since the last one the schedule expected: its due time was missed or failed (buildrisk_schedule_ticks_total), is deferred behind a long request, or its runs fail or stop. GET /v1/jobs/{job} shows lastDueAt and lastDueOutcome; request the missing day by hand if needed.",
		Threshold:   "schedule period + 3600s",
		Grafana: Grafana{From: 10 * time.Minute, Query: `time() - max by (job) (buildrisk_job_last_completed_timestamp_seconds)
  - on (job) (max by (job) (buildrisk_schedule_period_seconds) + 3600)
`},
	},
	{
		Alert: "BuildriskScheduleTicksLost",
		Comment: `A due time missed (older than the catch-up window when a scheduler
saw it: no leader ran in time) or failed (its request refused, or
an enqueue error) is a scheduled run that did not happen.`,
		Expr: `sum by (job, outcome) (increase(buildrisk_schedule_ticks_total{outcome=~"missed|failed"}[15m])) > 0
or
sum by (job, outcome) (
  buildrisk_schedule_ticks_total{outcome=~"missed|failed"}
  unless buildrisk_schedule_ticks_total{outcome=~"missed|failed"} offset 15m
) > 0
`,
		Severity:    Critical,
		Summary:     "Scheduled due times of job {{ $labels.job }} were {{ $labels.outcome }} in the last 15m",
		Description: "missed: no leader handled the due time within the job's catch-up window (BUILDRISK_SCHEDULE_CATCHUP_<JOB>); the schedule_tick rows say which. failed: the request was refused (message on the row) or could not be inserted (retried while in the window). Request the missing days by hand.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskDeadlineAtRisk",
		Comment: `A job with a deadline (BUILDRISK_DEADLINE_<JOB>) whose running
execution is forecast to end after it: its measured pace, its
provider's rate limit and daily cap say it will not be DONE in
time. Every process reads the forecast from the database and
exports it only while a run is active and has a pace, so max()
picks any process, and no run is no series and no alert. for: 5m
lets a run's first pace (a slow start, a burst of retries) settle,
and leaves time to act while the run can still make it.`,
		Expr:        "max by (job) (buildrisk_job_deadline_forecast_seconds) > 0\n",
		For:         "5m",
		Severity:    Warning,
		Summary:     "The running execution of job {{ $labels.job }} is forecast to end {{ $value | humanizeDuration }} after its deadline",
		Description: "The run's forecast end (its pace over the last minute, its provider's rate limit and daily cap) has been after the job's deadline (BUILDRISK_DEADLINE_<JOB>) for 5m. GET /v1/jobs/{{ $labels.job }} shows deadline, forecastDoneAt and deadlineStatus; GET /v1/providers each provider's used, cap, remaining and resetsAt. Raise BUILDRISK_RATE_<P> or BUILDRISK_FANOUT if the provider allows, BUILDRISK_DAILY_CAP_<P> if the contract allows, or stop a competing backfill.",
		Threshold:   "0s",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "max by (job) (buildrisk_job_deadline_forecast_seconds)\n", Evaluator: Above, Param: 0, Summary: "The running execution of job {{ $labels.job }} is forecast to end after its deadline"},
	},
	{
		Alert: "BuildriskDeadlineMissed",
		Comment: `The job's newest deadline passed without a COMPLETED execution
since the deadline before it: the day's report goes out without
its data. Every process judges it from the database by its own
clock and exports it for every job with a deadline; max() picks
any. for: 1m keeps a run that completes within a minute of the
deadline (its commit racing the judgement, or one process's clock a
little ahead) from paging. It clears when a run of the job
completes. A job that never completed counts as missed.`,
		Expr:        "max by (job) (buildrisk_job_deadline_missed) == 1\n",
		For:         "1m",
		Severity:    Critical,
		Summary:     "The deadline of job {{ $labels.job }} passed without a COMPLETED run",
		Description: "No execution of the job COMPLETED between its previous deadline and its newest one (BUILDRISK_DEADLINE_<JOB>), and none since: the day's report lacks the job's data. for: 1m, so a run that completes within a minute of the deadline does not page; the alert clears when a run of the job completes. GET /v1/jobs/{{ $labels.job }} shows deadline and deadlineStatus, GET /v1/requests?job={{ $labels.job }} its runs and their messages. Request the job now if nothing runs it, then find why it was late (a cap or provider-rate stop, a failed run, a slow provider, a competing backfill).",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "max by (job) (buildrisk_job_deadline_missed)\n", Evaluator: Above, Param: 0},
	},
	{
		Alert: "BuildriskExecutionFailed",
		Comment: `A run that ended FAILED (provider errors, a bug, unaccounted
items, a database outage its worker fenced itself through) pages
at once instead of waiting for BuildriskJobNotCompleted up to a
day later. Severity by job: the risk outputs (creditEval,
metrics, rules, and any job not listed in
BuildriskIngestExecutionFailed) page as critical.`,
		Expr: `sum by (job) (increase(buildrisk_executions_total{status="FAILED",job!~"aptTrade|corpCodeSync|filingParse|stockPrice"}[15m])) > 0
or
sum by (job) (
  buildrisk_executions_total{status="FAILED",job!~"aptTrade|corpCodeSync|filingParse|stockPrice"}
  unless buildrisk_executions_total{status="FAILED",job!~"aptTrade|corpCodeSync|filingParse|stockPrice"} offset 15m
) > 0
`,
		Severity:    Critical,
		Summary:     "A run of job {{ $labels.job }} ended FAILED in the last 15m",
		Description: "The job's risk output for the day is missing or stale until a new request completes it. GET /v1/requests?job={{ $labels.job }}&status=FAILED names the execution and its exitMessage; a new request with the same params resumes it from the last commit.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskIngestExecutionFailed",
		Comment: `The same for the ingestion jobs (provider data): a warning, since
the next scheduled run or a re-request catches up, and the risk
jobs that read the data page on their own.`,
		Expr: `sum by (job) (increase(buildrisk_executions_total{status="FAILED",job=~"aptTrade|corpCodeSync|filingParse|stockPrice"}[15m])) > 0
or
sum by (job) (
  buildrisk_executions_total{status="FAILED",job=~"aptTrade|corpCodeSync|filingParse|stockPrice"}
  unless buildrisk_executions_total{status="FAILED",job=~"aptTrade|corpCodeSync|filingParse|stockPrice"} offset 15m
) > 0
`,
		Severity:    Warning,
		Summary:     "A run of ingestion job {{ $labels.job }} ended FAILED in the last 15m",
		Description: "Provider data of the run's range is incomplete. GET /v1/requests?job={{ $labels.job }}&status=FAILED names the execution and its exitMessage (often provider errors); a new request with the same params resumes it from the last commit.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskRunCapped",
		Comment: `A run stopped by a provider's daily cap (cause cap), by the
request's maxCalls (cause max_calls) or by a provider's
Retry-After past the client's backoff (cause provider-rate):
STOPPED and resumable, so nothing is lost, but the day's work is
late. A warning, never a page: a provider-rate stop resumes by
itself when the provider said, and no FAILED execution is counted.`,
		Expr: `sum by (job, cause) (increase(buildrisk_executions_stopped_total{cause=~"cap|max_calls|provider-rate"}[15m])) > 0
or
sum by (job, cause) (
  buildrisk_executions_stopped_total{cause=~"cap|max_calls|provider-rate"}
  unless buildrisk_executions_stopped_total{cause=~"cap|max_calls|provider-rate"} offset 15m
) > 0
`,
		Severity:    Warning,
		Summary:     "A run of job {{ $labels.job }} was stopped by {{ $labels.cause }} in the last 15m",
		Description: "cause cap: a provider's daily cap (BUILDRISK_DAILY_CAP_<P>) was reached; the run resumes from its last commit when re-requested after the budget day turns (BUILDRISK_TIMEZONE). cause max_calls: the request's maxCalls was spent; re-request with a larger maxCalls or none. cause provider-rate: the provider answered 429 with a Retry-After longer than a call waits; the run resumes by itself from its last commit when the provider said (at most 6h later), the execution's exitMessage says when.",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskDatabaseDown",
		Comment: `Every process (api, worker) exports buildrisk_database_up from its
heartbeat or database probe (every BUILDRISK_HEARTBEAT_INTERVAL),
and keeps serving it on /metrics while the database is down. With
a 10s probe, a 15s scrape, a 10s evaluation and for: 1m, it fires at
most about 1m40s after the outage starts.`,
		Expr:        "min by (job, instance) (buildrisk_database_up) < 1",
		For:         "1m",
		Severity:    Critical,
		Summary:     "{{ $labels.instance }} ({{ $labels.job }}) cannot reach the database for 1m",
		Description: "The api answers 503 with Retry-After, workers fence themselves (no commit, not ready) and resume when the database answers again. Check PostgreSQL (is it up, accepting connections, max_connections reached?), the network between the process and the database, and PgBouncer if used.",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "min by (job, instance) (buildrisk_database_up)\n", Evaluator: Below, Param: 1},
	},
	{
		Alert: "BuildriskDatabaseFailover",
		Comment: `Every api and worker checks the database's identity (system
identifier, timeline) after each probe and counts a change: a
replica promoted, or the URL reaching another cluster. Each
process counts the same failover, so max() reads 1 per failover
whatever the number of processes. The second branch counts a
series that appeared within the window already above 0.`,
		Expr: `max(increase(buildrisk_database_failovers_total[15m])) > 0
or
max(buildrisk_database_failovers_total unless buildrisk_database_failovers_total offset 15m) > 0
`,
		Severity:    Warning,
		Summary:     "The database failed over (a replica was promoted) in the last 15m",
		Description: "Every process moved to the new primary by itself (multi-host DATABASE_URL). With synchronous replication nothing acknowledged is lost; with asynchronous replication the commits acknowledged in the primary's last moments may be missing: runs re-verify their committed chunks and redo missing ones (buildrisk_commits_lost_total). Check why the primary failed, that the old primary cannot come back as a second primary, and that the new one has a standby again (BuildriskDatabaseReplicationAsync).",
		Grafana:     Grafana{From: 30 * time.Minute},
	},
	{
		Alert: "BuildriskDatabaseSplitBrain",
		Comment: `Every api and worker probes each host of its multi-host
DATABASE_URL after each database probe; two hosts of one system
answering read-write is a demoted primary taking connections
beside the promoted one. The processes write only to the higher
timeline (their timeline fence), but anything else that connects
to the old primary writes there. max(): one alert, whatever the
number of processes that see it.`,
		Expr:        "max(buildrisk_database_split_brain) > 0\n",
		Severity:    Critical,
		Summary:     "Two hosts of the database answer read-write (split brain)",
		Description: "A host of DATABASE_URL on an older timeline (the demoted primary) accepts writes beside the promoted primary. The service's processes refuse it and write only to the higher timeline; stop or fence the old primary now (shut it down, or rebuild it as a standby with pg_rewind), and check nothing else writes to it.",
		Grafana:     Grafana{From: 10 * time.Minute},
	},
	{
		Alert: "BuildriskDatabaseReplicationAsync",
		Comment: `The database acknowledged commits only once a synchronous standby
had them at some point in the last day, and now some process sees
it acknowledge them alone (synchronous_standby_names emptied,
synchronous_commit local, remote_write or off): typically the
promoted replica after a failover, which has no standby yet. A
deployment that never ran synchronously never fires; one that
turned it off for good stops firing a day later.`,
		Expr: `min(buildrisk_database_sync_replication) < 1
and on ()
max(max_over_time(buildrisk_database_sync_replication[1d])) == 1
`,
		For:         "10m",
		Severity:    Warning,
		Summary:     "The database no longer replicates synchronously: a failover now may lose acknowledged commits",
		Description: "buildrisk_database_sync_replication was 1 within the last day and is 0 now for 10m. Until a synchronous standby is back (synchronous_standby_names naming a streaming standby, synchronous_commit on or remote_apply), a failover may lose the last acknowledged commits (runs re-verify and redo them, counting buildrisk_commits_lost_total).",
		Grafana: Grafana{From: 1450 * time.Minute, Query: `min(buildrisk_database_sync_replication)
and on ()
max(max_over_time(buildrisk_database_sync_replication[1d])) == 1
`, Evaluator: Below, Param: 1},
	},
	{
		Alert: "BuildriskCoverageIncomplete",
		Comment: `The second direction of the count, from the data alone: the job's
newest COMPLETED run ended on its data date, and 15m later some of
the date's targets still have no current row (rows lost after
the run, a plan over the wrong set, items failed within the run's
tolerance). Both gauges are read from the database by every
process; max() picks any. Jobs without a coverage definition
(jobs.Coverage) export no coverage and never fire.`,
		Expr: `max by (job) (buildrisk_coverage_missing) > 0
and on (job)
(
  max by (job) (buildrisk_job_last_completed_timestamp_seconds)
    >= on (job) max by (job) (buildrisk_coverage_data_date_timestamp_seconds)
)
`,
		For:         "15m",
		Severity:    Critical,
		Summary:     "Job {{ $labels.job }}: {{ $value }} targets without a current row after its COMPLETED run of the day",
		Description: "Counted from the domain tables, not from the run: GET /v1/coverage/{{ $labels.job }}/missing lists the targets. Find why the rows are gone (a manual delete, a migration, a plan over the wrong set), then request the job with {\"onlyMissing\": true} (and the date, where it takes one): it plans only the missing targets.",
		Grafana: Grafana{From: 10 * time.Minute, Query: `max by (job) (buildrisk_coverage_missing)
and on (job)
(
  max by (job) (buildrisk_job_last_completed_timestamp_seconds)
    >= on (job) max by (job) (buildrisk_coverage_data_date_timestamp_seconds)
)
`, Summary: "Job {{ $labels.job }}: targets without a current row after its COMPLETED run of the day"},
	},
	{
		Alert: "BuildriskAuthFailureBurst",
		Comment: `buildrisk_auth_failures_total{via} counts wrong bearer tokens and
logins on every api replica; the api answers each guessing
address 429 past 10 a minute, so a burst above that is many
addresses or a patient guesser. The second branch counts a series
that appeared within the window (a replica's first failures).`,
		Expr: `sum(increase(buildrisk_auth_failures_total[5m])) > 50
or
sum(buildrisk_auth_failures_total unless buildrisk_auth_failures_total offset 5m) > 50
`,
		Severity:    Warning,
		Summary:     "{{ $value | humanize }} failed credential checks in the last 5m",
		Description: "More than 50 wrong bearer tokens or logins in 5 minutes: someone is guessing tokens. Each address past 10 a minute already gets 429; the api logs each guessing address once a minute (authentication failed, client=...). Block the addresses at the proxy or firewall, and rotate a token you suspect has leaked.",
		Grafana:     Grafana{From: 10 * time.Minute, Query: "sum(increase(buildrisk_auth_failures_total[5m]))\n", Evaluator: Above, Param: 50, Summary: "{{ $value }} failed credential checks in the last 5m"},
	},
}
