package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
)

func (s *testSystem) scrapeAPI() string {
	s.t.Helper()
	resp, err := http.Get(s.api.URL + "/metrics")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func requireMetric(t *testing.T, exposition, name string, want float64, labels ...string) {
	t.Helper()
	got, ok := metricLine(exposition, name, labels...)
	require.True(t, ok, "%s%v not exported", name, labels)
	require.Equal(t, want, got, "%s%v", name, labels)
}

// After a scripted scenario (accepted, duplicate and invalid requests; a
// completed run; a capped call; a rejection forced in the fan-out; a reaped
// stale worker) the api's and a worker process's /metrics hold every
// contract metric with the expected values.
func TestMetrics_ScriptedScenario(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, nil)
	s.seedExposure(20)

	// The worker process has no CREDIT budget: its first CREDIT call is capped.
	// Its one schedule (rules, on January 1st) exports a period and never
	// comes due during the test.
	worker := startRadar(t, bin, s.processEnv(map[string]string{
		"BUILDRISK_DAILY_CAP_CREDIT": "0", "BUILDRISK_FANOUT": "1", "BUILDRISK_SCHEDULE_RULES": "0 3 1 1 *",
	}), "worker")
	workerAdmin := worker.waitLine(t, adminAddrLine)[1]

	// A stale worker holds aptTrade: the API's cleanup reaps it (stale +1).
	s.insertRunning("9@dead-host#b00t", time.Now().Add(-time.Hour))

	// accepted (after the reap), then duplicate while it runs, and invalid.
	s.gate.arm(1)
	body := aptTradeBody([]string{"11110"}, "2025-01", "2025-03")
	id := s.requestAptTrade(body)
	within(t, time.Minute, s.gate.blocked, "a held provider call")
	status, _ := s.post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusConflict, status)
	status, _ = s.post("/v1/jobs/aptTrade/requests", aptTradeBody([]string{"1"}, "2025-01", "2025-03"))
	require.Equal(t, http.StatusBadRequest, status)
	s.gate.open()
	require.Equal(t, "COMPLETED", execution(t, s.waitRequest(id, "DONE"))["status"])

	// A capped call stops creditEval.
	status, out := s.post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, "STOPPED", execution(t, s.waitRequest(out["requestId"].(string), "DONE"))["status"])

	// A rejection forced in the fan-out: a submit after the pool closed.
	pool, err := batch.NewFanOut(batch.FanOutConfig{Job: "creditEval", Size: 2, Instruments: s.tel.Instruments})
	require.NoError(t, err)
	require.NoError(t, pool.Close())
	require.True(t, errors.Is(pool.Submit(context.Background(), func(context.Context) error { return nil }), batch.ErrFanOutClosed))

	api := s.scrapeAPI()
	requireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="accepted"`)
	requireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="duplicate"`)
	requireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="invalid"`)
	requireMetric(t, api, "buildrisk_requests_total", 1, `job="creditEval"`, `source="api"`, `result="accepted"`)
	requireMetric(t, api, "buildrisk_worker_stale_heartbeats_total", 1)
	requireMetric(t, api, "buildrisk_fanout_rejections_total", 1, `job="creditEval"`, `reason="closed"`)

	var wm string
	deadline := time.Now().Add(10 * time.Second)
	for {
		wm = scrape(t, workerAdmin)
		if v, _ := metricLine(wm, "buildrisk_workers_alive"); v >= 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "workers_alive never recorded")
		time.Sleep(50 * time.Millisecond)
	}
	requireMetric(t, wm, "buildrisk_executions_total", 1, `job="aptTrade"`, `status="COMPLETED"`)
	requireMetric(t, wm, "buildrisk_executions_total", 1, `job="creditEval"`, `status="STOPPED"`)
	requireMetric(t, wm, "buildrisk_executions_stopped_total", 1, `job="creditEval"`, `cause="cap"`)
	requireMetric(t, wm, "buildrisk_executions_stopped_total", 0, `job="aptTrade"`, `cause="max_calls"`)
	requireMetric(t, wm, "buildrisk_database_up", 1)
	requireMetric(t, api, "buildrisk_database_up", 1)
	requireMetric(t, wm, "buildrisk_external_calls_total", 3, `provider="MOLIT"`, `outcome="ok"`)
	requireMetric(t, wm, "buildrisk_external_calls_total", 1, `provider="CREDIT"`, `outcome="capped"`)
	requireMetric(t, wm, "buildrisk_fanout_rejections_total", 1, `job="creditEval"`, `reason="cap"`)
	requireMetric(t, wm, "buildrisk_chunk_duration_seconds_count", 3, `job="aptTrade"`)
	requireMetric(t, wm, "buildrisk_provider_daily_cap", 0, `provider="CREDIT"`)
	requireMetric(t, wm, "buildrisk_provider_calls_remaining", 0, `provider="CREDIT"`)
	requireMetric(t, wm, "buildrisk_fanout_inflight", 0, `job="creditEval"`)
	requireMetric(t, wm, "buildrisk_request_start_latency_seconds_count", 1, `job="aptTrade"`)
	written, ok := metricLine(wm, "buildrisk_items_total", `job="aptTrade"`, `outcome="written"`)
	require.True(t, ok)
	require.Equal(t, float64(s.count("SELECT count(*) FROM apt_trade")), written, "the counter agrees with the rows")
	requireMetric(t, wm, "buildrisk_items_total", 0, `job="aptTrade"`, `outcome="unaccounted"`)

	// The freshness gauge is read from the database: the api and the worker
	// export the same value.
	apiCompleted, ok := metricLine(api, "buildrisk_job_last_completed_timestamp_seconds", `job="aptTrade"`)
	require.True(t, ok)
	requireMetric(t, wm, "buildrisk_job_last_completed_timestamp_seconds", apiCompleted, `job="aptTrade"`)
	workerEnv, err := app.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_SCHEDULE_RULES": "0 3 1 1 *"}[k] })
	require.NoError(t, err)
	for _, sched := range workerEnv.Schedules {
		if sched.Job == "rules" {
			requireMetric(t, wm, "buildrisk_schedule_period_seconds", sched.Period.Seconds(), `job="rules"`)
		}
	}

	// Every contract metric is exported by the api or the worker.
	for _, name := range observability.MetricNames {
		require.True(t, strings.Contains(api, name) || strings.Contains(wm, name), "%s is not exported", name)
	}
	_, ok = metricLine(wm, "buildrisk_fanout_capacity", `job="creditEval"`)
	require.True(t, ok)
	_, ok = metricLine(wm, "buildrisk_queue_oldest_age_seconds", `job="aptTrade"`)
	require.True(t, ok)
}
