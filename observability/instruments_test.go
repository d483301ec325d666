package observability

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/radartype"
)

// scrape GETs handler's /metrics like Prometheus does and parses the text
// exposition format.
func scrape(t *testing.T, handler http.Handler) map[string]*dto.MetricFamily {
	t.Helper()

	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	require.NoError(t, err)
	// The Accept header Prometheus 2.x sends for the text format.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "scrape output:\n%s", body)
	return families
}

// labelNames returns m's label names without the otel_scope_* labels the
// exporter adds to every series.
func labelNames(m *dto.Metric) []string {
	var names []string
	for _, l := range m.GetLabel() {
		if !strings.HasPrefix(l.GetName(), "otel_scope_") {
			names = append(names, l.GetName())
		}
	}
	sort.Strings(names)
	return names
}

type instrumentsTestBundle struct {
	inst      *Instruments
	providers *Providers
}

func setupInstruments(t *testing.T) *instrumentsTestBundle {
	t.Helper()

	providers, _ := NewTestProviders()
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })

	inst, err := NewInstruments(providers.Meter)
	require.NoError(t, err)
	return &instrumentsTestBundle{inst: inst, providers: providers}
}

// recordOneOfEach calls every method of Instruments once.
func recordOneOfEach(ctx context.Context, inst *Instruments) {
	inst.FanoutRejected(ctx, "creditEval", ReasonQueueFull)
	inst.AuthFailed(ctx, AuthViaBearer)
	inst.RateLimited(ctx, RoleViewer)
	inst.StaleHeartbeatReaped(ctx)
	inst.RequestRecorded(ctx, "aptTrade", radartype.SourceAPI, ResultAccepted)
	inst.ExecutionFinished(ctx, "aptTrade", radartype.ExecutionCompleted)
	inst.ExecutionStopped(ctx, "stockPrice", radartype.CauseCap)
	inst.DatabaseUpSet(ctx, true)
	inst.DatabaseFailover(ctx)
	inst.DatabaseSyncReplicationSet(ctx, true)
	inst.DatabaseSplitBrainSet(ctx, true)
	inst.LedgerReasserted(ctx, "CREDIT", 7)
	inst.OwnershipLost(ctx, "aptTrade")
	inst.RequestFailed(ctx, "aptTrade", ReasonOrphaned)
	inst.ItemsCounted(ctx, "aptTrade", OutcomeWritten, 72)
	inst.ExternalCall(ctx, "MOLIT", CallOK)
	inst.ChunkDuration(ctx, "aptTrade", 1500*time.Millisecond)
	inst.FanoutInflightAdd(ctx, "creditEval", 3)
	inst.FanoutCapacitySet(ctx, "creditEval", 5)
	inst.ProviderCallsRemainingSet(ctx, "MOLIT", 9928)
	inst.ProviderDailyCapSet(ctx, "MOLIT", 10000)
	inst.WorkersAliveSet(ctx, 2)
	inst.QueueOldestAgeSet(ctx, "stockPrice", 42.5)
	inst.RequestStartLatency(ctx, "aptTrade", 250*time.Millisecond)
	inst.AutoResumed(ctx, "aptTrade", radartype.CauseDrain)
	inst.AutoResumeRefused(ctx, "aptTrade", radartype.CauseReap)
	inst.ScheduleTick(ctx, "stockPrice", TickMissed, 2)
	inst.SchedulePeriodSet(ctx, "stockPrice", 72*time.Hour)
	inst.SetJobFreshnessSource(func(context.Context) (map[string]time.Time, error) {
		return map[string]time.Time{"stockPrice": time.Unix(1_700_000_000, 500_000_000)}, nil
	})
	inst.SetCoverageSource(func(context.Context) ([]CoverageSample, error) {
		return []CoverageSample{{Job: "creditEval", Targets: 300, Missing: 7, AsOf: time.Unix(1_700_000_000, 0)}}, nil
	})
	inst.SetDeadlineSource(func(context.Context) ([]DeadlineSample, error) {
		lateBy := 90 * time.Second
		return []DeadlineSample{{Job: "creditEval", ForecastLateBy: &lateBy}, {Job: "stockPrice", Missed: true}}, nil
	})
	inst.CoverageCheckFailed(ctx, "creditEval")
	inst.HTTPRefused(ctx, RefusalBodyTooLarge)
	inst.CommitsLost(ctx, "rules", 1)
}

