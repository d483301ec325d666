package app_test

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// A run that cannot finish before its job's deadline is seen before the
// deadline, not after: with BUILDRISK_DEADLINE_CREDITEVAL two to three
// minutes ahead and a creditEval that needs four (484 calls at CREDIT's
// rate limit of 2 a second), GET /v1/jobs/creditEval shows a
// forecastDoneAt after its deadline, marked at-risk, and
// buildrisk_job_deadline_forecast_seconds{job="creditEval"} is positive,
// within a minute of the run's start.
func TestDeadline_ForecastWarnsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	deadline := time.Now().Add(3 * time.Minute).Truncate(time.Minute) // two to three minutes ahead
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_DEADLINE_CREDITEVAL": deadline.In(seoul).Format("15:04"),
		"BUILDRISK_RATE_CREDIT":         "2",
	}})
	s.SeedExposure(440)
	wantDeadline := deadline.UTC().Format(time.RFC3339)

	// Nothing runs: the next deadline, no forecast; a job without a
	// deadline shows none.
	_, job := s.Get("/v1/jobs/creditEval")
	require.Equal(t, wantDeadline, job["deadline"])
	require.Nil(t, job["forecastDoneAt"])
	require.Equal(t, "late", job["deadlineStatus"], "never completed: the deadline before was missed")
	_, other := s.Get("/v1/jobs/aptTrade")
	require.Nil(t, other["deadline"])
	require.Nil(t, other["deadlineStatus"])

	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.ForecastInterval = 500 * time.Millisecond })
	accepted := s.RequestCreditEval(`{}`)
	require.Equal(t, float64(484), accepted["estimatedCalls"])
	var forecastDoneAt time.Time
	apptest.WaitUntil(t, time.Minute, "a forecast after the deadline", func() bool {
		_, job = s.Get("/v1/jobs/creditEval")
		at, ok := job["forecastDoneAt"].(string)
		if !ok {
			return false
		}
		forecastDoneAt, err = time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		return forecastDoneAt.After(deadline)
	})
	require.True(t, time.Now().Before(deadline), "the warning comes before the deadline")
	require.Equal(t, wantDeadline, job["deadline"], "the deadline after the request was made")
	require.Equal(t, "at-risk", job["deadlineStatus"])
	lateBy := s.Metric(observability.MetricJobDeadlineForecast, map[string]string{"job": "creditEval"})
	require.Positive(t, lateBy)
	t.Logf("forecast %s after the deadline; the gauge says %.0f s", forecastDoneAt.Sub(deadline).Round(time.Second), lateBy)

	// The run is not waited for: stopped, it ends the test.
	status, out := s.Post("/v1/jobs/creditEval/stop", "")
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
}

// forecastSample is one forecast a run recorded, read back with the
// database's clock (the clock its execution's end is written with).
type forecastSample struct {
	at, forecast time.Time
	execution    int64
}

// recordForecasts reads the running creditEval execution's forecast every
// 100 ms until stop is called, and returns what it read.
func recordForecasts(t *testing.T, s *apptest.System) (stop func() []forecastSample) {
	var (
		mu      sync.Mutex
		samples []forecastSample
		wg      sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			var sample forecastSample
			err := s.Pool.QueryRow(context.Background(), `
				SELECT now(), id, forecast_done_at FROM job_execution
				WHERE job = 'creditEval' AND status IN ('STARTING', 'STARTED', 'STOPPING') AND forecast_done_at IS NOT NULL`).
				Scan(&sample.at, &sample.execution, &sample.forecast)
			if err == nil {
				mu.Lock()
				samples = append(samples, sample)
				mu.Unlock()
			}
		}
	})
	return func() []forecastSample {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return samples
	}
}

