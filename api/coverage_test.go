package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// The done-when: after a COMPLETED creditEval over 300 targets,
// coverage is 300 targets and 0 missing; 7 grades deleted behind the
// runner's back show as 7 missing in the gauge, GET /v1/coverage (and its
// missing list) and the console; an onlyMissing request calls the provider
// exactly 7 times and brings missing back to 0.
func TestCoverage_LostRowsSeenAndRepairedByOnlyMissing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "200ms"}})
	ctx := context.Background()
	companies := s.Fake.Companies()
	require.Greater(t, len(companies), 320)
	var codes []string
	for _, c := range companies[:320] {
		codes = append(codes, c.CorpCode)
	}
	// 300 targets; 20 companies that repaid (outstanding 0) are not.
	ledger := map[string]int64{}
	for i, code := range codes {
		ledger[code] = 1_000_000
		if i >= 300 {
			ledger[code] = 0
		}
	}
	testfactory.Exposure(ctx, t, s.Pool, ledger)
	targets := codes[:300]
	s.StartWorker()

	done := s.WaitRequest(s.RequestCreditEval(`{}`)["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	s.WaitCoverageGauge(credit.Name, 0)
	require.Equal(t, float64(300), s.Metric(observability.MetricCoverageTargets, map[string]string{"job": credit.Name}))
	asOf := s.Metric(observability.MetricCoverageAsOf, map[string]string{"job": credit.Name})
	require.InDelta(t, float64(time.Now().Unix()), asOf, 60)
	today := s.CreditToday()
	y, m, d := today.Date()
	require.Equal(t, float64(time.Date(y, m, d, 0, 0, 0, 0, s.Env.Location).Unix()),
		s.Metric(observability.MetricCoverageDataDate, map[string]string{"job": credit.Name}))
	c := s.CoverageOf(credit.Name)
	require.Equal(t, float64(300), c["targets"])
	require.Equal(t, float64(300), c["current"])
	require.Equal(t, float64(0), c["missing"])
	require.Equal(t, s.CreditToday().Format(time.DateOnly), c["dataDate"])
	require.Equal(t, true, c["onlyMissing"])

	// 7 grades deleted behind the runner's back.
	lost := []string{targets[3], targets[50], targets[51], targets[120], targets[200], targets[250], targets[299]}
	require.Equal(t, int64(7), testfactory.LoseCreditGrades(ctx, t, s.Pool, time.Time{}, lost))
	s.WaitCoverageGauge(credit.Name, 7)
	// The api's answer and the gauge are each refreshed at most every
	// BUILDRISK_COVERAGE_MAX_AGE: the answer follows within it too.
	s.Eventually("GET /v1/coverage to count the 7 lost grades", func() bool {
		return s.CoverageOf(credit.Name)["missing"] == float64(7)
	})
	c = s.CoverageOf(credit.Name)
	require.Equal(t, float64(300), c["targets"])
	require.Equal(t, float64(7), c["missing"])

	// The missing list, in pages of 5.
	status, page := s.Get("/v1/coverage/creditEval/missing?limit=5")
	require.Equal(t, http.StatusOK, status, "%v", page)
	require.NotNil(t, page["nextCursor"])
	listed := page["missing"].([]any)
	status, page = s.Get("/v1/coverage/creditEval/missing?limit=5&cursor=" + page["nextCursor"].(string))
	require.Equal(t, http.StatusOK, status, "%v", page)
	require.Nil(t, page["nextCursor"])
	listed = append(listed, page["missing"].([]any)...)
	require.Equal(t, fmt.Sprint(lost), fmt.Sprint(listed))
	status, _ = s.Get("/v1/coverage/aptTrade/missing")
	require.Equal(t, http.StatusNotFound, status)

	// The console shows the coverage section, served from the same API.
	console := apptest.NewConsoleClient(t, s.API)
	console.Login(apptest.ViewerToken)
	page2 := console.Page()
	require.Contains(t, page2, `id="coverage"`)

	// onlyMissing: exactly the 7, then nothing missing.
	s.Fake.Reset()
	accepted := s.RequestCreditEval(`{"onlyMissing":true}`)
	require.Equal(t, float64(credit.EstimateCalls(7)), accepted["estimatedCalls"])
	done = s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(7), exec["targets"])
	require.Equal(t, int64(7), s.Fake.Stats().Total, "the provider is called exactly 7 times")
	require.ElementsMatch(t, lost, apptest.Keys(s.CallsPerKey(fakeupstream.EndpointCreditLookup)))
	s.WaitCoverageGauge(credit.Name, 0)
	s.Eventually("GET /v1/coverage to count nothing missing", func() bool {
		return s.CoverageOf(credit.Name)["missing"] == float64(0)
	})
}

// Coverage is exported for every job with a definition, from the api's
// process without any run, and a count that cannot run is counted.
func TestCoverage_ExportedForEveryDefinedJob(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "200ms"}})
	for _, job := range []string{credit.Name, stockprice.Name, riskmetric.Name, riskrule.Name} {
		s.WaitCoverageGauge(job, 0)
		require.Zero(t, s.Metric(observability.MetricCoverageTargets, map[string]string{"job": job}))
		require.Zero(t, s.Metric(observability.MetricCoverageCheckFailures, map[string]string{"job": job}))
	}
	_, ok := apptest.MetricLine(s.ScrapeAPI(), observability.MetricCoverageMissing, `job="aptTrade"`)
	require.False(t, ok, "no coverage series for a job without a definition")
	status, out := s.Get("/v1/coverage")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, out["coverage"], 4)
}

// A worker exports the fan-out gauges of every fan-out job from its start,
// before any fan-out job ran.
func TestFanOutGauges_ExportedFromStart(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_FANOUT": "6"}})
	for _, job := range []string{credit.Name, stockprice.Name} {
		_, ok := apptest.MetricLine(s.ScrapeAPI(), observability.MetricFanoutCapacity, `job="`+job+`"`)
		require.False(t, ok, "no worker yet")
	}
	s.StartWorker()
	exposition := s.ScrapeAPI() // the test's api and worker share one registry
	for _, job := range []string{credit.Name, stockprice.Name} {
		apptest.RequireMetric(t, exposition, observability.MetricFanoutCapacity, 6, `job="`+job+`"`)
		apptest.RequireMetric(t, exposition, observability.MetricFanoutInflight, 0, `job="`+job+`"`)
	}
}

// Every 413 is counted in buildrisk_http_refusals_total{reason}.
func TestHTTPRefusals_BodyTooLargeCounted(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_MAX_BODY_BYTES": "1024"}})
	labels := map[string]string{"reason": observability.RefusalBodyTooLarge}
	status, _ := s.Post("/v1/jobs/aptTrade/requests", `{"params":{"pad":"`+strings.Repeat("x", 2048)+`"}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, float64(1), s.Metric(observability.MetricHTTPRefusals, labels))
}