func TestInstrumentsScrapedNames(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	// The production wiring, Go and process collectors included.
	providers, err := NewProviders(ctx, Config{Role: "worker", ServiceVersion: "test", WorkerID: "1@host#boot"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(ctx))) })

	inst, err := NewInstruments(providers.Meter)
	require.NoError(t, err)
	recordOneOfEach(ctx, inst)

	families := scrape(t, providers.MetricsHandler())

	want := map[string]struct {
		labels []string
		typ    dto.MetricType
	}{
		"buildrisk_auth_failures_total":                  {[]string{"via"}, dto.MetricType_COUNTER},
		"buildrisk_auto_resumes_total":                   {[]string{"cause", "job"}, dto.MetricType_COUNTER},
		"buildrisk_auto_resumes_refused_total":           {[]string{"cause", "job"}, dto.MetricType_COUNTER},
		"buildrisk_chunk_duration_seconds":               {[]string{"job"}, dto.MetricType_HISTOGRAM},
		"buildrisk_database_failovers_total":             {nil, dto.MetricType_COUNTER},
		"buildrisk_database_sync_replication":            {nil, dto.MetricType_GAUGE},
		"buildrisk_database_split_brain":                 {nil, dto.MetricType_GAUGE},
		"buildrisk_ledger_reasserted_calls_total":        {[]string{"provider"}, dto.MetricType_COUNTER},
		"buildrisk_database_up":                          {nil, dto.MetricType_GAUGE},
		"buildrisk_coverage_as_of_timestamp_seconds":     {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_coverage_check_failures_total":        {[]string{"job"}, dto.MetricType_COUNTER},
		"buildrisk_coverage_data_date_timestamp_seconds": {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_coverage_missing":                     {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_coverage_targets":                     {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_http_refusals_total":                  {[]string{"reason"}, dto.MetricType_COUNTER},
		"buildrisk_executions_stopped_total":             {[]string{"cause", "job"}, dto.MetricType_COUNTER},
		"buildrisk_executions_total":                     {[]string{"job", "status"}, dto.MetricType_COUNTER},
		"buildrisk_external_calls_total":                 {[]string{"outcome", "provider"}, dto.MetricType_COUNTER},
		"buildrisk_fanout_capacity":                      {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_fanout_inflight":                      {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_fanout_rejections_total":              {[]string{"job", "reason"}, dto.MetricType_COUNTER},
		"buildrisk_items_total":                          {[]string{"job", "outcome"}, dto.MetricType_COUNTER},
		"buildrisk_job_deadline_forecast_seconds":        {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_job_deadline_missed":                  {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_ownership_lost_total":                 {[]string{"job"}, dto.MetricType_COUNTER},
		"buildrisk_commits_lost_total":                   {[]string{"job"}, dto.MetricType_COUNTER},
		"buildrisk_provider_calls_remaining":             {[]string{"provider"}, dto.MetricType_GAUGE},
		"buildrisk_provider_daily_cap":                   {[]string{"provider"}, dto.MetricType_GAUGE},
		"buildrisk_queue_oldest_age_seconds":             {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_rate_limited_total":                   {[]string{"role"}, dto.MetricType_COUNTER},
		"buildrisk_request_start_latency_seconds":        {[]string{"job"}, dto.MetricType_HISTOGRAM},
		"buildrisk_requests_total":                       {[]string{"job", "result", "source"}, dto.MetricType_COUNTER},
		"buildrisk_requests_failed_total":                {[]string{"job", "reason"}, dto.MetricType_COUNTER},
		"buildrisk_worker_stale_heartbeats_total":        {nil, dto.MetricType_COUNTER},
		"buildrisk_workers_alive":                        {nil, dto.MetricType_GAUGE},
		"buildrisk_job_last_completed_timestamp_seconds": {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_schedule_missed_total":                {[]string{"job"}, dto.MetricType_COUNTER},
		"buildrisk_schedule_period_seconds":              {[]string{"job"}, dto.MetricType_GAUGE},
		"buildrisk_schedule_ticks_total":                 {[]string{"job", "outcome"}, dto.MetricType_COUNTER},
	}

	// MetricNames is exactly the list above, sorted.
	wantNames := make([]string, 0, len(want))
	for name := range want {
		wantNames = append(wantNames, name)
	}
	sort.Strings(wantNames)
	require.Equal(t, wantNames, MetricNames)
	require.True(t, slices.IsSorted(MetricNames))

	var scraped []string
	for name := range families {
		if strings.HasPrefix(name, "buildrisk_") {
			scraped = append(scraped, name)
		}
	}
	sort.Strings(scraped)
	require.Equal(t, MetricNames, scraped, "scraped buildrisk_* names differ from MetricNames")

	for name, w := range want {
		family := families[name]
		require.Equal(t, w.typ, family.GetType(), "type of %s", name)
		require.Equal(t, w.typ == dto.MetricType_HISTOGRAM, slices.Contains(HistogramNames, name), "HistogramNames and %s", name)
		require.NotEmpty(t, family.GetMetric(), name)
		for _, m := range family.GetMetric() {
			require.Equal(t, w.labels, labelNames(m), "labels of %s", name)

			// The scope labels the exporter adds are there and don't clash
			// with ours.
			var scope string
			for _, l := range m.GetLabel() {
				if l.GetName() == "otel_scope_name" {
					scope = l.GetValue()
				}
			}
			require.Equal(t, ScopeName, scope, "otel_scope_name of %s", name)
		}
	}

	// The process is described by target_info, not by metric labels.
	targetInfo := families["target_info"]
	require.NotNil(t, targetInfo)
	labels := map[string]string{}
	for _, l := range targetInfo.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, ServiceName, labels["service_name"])
	require.Equal(t, "worker", labels["buildrisk_role"])
	require.Equal(t, "1@host#boot", labels["service_instance_id"])
	require.Equal(t, "test", labels["service_version"])

	// The Go and process collectors are registered.
	require.Contains(t, families, "go_goroutines")
	require.Contains(t, families, "process_cpu_seconds_total")
}

func TestInstrumentsValues(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	bundle := setupInstruments(t)
	recordOneOfEach(ctx, bundle.inst)
	bundle.inst.FanoutInflightAdd(ctx, "creditEval", -1)
	bundle.inst.ChunkDuration(ctx, "aptTrade", 500*time.Millisecond)
	bundle.inst.ItemsCounted(ctx, "aptTrade", OutcomeUnaccounted, 3)
	bundle.inst.ItemsCounted(ctx, "aptTrade", OutcomeSkipped, 0) // records nothing
	bundle.inst.QueueOldestAgeSet(ctx, "rules", -5)              // clock skew: 0
	bundle.inst.RequestStartLatency(ctx, "rules", -time.Second)  // clock skew: 0

	for _, tt := range []struct {
		labels map[string]string
		name   string
		want   float64
	}{
		{map[string]string{"job": "creditEval", "reason": "queue_full"}, "buildrisk_fanout_rejections_total", 1},
		{nil, "buildrisk_worker_stale_heartbeats_total", 1},
		{nil, "buildrisk_database_failovers_total", 1},
		{nil, "buildrisk_database_sync_replication", 1},
		{nil, "buildrisk_database_split_brain", 1},
		{map[string]string{"provider": "CREDIT"}, "buildrisk_ledger_reasserted_calls_total", 7},
		{map[string]string{"job": "aptTrade", "source": "api", "result": "accepted"}, "buildrisk_requests_total", 1},
		{map[string]string{"job": "aptTrade", "status": "COMPLETED"}, "buildrisk_executions_total", 1},
		{map[string]string{"job": "aptTrade", "outcome": "written"}, "buildrisk_items_total", 72},
		{map[string]string{"job": "aptTrade", "outcome": "unaccounted"}, "buildrisk_items_total", 3},
		{map[string]string{"job": "aptTrade", "outcome": "skipped"}, "buildrisk_items_total", 0},
		{map[string]string{"provider": "MOLIT", "outcome": "ok"}, "buildrisk_external_calls_total", 1},
		{map[string]string{"job": "aptTrade"}, "buildrisk_chunk_duration_seconds_count", 2},
		{map[string]string{"job": "aptTrade"}, "buildrisk_chunk_duration_seconds_sum", 2},
		{map[string]string{"job": "aptTrade"}, "buildrisk_chunk_duration_seconds", 2},
		{map[string]string{"job": "creditEval"}, "buildrisk_fanout_inflight", 2},
		{map[string]string{"job": "creditEval"}, "buildrisk_fanout_capacity", 5},
		{map[string]string{"provider": "MOLIT"}, "buildrisk_provider_calls_remaining", 9928},
		{map[string]string{"provider": "MOLIT"}, "buildrisk_provider_daily_cap", 10000},
		{nil, "buildrisk_workers_alive", 2},
		{map[string]string{"job": "creditEval"}, "buildrisk_job_deadline_forecast_seconds", 90},
		{map[string]string{"job": "creditEval"}, "buildrisk_job_deadline_missed", 0},
		{map[string]string{"job": "stockPrice"}, "buildrisk_job_deadline_missed", 1},
		{map[string]string{"job": "stockPrice"}, "buildrisk_queue_oldest_age_seconds", 42.5},
		{map[string]string{"job": "rules"}, "buildrisk_queue_oldest_age_seconds", 0},
		{map[string]string{"job": "aptTrade"}, "buildrisk_request_start_latency_seconds_sum", 0.25},
		{map[string]string{"job": "rules"}, "buildrisk_request_start_latency_seconds_count", 1},
		{map[string]string{"job": "rules"}, "buildrisk_request_start_latency_seconds_sum", 0},
		{map[string]string{"job": "stockPrice", "outcome": "missed"}, "buildrisk_schedule_ticks_total", 2},
		{map[string]string{"job": "stockPrice"}, "buildrisk_schedule_missed_total", 2},
		{map[string]string{"job": "stockPrice"}, "buildrisk_schedule_period_seconds", 72 * 3600},
		{map[string]string{"job": "stockPrice"}, "buildrisk_job_last_completed_timestamp_seconds", 1_700_000_000.5},
	} {
		got, err := bundle.providers.MetricValue(tt.name, tt.labels)
		require.NoError(t, err, tt.name)
		require.InDelta(t, tt.want, got, 1e-9, "%s%v", tt.name, tt.labels)
	}

	// Seconds, not milliseconds: 1.5 s lands in the (1, 2.5] bucket.
	families, err := bundle.providers.Registry.Gather()
	require.NoError(t, err)
	for _, family := range families {
		if family.GetName() != "buildrisk_chunk_duration_seconds" {
			continue
		}
		buckets := family.GetMetric()[0].GetHistogram().GetBucket()
		counts := map[float64]uint64{}
		for _, b := range buckets {
			counts[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		require.Equal(t, uint64(0), counts[0.25])
		require.Equal(t, uint64(1), counts[1])
		require.Equal(t, uint64(2), counts[2.5])
	}
}

func TestInstrumentsOtherValue(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	bundle := setupInstruments(t)

	bundle.inst.RequestRecorded(ctx, "aptTrade", "cron", "Accepted")
	bundle.inst.ExecutionFinished(ctx, "aptTrade", "RUNNING")
	bundle.inst.ItemsCounted(ctx, "aptTrade", "lost", 1)
	bundle.inst.ExternalCall(ctx, "DART", "timeout")
	bundle.inst.FanoutRejected(ctx, "creditEval", "RejectedExecutionException")
	bundle.inst.ScheduleTick(ctx, "aptTrade", "skipped", 1)

	for _, tt := range []struct {
		labels map[string]string
		name   string
	}{
		{map[string]string{"source": ValueOther, "result": ValueOther}, MetricRequests},
		{map[string]string{"status": ValueOther}, MetricExecutions},
		{map[string]string{"outcome": ValueOther}, MetricItems},
		{map[string]string{"outcome": ValueOther}, MetricExternalCalls},
		{map[string]string{"reason": ValueOther}, MetricFanoutRejections},
		{map[string]string{"outcome": ValueOther}, MetricScheduleTicks},
	} {
		got, err := bundle.providers.MetricValue(tt.name, tt.labels)
		require.NoError(t, err)
		require.InDelta(t, 1, got, 0, tt.name)
	}
}

func TestInstrumentsInitSeries(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	bundle := setupInstruments(t)

	// The counters without attributes exist at 0 right after NewInstruments.
	families := scrape(t, bundle.providers.MetricsHandler())
	for _, name := range []string{MetricWorkerStaleHeartbeats, MetricDatabaseFailovers} {
		require.Contains(t, families, name)
		require.Zero(t, families[name].GetMetric()[0].GetCounter().GetValue(), name)
	}

	bundle.inst.InitSeries(ctx, []string{"aptTrade", "creditEval"}, []string{"DART", "MOLIT"})
	bundle.inst.InitSeries(ctx, []string{"aptTrade", "creditEval"}, []string{"DART", "MOLIT"}) // idempotent

	families = scrape(t, bundle.providers.MetricsHandler())
	for name, wantSeries := range map[string]int{
		MetricFanoutRejections:      2 * 6,
		MetricRequests:              2 * 5 * 3,
		MetricAutoResumes:           2 * 4,
		MetricAutoResumesRefused:    2 * 4,
		MetricExecutionsStopped:     2 * 5,
		MetricExecutions:            2 * 4,
		MetricItems:                 2 * 4,
		MetricExternalCalls:         2 * 3,
		MetricWorkerStaleHeartbeats: 1,
		MetricDatabaseFailovers:     1,
	} {
		require.Contains(t, families, name)
		require.Len(t, families[name].GetMetric(), wantSeries, name)
		for _, m := range families[name].GetMetric() {
			require.Zero(t, m.GetCounter().GetValue(), name)
		}
	}

	// A real event on a pre-initialised series is an increase from 0.
	bundle.inst.ItemsCounted(ctx, "aptTrade", OutcomeUnaccounted, 2)
	got, err := bundle.providers.MetricValue(MetricItems, map[string]string{"job": "aptTrade", "outcome": OutcomeUnaccounted})
	require.NoError(t, err)
	require.InDelta(t, 2, got, 0)
}

func TestProvidersMetricValue(t *testing.T) {
	t.Parallel()

	bundle := setupInstruments(t)

	t.Run("KnownButNotRecorded", func(t *testing.T) {
		t.Parallel()

		got, err := bundle.providers.MetricValue(MetricRequestStartLatency+"_count", nil)
		require.NoError(t, err)
		require.Zero(t, got)
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()

		_, err := bundle.providers.MetricValue("buildrisk_request_total", nil)
		require.ErrorIs(t, err, ErrMetricUnknown)
	})
}

// The measurements a run makes per provider call and per item keep their
// attribute sets: once a set of values has been used, ExternalCall,
// FanoutInflightAdd and ItemsCounted allocate nothing (metric.WithAttributes
// built and hashed a new set at every call), and each value still lands on
// its own series. (Not parallel: testing.AllocsPerRun refuses to be.)
func TestInstrumentsHotPathKeepsAttributeSets(t *testing.T) {
	ctx := t.Context()
	bundle := setupInstruments(t)
	hot := func() {
		bundle.inst.ExternalCall(ctx, "CREDIT", CallOK)
		bundle.inst.FanoutInflightAdd(ctx, "creditEval", 1)
		bundle.inst.FanoutInflightAdd(ctx, "creditEval", -1)
		bundle.inst.ItemsCounted(ctx, "creditEval", OutcomeWritten, 2)
	}
	hot()
	require.Zero(t, testing.AllocsPerRun(100, hot), "allocations per call")
	bundle.inst.ExternalCall(ctx, "CREDIT", CallError)
	bundle.inst.ExternalCall(ctx, "KRX", CallOK)
	bundle.inst.ItemsCounted(ctx, "stockPrice", OutcomeWritten, 5)
	for _, tt := range []struct {
		labels map[string]string
		name   string
		want   float64
	}{
		{map[string]string{"provider": "CREDIT", "outcome": "ok"}, "buildrisk_external_calls_total", 102},
		{map[string]string{"provider": "CREDIT", "outcome": "error"}, "buildrisk_external_calls_total", 1},
		{map[string]string{"provider": "KRX", "outcome": "ok"}, "buildrisk_external_calls_total", 1},
		{map[string]string{"job": "creditEval", "outcome": "written"}, "buildrisk_items_total", 204},
		{map[string]string{"job": "stockPrice", "outcome": "written"}, "buildrisk_items_total", 5},
		{map[string]string{"job": "creditEval"}, "buildrisk_fanout_inflight", 0},
	} {
		got, err := bundle.providers.MetricValue(tt.name, tt.labels)
		require.NoError(t, err, tt.name)
		require.InDelta(t, tt.want, got, 1e-9, "%s%v", tt.name, tt.labels)
	}
}
