//lint:file-ignore SA1019 The SDK marks its v1 dashboard builder deprecated in favour of dashboardv2, but v2 is Grafana 12's resource format: Grafana 11 (compose's image), file provisioning of classic JSON and grafana/dashboard-linter read v1 only.

package pack

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// datasource is how every panel, query and query variable names its data
// source: the dashboard's datasource variable, so the dashboard imports
// into a Grafana whose Prometheus has any uid.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// DashboardJSON renders the buildrisk-radar dashboard as Grafana's
// dashboard JSON model, indented, ending in a newline.
func DashboardJSON() ([]byte, error) {
	d, err := Dashboard().Build()
	if err != nil {
		return nil, fmt.Errorf("error building the dashboard: %w", err)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("error encoding the dashboard: %w", err)
	}
	return append(out, '\n'), nil
}

// Dashboard builds the dashboard: health first (the stats that should stay
// flat), then requests and executions, fan-out and providers, scrape
// targets, schedules, the database, deadlines, and River's own job
// metrics. Panel ids never change (a new panel takes a new id), so links
// to a panel keep working.
func Dashboard() *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder("buildrisk-radar").
		Uid("buildrisk-radar").
		Description("Requests, executions, items, fan-out, providers and workers of buildrisk-radar. Metric names: observability.MetricNames.").
		Tags([]string{"buildrisk"}).
		Timezone(common.TimeZoneBrowser).
		Readonly().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-6h", "now").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(jobVariable())
	healthPanels(b)
	deadlinePanels(b)
	riverPanels(b)
	return b
}

// jobVariable is $job: the batch jobs that ever ended an execution, all by
// default.
func jobVariable() *dashboard.QueryVariableBuilder {
	const q = "label_values(buildrisk_executions_total, job)"
	return dashboard.NewQueryVariableBuilder("job").
		Label("Job").
		Datasource(datasource).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": q, "refId": "job"}}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

// query is a range query of the dashboard's datasource.
func query(refID, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(refID).Expr(expr).LegendFormat(legend).Range().Datasource(datasource)
}

// targets converts queries to the panels' target builders.
func targets(queries []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(queries))
	for i, q := range queries {
		out[i] = q
	}
	return out
}

// thresholds is an absolute thresholds configuration of steps.
func thresholds(steps []dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

// statPanel is a big number over the dashboard's time range, its
// background coloured by steps.
func statPanel(id uint32, pos dashboard.GridPos, title, description string, steps []dashboard.Threshold, queries ...*prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Id(id).GridPos(pos).Title(title).Description(description).Datasource(datasource).
		Unit("short").
		Thresholds(thresholds(steps)).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		ColorMode(common.BigValueColorModeBackground).
		Orientation(common.VizOrientationAuto).
		GraphMode(common.BigValueGraphModeArea).
		TextMode(common.BigValueTextModeAuto).
		Targets(targets(queries))
}

// graph is a time series panel in unit with a legend below it and a
// tooltip listing every series, largest first.
func graph(id uint32, pos dashboard.GridPos, title, description, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Id(id).GridPos(pos).Title(title).Description(description).Datasource(datasource).
		Unit(unit).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Targets(targets(queries))
}

// heatmapPanel shows histogram buckets in seconds over time.
func heatmapPanel(id uint32, pos dashboard.GridPos, title, description string, queries ...*prometheus.DataqueryBuilder) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Id(id).GridPos(pos).Title(title).Description(description).Datasource(datasource).
		Calculate(false).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
		CellGap(1).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").Steps(64).Exponent(0.5)).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
		Targets(targets(queries))
}

// fixedColor is an override giving a series one colour.
func fixedColor(color string) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": color}}}
}

// dashed is an override drawing a series as a dashed line (a limit beside
// the value it bounds).
func dashed() []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}}
}