// completedAt is when the request's execution completed (for a resumed
// run, pass the resume's request).
func completedAt(t *testing.T, s *apptest.System, requestID string) time.Time {
	t.Helper()
	var end time.Time
	require.NoError(t, s.Pool.QueryRow(context.Background(), `
		SELECT ended_at FROM job_execution WHERE request_id = $1::bigint AND status = 'COMPLETED'`, requestID).Scan(&end))
	return end
}

// forecastError is how far off a forecast was, as a share of the time
// that was left when it was made.
func forecastError(sample forecastSample, end time.Time) float64 {
	return math.Abs(sample.forecast.Sub(end).Seconds()) / end.Sub(sample.at).Seconds()
}

// worstError is the largest forecastError of the samples taken from after
// on, while more than minLeft was left; n is how many were judged.
func worstError(samples []forecastSample, end, after time.Time, minLeft time.Duration) (worst float64, n int) {
	for _, sample := range samples {
		if sample.at.Before(after) || end.Sub(sample.at) < minLeft {
			continue
		}
		worst, n = max(worst, forecastError(sample, end)), n+1
	}
	return worst, n
}

// Window and interval of the accuracy tests' forecasts: short, so that
// runs of a few seconds show how a forecast follows a change of pace.
const (
	accuracyWindow   = 3 * time.Second
	accuracyInterval = 200 * time.Millisecond
	// accuracyBound is the largest error, as a share of the time left,
	// a forecast made one window after a change of pace may have.
	accuracyBound = 0.35
)

func tuneForecast(fanOut int) func(*worker.Config, *batch.Config) {
	return func(_ *worker.Config, rc *batch.Config) {
		rc.FanOut, rc.ForecastWindow, rc.ForecastInterval = fanOut, accuracyWindow, accuracyInterval
	}
}

// The forecast follows a provider that slows down mid-run: at FANOUT 2,
// calls of 100 ms become calls of 300 ms after 100 calls; one window
// later, every forecast is within accuracyBound of the run's real end.
func TestForecastAccuracy_ProviderSlowsDownMidRun(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 100 * time.Millisecond}})
	s.SeedExposure(300)
	s.StartWorkerWith(s.Pool, tuneForecast(2))
	stop := recordForecasts(t, s)
	id := s.RequestCreditEval(`{}`)["requestId"].(string)
	apptest.WaitUntil(t, time.Minute, "100 calls", func() bool { return s.Fake.Stats().Total >= 100 })
	slowed := time.Now()
	slow := s.Fake.Config()
	slow.Latency = 300 * time.Millisecond
	s.Fake.SetConfig(slow)
	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	samples := stop()
	end := completedAt(t, s, id)

	var lastBefore forecastSample
	for _, sample := range samples {
		if sample.at.Before(slowed) {
			lastBefore = sample
		}
	}
	after, n := worstError(samples, end, slowed.Add(accuracyWindow+accuracyInterval), 2*time.Second)
	t.Logf("slowdown: %d forecasts; the last before the slowdown %.0f%% off (it cannot know), from one window after it worst %.0f%% off (%d forecasts)",
		len(samples), 100*forecastError(lastBefore, end), 100*after, n)
	require.Positive(t, n)
	require.LessOrEqual(t, after, accuracyBound)
}

