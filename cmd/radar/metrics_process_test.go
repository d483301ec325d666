package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
)

// After a scripted scenario (accepted, duplicate and invalid requests; a
// completed run; a capped call; a rejection forced in the fan-out; a reaped
// stale worker) the api's and a worker process's /metrics hold every
// contract metric with the expected values.
func TestMetrics_ScriptedScenario(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	// aptTrade has a deadline: its gauges are exported, the forecast's
	// while its run is active.
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DEADLINE_APTTRADE": "07:00"}})
	s.SeedExposure(20)

	// The worker process has no CREDIT budget: its first CREDIT call is capped.
	// Its one schedule (rules, on January 1st) exports a period and never
	// comes due during the test.
	worker := startRadar(t, bin, s.ProcessEnv(map[string]string{
		"BUILDRISK_DAILY_CAP_CREDIT": "0", "BUILDRISK_FANOUT": "1", "BUILDRISK_SCHEDULE_RULES": "0 3 1 1 *",
		"BUILDRISK_DEADLINE_APTTRADE": "07:00", "BUILDRISK_FORECAST_INTERVAL": "100ms",
	}), "worker")
	workerAdmin := worker.waitLine(t, apptest.AdminAddrLine)[1]

	// A stale worker holds aptTrade: the API's cleanup reaps it (stale +1),
	// once the server has been up for a stale window.
	s.InsertRunning("9@dead-host#b00t", time.Now().Add(-time.Hour))
	s.WaitUpForStaleWindow()

	// accepted (after the reap), then duplicate while it runs, and invalid.
	s.Gate.Arm(1)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03")
	id := s.RequestAptTrade(body)
	apptest.Within(t, time.Minute, s.Gate.Blocked, "a held provider call")
	status, _ := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusConflict, status)
	status, _ = s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"1"}, "2025-01", "2025-03"))
	require.Equal(t, http.StatusBadRequest, status)
	var whileHeld string // the api's metrics while the run is held
	apptest.WaitUntil(t, 10*time.Second, "the held run's forecast exported", func() bool {
		whileHeld = s.ScrapeAPI()
		_, ok := apptest.MetricLine(whileHeld, observability.MetricJobDeadlineForecast, `job="aptTrade"`)
		return ok
	})
	s.Gate.Open()
	require.Equal(t, "COMPLETED", apptest.Execution(t, s.WaitRequest(id, "DONE"))["status"])

	// A capped call stops creditEval.
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, "STOPPED", apptest.Execution(t, s.WaitRequest(out["requestId"].(string), "DONE"))["status"])

	// A rejection forced in the fan-out: a submit after the pool closed.
	pool, err := batch.NewFanOut(batch.FanOutConfig{Job: "creditEval", Size: 2, Instruments: s.Tel.Instruments})
	require.NoError(t, err)
	require.NoError(t, pool.Close())
	require.True(t, errors.Is(pool.Submit(context.Background(), func(context.Context) error { return nil }), batch.ErrFanOutClosed))

	api := s.ScrapeAPI()
	apptest.RequireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="accepted"`)
	apptest.RequireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="duplicate"`)
	apptest.RequireMetric(t, api, "buildrisk_requests_total", 1, `job="aptTrade"`, `source="api"`, `result="invalid"`)
	apptest.RequireMetric(t, api, "buildrisk_requests_total", 1, `job="creditEval"`, `source="api"`, `result="accepted"`)
	apptest.RequireMetric(t, api, "buildrisk_worker_stale_heartbeats_total", 1)
	apptest.RequireMetric(t, api, "buildrisk_fanout_rejections_total", 1, `job="creditEval"`, `reason="closed"`)
	apptest.RequireMetric(t, api, observability.MetricJobDeadlineMissed, 0, `job="aptTrade"`)
	_, ok := apptest.MetricLine(api, observability.MetricJobDeadlineForecast, `job="aptTrade"`)
	require.False(t, ok, "no run active: no forecast")

	var wm string
	apptest.WaitUntil(t, 10*time.Second, "workers_alive recorded", func() bool {
		wm = apptest.Scrape(t, workerAdmin)
		v, _ := apptest.MetricLine(wm, "buildrisk_workers_alive")
		return v >= 1
	})
	apptest.RequireMetric(t, wm, "buildrisk_executions_total", 1, `job="aptTrade"`, `status="COMPLETED"`)
	apptest.RequireMetric(t, wm, "buildrisk_executions_total", 1, `job="creditEval"`, `status="STOPPED"`)
	apptest.RequireMetric(t, wm, "buildrisk_executions_stopped_total", 1, `job="creditEval"`, `cause="cap"`)
	apptest.RequireMetric(t, wm, "buildrisk_executions_stopped_total", 0, `job="aptTrade"`, `cause="max_calls"`)
	apptest.RequireMetric(t, wm, "buildrisk_database_up", 1)
	apptest.RequireMetric(t, api, "buildrisk_database_up", 1)
	// Each process checked the database's identity (no failover) and its
	// replication (none on the test's database) on its first probe.
	for _, exposition := range []string{wm, api} {
		apptest.RequireMetric(t, exposition, "buildrisk_database_failovers_total", 0)
		apptest.RequireMetric(t, exposition, "buildrisk_database_sync_replication", 0)
	}
	apptest.RequireMetric(t, wm, "buildrisk_external_calls_total", 3, `provider="MOLIT"`, `outcome="ok"`)
	apptest.RequireMetric(t, wm, "buildrisk_external_calls_total", 1, `provider="CREDIT"`, `outcome="capped"`)
	apptest.RequireMetric(t, wm, "buildrisk_fanout_rejections_total", 1, `job="creditEval"`, `reason="cap"`)
	apptest.RequireMetric(t, wm, "buildrisk_chunk_duration_seconds_count", 3, `job="aptTrade"`)
	apptest.RequireMetric(t, wm, "buildrisk_provider_daily_cap", 0, `provider="CREDIT"`)
	apptest.RequireMetric(t, wm, "buildrisk_provider_calls_remaining", 0, `provider="CREDIT"`)
	apptest.RequireMetric(t, wm, "buildrisk_fanout_inflight", 0, `job="creditEval"`)
	apptest.RequireMetric(t, wm, "buildrisk_request_start_latency_seconds_count", 1, `job="aptTrade"`)
	written, ok := apptest.MetricLine(wm, "buildrisk_items_total", `job="aptTrade"`, `outcome="written"`)
	require.True(t, ok)
	require.Equal(t, float64(s.Count("SELECT count(*) FROM apt_trade")), written, "the counter agrees with the rows")
	apptest.RequireMetric(t, wm, "buildrisk_items_total", 0, `job="aptTrade"`, `outcome="unaccounted"`)

	// The freshness gauge is read from the database: the api and the worker
	// export the same value.
	apiCompleted, ok := apptest.MetricLine(api, "buildrisk_job_last_completed_timestamp_seconds", `job="aptTrade"`)
	require.True(t, ok)
	apptest.RequireMetric(t, wm, "buildrisk_job_last_completed_timestamp_seconds", apiCompleted, `job="aptTrade"`)
	workerEnv, err := config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_SCHEDULE_RULES": "0 3 1 1 *"}[k] })
	require.NoError(t, err)
	for _, sched := range workerEnv.Schedules {
		if sched.Job == "rules" {
			apptest.RequireMetric(t, wm, "buildrisk_schedule_period_seconds", sched.Period.Seconds(), `job="rules"`)
		}
	}

	// Every contract metric is exported by the api or the worker (the
	// deadline forecast while a run is active).
	for _, name := range observability.MetricNames {
		require.True(t, strings.Contains(api, name) || strings.Contains(wm, name) || strings.Contains(whileHeld, name), "%s is not exported", name)
	}
	_, ok = apptest.MetricLine(wm, "buildrisk_fanout_capacity", `job="creditEval"`)
	require.True(t, ok)
	_, ok = apptest.MetricLine(wm, "buildrisk_queue_oldest_age_seconds", `job="aptTrade"`)
	require.True(t, ok)
}