// healthPanels adds the existing panels, rows and all, at their positions.
func healthPanels(b *dashboard.DashboardBuilder) {
	b.WithRow(dashboard.NewRowBuilder("Health: these should be flat").Id(1).GridPos(dashboard.GridPos{X: 0, Y: 0, W: 24, H: 1}))
	b.WithPanel(
		statPanel(2, dashboard.GridPos{X: 0, Y: 1, W: 4, H: 6}, "Fan-out items lost (should be 0)", "Fan-out items dropped (reason closed, queue_full, submit_failed) over the dashboard's time range. Any value above 0 is a silent loss of work items and pages (BuildriskFanoutRejections). Upstream pushback (cap, provider_429) is in 'Fan-out rejections by reason'.", []dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](1), Color: "red"}},
			query("A", "sum(increase(buildrisk_fanout_rejections_total{reason!~\"cap|provider_429|provider_limit_lowered\",job=~\"$job\"}[$__range])) or vector(0)", "rejections"),
		),
	)
	b.WithPanel(
		statPanel(3, dashboard.GridPos{X: 4, Y: 1, W: 4, H: 6}, "Unaccounted items (should be 0)", "Targets neither written, skipped nor failed when an execution ended (BuildriskUnaccountedItems).", []dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](1), Color: "red"}},
			query("A", "sum(increase(buildrisk_items_total{outcome=\"unaccounted\",job=~\"$job\"}[$__range])) or vector(0)", "unaccounted"),
		),
	)
	b.WithPanel(
		statPanel(4, dashboard.GridPos{X: 8, Y: 1, W: 4, H: 6}, "Workers alive", "Workers with a fresh heartbeat (BuildriskNoLiveWorker fires below 1).", []dashboard.Threshold{{Value: nil, Color: "red"}, {Value: cog.ToPtr[float64](1), Color: "green"}},
			query("A", "max(buildrisk_workers_alive) or vector(0)", "alive"),
		),
	)
	b.WithPanel(
		statPanel(5, dashboard.GridPos{X: 12, Y: 1, W: 4, H: 6}, "Stale workers reaped", "Workers reaped because their heartbeat went stale, over the time range (BuildriskStaleWorkerReaped).", []dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](1), Color: "orange"}},
			query("A", "sum(increase(buildrisk_worker_stale_heartbeats_total[$__range])) or vector(0)", "reaped"),
		),
	)
	b.WithPanel(
		statPanel(21, dashboard.GridPos{X: 16, Y: 1, W: 4, H: 6}, "Ownership lost (should be 0)", "Runs that found their execution abandoned or taken over (a live worker taken for dead: a database outage past the stale window, a paused process) and stopped without writing.", []dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](1), Color: "red"}},
			query("A", "sum(increase(buildrisk_ownership_lost_total{job=~\"$job\"}[$__range])) or vector(0)", "unaccounted"),
		),
	)
	b.WithPanel(
		statPanel(22, dashboard.GridPos{X: 20, Y: 1, W: 4, H: 6}, "Requests failed without a run", "Requests failed before their run could record an outcome: orphaned (nobody will run them) or start_failed (the run could not start; the request carries the error).", []dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](1), Color: "orange"}},
			query("A", "sum(increase(buildrisk_requests_failed_total{job=~\"$job\"}[$__range])) or vector(0)", "reaped"),
		),
	)
	b.WithRow(dashboard.NewRowBuilder("Requests and executions").Id(6).GridPos(dashboard.GridPos{X: 0, Y: 7, W: 24, H: 1}))
	b.WithPanel(
		graph(7, dashboard.GridPos{X: 0, Y: 8, W: 8, H: 8}, "Requests by result", "Requests to run a job per interval: accepted (202), duplicate (409, an active request exists), invalid (400).", "short",
			query("A", "sum by (result) (increase(buildrisk_requests_total{job=~\"$job\"}[$__rate_interval]))", "{{result}}"),
		).
			OverrideByName("accepted", fixedColor("green")).
			OverrideByName("duplicate", fixedColor("yellow")).
			OverrideByName("invalid", fixedColor("red")),
	)
	b.WithPanel(
		graph(8, dashboard.GridPos{X: 8, Y: 8, W: 8, H: 8}, "Executions by status", "Executions that ended per interval, by final status.", "short",
			query("A", "sum by (status) (increase(buildrisk_executions_total{job=~\"$job\"}[$__rate_interval]))", "{{status}}"),
		).
			OverrideByName("COMPLETED", fixedColor("green")).
			OverrideByName("STOPPED", fixedColor("blue")).
			OverrideByName("FAILED", fixedColor("red")).
			OverrideByName("ABANDONED", fixedColor("orange")),
	)
	b.WithPanel(
		graph(9, dashboard.GridPos{X: 16, Y: 8, W: 8, H: 8}, "Items by outcome", "Target items per interval: written, skipped, failed and unaccounted (lost: fails the execution).", "short",
			query("A", "sum by (outcome) (increase(buildrisk_items_total{job=~\"$job\"}[$__rate_interval]))", "{{outcome}}"),
		).
			OverrideByName("written", fixedColor("green")).
			OverrideByName("skipped", fixedColor("blue")).
			OverrideByName("failed", fixedColor("orange")).
			OverrideByName("unaccounted", fixedColor("red")),
	)
	b.WithPanel(
		graph(10, dashboard.GridPos{X: 0, Y: 16, W: 8, H: 8}, "Oldest queued request age", "Age of each job's oldest QUEUED request; BuildriskQueueAgeHigh fires above 900 s for 5m.", "s",
			query("A", "max by (job) (buildrisk_queue_oldest_age_seconds{job=~\"$job\"})", "{{job}}"),
		).
			Thresholds(thresholds([]dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](900), Color: "red"}})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)),
	)
	b.WithPanel(
		graph(11, dashboard.GridPos{X: 8, Y: 16, W: 8, H: 8}, "Request start latency", "Time from enqueue to start on a worker.", "s",
			query("A", "histogram_quantile(0.5, sum by (le) (rate(buildrisk_request_start_latency_seconds_bucket{job=~\"$job\"}[$__rate_interval])))", "p50"),
			query("B", "histogram_quantile(0.95, sum by (le) (rate(buildrisk_request_start_latency_seconds_bucket{job=~\"$job\"}[$__rate_interval])))", "p95"),
			query("C", "sum(rate(buildrisk_request_start_latency_seconds_sum{job=~\"$job\"}[$__rate_interval])) / sum(rate(buildrisk_request_start_latency_seconds_count{job=~\"$job\"}[$__rate_interval]))", "mean"),
		),
	)
	b.WithPanel(
		heatmapPanel(12, dashboard.GridPos{X: 16, Y: 16, W: 8, H: 8}, "Chunk duration", "Distribution of chunk durations (read, process, write + checkpoint).",
			query("A", "sum by (le) (increase(buildrisk_chunk_duration_seconds_bucket{job=~\"$job\"}[$__rate_interval]))", "{{le}}").Format(prometheus.PromQueryFormatHeatmap),
		),
	)
	b.WithRow(dashboard.NewRowBuilder("Fan-out and providers").Id(13).GridPos(dashboard.GridPos{X: 0, Y: 24, W: 24, H: 1}))
	b.WithPanel(
		graph(14, dashboard.GridPos{X: 0, Y: 25, W: 8, H: 8}, "Fan-out in flight vs capacity", "Items holding a fan-out slot vs the pools' slots, summed over workers. In flight at capacity means the producer waits (backpressure): slower, never lossy.", "short",
			query("A", "sum by (job) (buildrisk_fanout_inflight{job=~\"$job\"})", "{{job}} in flight"),
			query("B", "sum by (job) (buildrisk_fanout_capacity{job=~\"$job\"})", "{{job}} capacity"),
		).
			OverrideByRegexp(".* capacity", dashed()),
	)
	b.WithPanel(
		graph(15, dashboard.GridPos{X: 8, Y: 25, W: 8, H: 8}, "Fan-out rejections by reason", "Rejections per interval by job and reason. closed, queue_full and submit_failed are losses and should stay empty; cap, provider_429 and provider_limit_lowered (a 429 under BUILDRISK_RATE_<P>: the provider's real limit is below the configured rate) are upstream pushback (retried, or the job stops resumably).", "short",
			query("A", "sum by (job, reason) (increase(buildrisk_fanout_rejections_total{job=~\"$job\"}[$__rate_interval]))", "{{job}} {{reason}}"),
		),
	)
	b.WithPanel(
		graph(16, dashboard.GridPos{X: 16, Y: 25, W: 8, H: 8}, "External calls by outcome", "Upstream calls per interval: ok, error, capped (refused by the daily cap, not made).", "short",
			query("A", "sum by (provider, outcome) (increase(buildrisk_external_calls_total[$__rate_interval]))", "{{provider}} {{outcome}}"),
		),
	)
	b.WithPanel(
		graph(17, dashboard.GridPos{X: 0, Y: 33, W: 12, H: 8}, "Provider budget remaining", "Fraction of each provider's daily cap left; BuildriskProviderBudgetLow fires below 10% for 5m.", "percentunit",
			query("A", "min by (provider) (buildrisk_provider_calls_remaining) / max by (provider) (buildrisk_provider_daily_cap > 0)", "{{provider}}"),
		).
			Min(0).
			Max(1).
			Thresholds(thresholds([]dashboard.Threshold{{Value: nil, Color: "red"}, {Value: cog.ToPtr[float64](0.1), Color: "green"}})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)),
	)
	b.WithPanel(
		graph(18, dashboard.GridPos{X: 12, Y: 33, W: 12, H: 8}, "Provider calls remaining and daily cap", "Calls left today and the daily cap per provider.", "short",
			query("A", "min by (provider) (buildrisk_provider_calls_remaining)", "{{provider}} remaining"),
			query("B", "max by (provider) (buildrisk_provider_daily_cap)", "{{provider}} cap"),
		),
	)
	b.WithRow(dashboard.NewRowBuilder("Scrape targets").Id(19).GridPos(dashboard.GridPos{X: 0, Y: 41, W: 24, H: 1}))
	b.WithPanel(
		graph(20, dashboard.GridPos{X: 0, Y: 42, W: 24, H: 6}, "Targets up", "Prometheus scrape health of the api and each worker (BuildriskTargetDown).", "bool_yes_no",
			query("A", "up{job=~\"buildrisk-.*\"}", "{{job}} {{instance}}"),
		),
	)
	b.WithPanel(
		graph(23, dashboard.GridPos{X: 0, Y: 48, W: 24, H: 8}, "Automatic resumes and refusals", "Runs stopped by infrastructure (drain, reap, database) that resumed by themselves, and resumes refused by the daily attempt limit (BuildriskAutoResumeExhausted: those runs stay stopped).", "short",
			query("A", "sum by (job, cause) (increase(buildrisk_auto_resumes_total[$__rate_interval]))", "resumed {{job}} ({{cause}})"),
			query("B", "sum by (job, cause) (increase(buildrisk_auto_resumes_refused_total[$__rate_interval]))", "refused {{job}} ({{cause}})"),
		),
	)
	b.WithRow(dashboard.NewRowBuilder("Schedules").Id(24).GridPos(dashboard.GridPos{X: 0, Y: 56, W: 24, H: 1}))
	b.WithPanel(
		graph(25, dashboard.GridPos{X: 0, Y: 57, W: 12, H: 8}, "Schedule due times by outcome", "What the scheduler did with each due time: enqueued, coalesced, deferred (waited for an active request), missed (older than the catch-up window), failed. missed and failed page (BuildriskScheduleTicksLost).", "short",
			query("A", "sum by (job, outcome) (increase(buildrisk_schedule_ticks_total{job=~\"$job\"}[$__rate_interval]))", "{{job}} {{outcome}}"),
			query("B", "sum by (job) (increase(buildrisk_schedule_missed_total{job=~\"$job\"}[$__rate_interval]))", "{{job}} missed (counter)"),
		),
	)
	b.WithPanel(
		graph(26, dashboard.GridPos{X: 12, Y: 57, W: 12, H: 8}, "Time since last completion vs schedule period", "Seconds since each job's newest COMPLETED execution (read from the database by every process), against the longest gap of its schedule; BuildriskJobNotCompleted fires one hour past the period.", "s",
			query("A", "time() - max by (job) (buildrisk_job_last_completed_timestamp_seconds{job=~\"$job\"})", "{{job}} since last completion"),
			query("B", "max by (job) (buildrisk_schedule_period_seconds{job=~\"$job\"})", "{{job}} schedule period"),
		),
	)
	b.WithRow(dashboard.NewRowBuilder("Database and stopped runs").Id(27).GridPos(dashboard.GridPos{X: 0, Y: 65, W: 24, H: 1}))
	b.WithPanel(
		graph(28, dashboard.GridPos{X: 0, Y: 66, W: 12, H: 8}, "Database reachable by process", "buildrisk_database_up of every api and worker: 1 while its last database probe (heartbeat, api probe) succeeded, 0 while the database is unreachable from it. BuildriskDatabaseDown fires after 1m at 0.", "bool_yes_no",
			query("A", "min by (job, instance) (buildrisk_database_up)", "{{job}} {{instance}}"),
		),
	)
	b.WithPanel(
		graph(29, dashboard.GridPos{X: 12, Y: 66, W: 12, H: 8}, "Executions stopped by cause", "Runs that ended STOPPED, by cause: cap (a provider's daily cap) and max_calls (the request's maxCalls) fire BuildriskRunCapped; operator (a stop) and drain (a worker shutting down) do not.", "short",
			query("A", "sum by (job, cause) (increase(buildrisk_executions_stopped_total{job=~\"$job\"}[$__rate_interval]))", "{{job}} {{cause}}"),
		),
	)
	b.WithPanel(
		graph(30, dashboard.GridPos{X: 0, Y: 74, W: 8, H: 8}, "Coverage: missing vs targets", "Per job, the targets its source of truth names for the data date and those without a current row, counted from the domain tables (not from the runs); check failures are counts that could not run.", "short",
			query("A", "max by (job) (buildrisk_coverage_missing{job=~\"$job\"})", "{{job}} missing"),
			query("B", "max by (job) (buildrisk_coverage_targets{job=~\"$job\"})", "{{job}} targets"),
			query("C", "sum by (job) (increase(buildrisk_coverage_check_failures_total{job=~\"$job\"}[$__rate_interval]))", "{{job}} check failures"),
		),
	)
	b.WithPanel(
		graph(31, dashboard.GridPos{X: 8, Y: 74, W: 8, H: 8}, "Coverage count age and data date", "Seconds since the coverage counts were taken (at most BUILDRISK_COVERAGE_MAX_AGE plus a scrape) and since the start of the data date they count.", "s",
			query("A", "time() - max by (job) (buildrisk_coverage_as_of_timestamp_seconds{job=~\"$job\"})", "{{job}} count age"),
			query("B", "time() - max by (job) (buildrisk_coverage_data_date_timestamp_seconds{job=~\"$job\"})", "{{job}} since data date start"),
		),
	)
	b.WithPanel(
		graph(32, dashboard.GridPos{X: 16, Y: 74, W: 8, H: 8}, "HTTP refusals", "Answers the api refused before doing the work: 413 (body over BUILDRISK_MAX_BODY_BYTES) and 503 (database unavailable, with Retry-After).", "reqps",
			query("A", "sum by (reason) (rate(buildrisk_http_refusals_total[$__rate_interval]))", "{{reason}}"),
		),
	)
	b.WithPanel(
		graph(33, dashboard.GridPos{X: 0, Y: 82, W: 12, H: 8}, "Failed credential checks and rate-limited tokens", "buildrisk_auth_failures_total by via (bearer: a wrong bearer token; login: a wrong console login), per second. A client past 10 failures a minute gets 429 until its minute ends; a burst is someone guessing tokens (the api logs each client once, with its address). buildrisk_rate_limited_total by role: requests of a valid token refused past its BUILDRISK_TOKEN_RATE_LIMIT (a script or a console polling too fast).", "reqps",
			query("A", "sum by (via) (rate(buildrisk_auth_failures_total[$__rate_interval]))", "{{via}}"),
			query("B", "sum by (role) (rate(buildrisk_rate_limited_total[$__rate_interval]))", "rate limited: {{role}}"),
		),
	)
	b.WithPanel(
		graph(34, dashboard.GridPos{X: 12, Y: 82, W: 12, H: 8}, "Database failovers, split brain and synchronous replication", "buildrisk_database_failovers_total: moves of the database each api and worker saw (a promoted replica: a new timeline of the same cluster; or another cluster behind the URL), BuildriskDatabaseFailover fires on any. buildrisk_database_sync_replication: 1 while the database acknowledges a commit only once a synchronous standby has it (synchronous_standby_names set, synchronous_commit on or remote_apply), so a failover loses nothing acknowledged; 0 with asynchronous replication or none. BuildriskDatabaseReplicationAsync fires when it drops to 0 after a day at 1. buildrisk_database_split_brain: 1 while two hosts of one database system named by DATABASE_URL answer read-write (a demoted primary beside the promoted one); the process writes only to the higher timeline. BuildriskDatabaseSplitBrain (critical) fires on it.", "short",
			query("A", "sum by (job, instance) (increase(buildrisk_database_failovers_total[$__rate_interval]))", "failovers {{job}} {{instance}}"),
			query("B", "min by (job, instance) (buildrisk_database_sync_replication)", "synchronous replication {{job}} {{instance}}"),
			query("C", "max by (job, instance) (buildrisk_database_split_brain)", "split brain {{job}} {{instance}}"),
		),
	)
	b.WithPanel(
		graph(35, dashboard.GridPos{X: 0, Y: 90, W: 12, H: 8}, "Commits lost by the database and calls re-charged (should be 0)", "buildrisk_commits_lost_total by job: commits the database acknowledged and then did not hold (a failover to an asynchronous replica). Each one was found by the run that made it and done again before the run could complete; a run whose execution itself vanished counts one too. buildrisk_ledger_reasserted_calls_total by provider: provider calls a worker charged again to the day's budget after a failover whose promoted primary had lost their charge.", "short",
			query("A", "sum by (job) (increase(buildrisk_commits_lost_total{job=~\"$job\"}[$__rate_interval]))", "{{job}}"),
			query("B", "sum by (provider) (increase(buildrisk_ledger_reasserted_calls_total[$__rate_interval]))", "calls re-charged {{provider}}"),
		),
	)
}