// The forecast knows the budget: with a CREDIT cap of 250 calls a day, 130
// of them spent already, a run of 330 (maxCalls 250, so that what is left
// after the cap stop fits one day and resumes) is forecast to end past the
// reset from its first seconds, and the run, stopped by the cap and
// resumed at the reset (cap in BUILDRISK_AUTO_RESUME), ends within
// accuracyBound of what was forecast once the run has a window of pace. The budget's clock runs at the real
// pace, 15 seconds before midnight in Asia/Seoul.
func TestForecastAccuracy_CapReachedMidRun(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	base, realStart := time.Date(2026, 12, 8, 23, 59, 45, 0, seoul), time.Now()
	clock := func() time.Time { return base.Add(time.Since(realStart)) }
	s := apptest.New(t, &apptest.Opts{Now: clock, Fake: fakeupstream.Config{Latency: 100 * time.Millisecond}, Env: map[string]string{
		"BUILDRISK_AUTO_RESUME": "cap", "BUILDRISK_AUTO_RESUME_BACKOFF": "10ms", "BUILDRISK_DAILY_CAP_CREDIT": "250",
	}})
	s.SeedExposure(300)
	_, err = s.Pool.Exec(context.Background(), `INSERT INTO provider_call_budget (provider, day, calls_used) VALUES ('CREDIT', $1, 130)`,
		upstream.Day(clock(), seoul))
	require.NoError(t, err)
	s.StartWorkerWith(s.Pool, tuneForecast(2))
	stop := recordForecasts(t, s)
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{},"maxCalls":250}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	stopped := s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "cap", apptest.Execution(t, stopped)["stopCause"], "%v", stopped)
	resumeID := s.ResumeOf(apptest.Execution(t, stopped)["id"].(string))
	require.NotEmpty(t, resumeID, "%v", stopped)
	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	samples := stop()
	end := completedAt(t, s, resumeID)
	reset := realStart.Add(15 * time.Second)

	var first []forecastSample
	for _, sample := range samples {
		if sample.execution == samples[0].execution {
			first = append(first, sample)
		}
	}
	require.NotEmpty(t, first)
	for _, sample := range first {
		require.True(t, sample.forecast.After(reset), "the capped run is forecast past the reset: %v", sample)
	}
	early, _ := worstError(first, end, time.Time{}, 0)
	capped, n := worstError(first, end, first[0].at.Add(accuracyWindow), 0)
	t.Logf("cap: %d forecasts before the cap stop, each past the reset; in the run's first window worst %.0f%% off the end of the resumed run, from one window into it worst %.0f%% off (%d forecasts)",
		len(first), 100*early, 100*capped, n)
	require.Positive(t, n)
	require.LessOrEqual(t, capped, accuracyBound)
}

// The forecast follows a FANOUT change: a run at FANOUT 2 is drained and
// resumed (drain in BUILDRISK_AUTO_RESUME) by a worker at FANOUT 8, four
// times faster; the resumed execution measures its own pace, and one
// window into it every forecast is within accuracyBound of its end.
func TestForecastAccuracy_FanoutChange(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 100 * time.Millisecond}, Env: map[string]string{
		"BUILDRISK_AUTO_RESUME": "drain", "BUILDRISK_AUTO_RESUME_BACKOFF": "10ms",
	}})
	s.SeedExposure(600)
	slowWorker, _ := s.StartWorkerWith(s.Pool, tuneForecast(2))
	stop := recordForecasts(t, s)
	id := s.RequestCreditEval(`{}`)["requestId"].(string)
	apptest.WaitUntil(t, time.Minute, "60 calls", func() bool { return s.Fake.Stats().Total >= 60 })
	require.NoError(t, slowWorker.Stop(context.Background()))
	drained := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "drain", apptest.Execution(t, drained)["stopCause"], "%v", drained)
	resumeID := s.ResumeOf(apptest.Execution(t, drained)["id"].(string))
	require.NotEmpty(t, resumeID)
	s.StartWorkerWith(s.Pool, tuneForecast(8))
	done := s.WaitRequest(resumeID, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	samples := stop()
	end := completedAt(t, s, resumeID)

	var resumed []forecastSample
	for _, sample := range samples {
		if sample.execution != samples[0].execution {
			resumed = append(resumed, sample)
		}
	}
	require.NotEmpty(t, resumed)
	settled, n := worstError(resumed, end, resumed[0].at.Add(accuracyWindow), time.Second)
	t.Logf("fanout: %d forecasts of the resumed run; from one window into it, worst %.0f%% off (%d forecasts)", len(resumed), 100*settled, n)
	require.Positive(t, n)
	require.LessOrEqual(t, settled, accuracyBound)
}