// deadlinePanels adds the Deadlines row: per job with a deadline
// (BUILDRISK_DEADLINE_<JOB>), its running execution's forecast end minus
// the deadline, and whether the newest deadline was missed. Both gauges
// are read from the database by every process; max() picks any.
func deadlinePanels(b *dashboard.DashboardBuilder) {
	const y = 98
	b.WithRow(dashboard.NewRowBuilder("Deadlines").Id(40).GridPos(dashboard.GridPos{X: 0, Y: y, W: 24, H: 1}))
	b.WithPanel(
		graph(41, dashboard.GridPos{X: 0, Y: y + 1, W: 12, H: 8}, "Deadline: forecast end minus deadline", "Per job with a deadline (BUILDRISK_DEADLINE_<JOB>), the running execution's forecast end minus its deadline, in seconds: above 0 the run is forecast late, and BuildriskDeadlineAtRisk fires after 5m there. A job has a line only while a run is active and has a pace.", "s",
			query("A", "max by (job) (buildrisk_job_deadline_forecast_seconds{job=~\"$job\"})", "{{job}}"),
		).
			Thresholds(thresholds([]dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr[float64](0), Color: "red"}})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)),
	)
	b.WithPanel(
		graph(42, dashboard.GridPos{X: 12, Y: y + 1, W: 12, H: 8}, "Deadline missed", "Per job with a deadline, 1 while its newest deadline has passed without a COMPLETED execution since the deadline before it (BuildriskDeadlineMissed pages after 1m), 0 once a run completes.", "bool_yes_no",
			query("A", "max by (job) (buildrisk_job_deadline_missed{job=~\"$job\"})", "{{job}}"),
		).
			Min(0).
			Max(1),
	)
}

// riverPanels adds the River row: the OpenTelemetry semantic-convention
// metric otelriver exports with EnableSemanticMetrics
// (messaging.process.duration, every job worked), and otelriver's own
// histogram, whose kind label splits the durations by job kind (the
// semantic metric carries only messaging.operation.name and
// messaging.system).
func riverPanels(b *dashboard.DashboardBuilder) {
	const y = 107
	b.WithRow(dashboard.NewRowBuilder("River jobs").Id(36).GridPos(dashboard.GridPos{X: 0, Y: y, W: 24, H: 1}))
	b.WithPanel(graph(37, dashboard.GridPos{X: 0, Y: y + 1, W: 8, H: 8}, "Jobs worked per second (messaging.process.duration)",
		"River jobs worked per second by every worker, from the OpenTelemetry messaging metric messaging.process.duration (otelriver, EnableSemanticMetrics).", "ops",
		query("A", "sum(rate(messaging_process_duration_seconds_count[$__rate_interval]))", "jobs"),
	))
	b.WithPanel(graph(38, dashboard.GridPos{X: 8, Y: y + 1, W: 8, H: 8}, "Job processing duration (messaging.process.duration)",
		"How long River jobs take to work, p50 and p95 over every worker, from messaging.process.duration. A job's chunks are in 'Chunk duration'.", "s",
		query("A", "histogram_quantile(0.5, sum by (le) (rate(messaging_process_duration_seconds_bucket[$__rate_interval])))", "p50"),
		query("B", "histogram_quantile(0.95, sum by (le) (rate(messaging_process_duration_seconds_bucket[$__rate_interval])))", "p95"),
	))
	b.WithPanel(graph(39, dashboard.GridPos{X: 16, Y: y + 1, W: 8, H: 8}, "Job duration p95 by kind",
		"p95 of River's work duration by job kind (otelriver's river.work_duration_histogram, which carries the kind label the semantic metric lacks).", "s",
		query("A", "histogram_quantile(0.95, sum by (le, kind) (rate(river_work_duration_histogram_seconds_bucket[$__rate_interval])))", "{{kind}}"),
	))
}
