package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// coverageOf returns job's entry of GET /v1/coverage.
func (s *testSystem) coverageOf(job string) map[string]any {
	s.t.Helper()
	status, out := s.get("/v1/coverage")
	require.Equal(s.t, http.StatusOK, status, "%v", out)
	for _, c := range out["coverage"].([]any) {
		if c := c.(map[string]any); c["job"] == job {
			return c
		}
	}
	s.t.Fatalf("no coverage of %s in %v", job, out)
	return nil
}

// waitCoverageGauge polls buildrisk_coverage_missing{job} until it is want,
// failing the test after a minute.
func (s *testSystem) waitCoverageGauge(job string, want float64) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		// Scraped, so an absent series never reads as 0.
		v, ok := metricLine(s.scrapeAPI(), observability.MetricCoverageMissing, `job="`+job+`"`)
		if ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s{job=%q} is %v (exported: %v) after a minute, want %v", observability.MetricCoverageMissing, job, v, ok, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The done-when: after a COMPLETED creditEval over 300 targets,
// coverage is 300 targets and 0 missing; 7 grades deleted behind the
// runner's back show as 7 missing in the gauge, GET /v1/coverage (and its
// missing list) and the console; an onlyMissing request calls the provider
// exactly 7 times and brings missing back to 0.
func TestCoverage_LostRowsSeenAndRepairedByOnlyMissing(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "200ms"}})
	ctx := context.Background()
	companies := s.fake.Companies()
	require.Greater(t, len(companies), 320)
	var codes []string
	for _, c := range companies[:320] {
		codes = append(codes, c.CorpCode)
	}
	// 300 targets; 20 companies that repaid (outstanding 0) are not.
	_, err := s.pool.Exec(ctx, `INSERT INTO exposure (corp_code, outstanding_krw)
		SELECT c, CASE WHEN o > 300 THEN 0 ELSE 1000000 END FROM unnest($1::text[]) WITH ORDINALITY AS u(c, o)`, codes)
	require.NoError(t, err)
	targets := codes[:300]
	s.startWorker()

	done := s.waitRequest(s.requestCreditEval(`{}`)["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	s.waitCoverageGauge(jobs.CreditEval, 0)
	require.Equal(t, float64(300), s.metric(observability.MetricCoverageTargets, map[string]string{"job": jobs.CreditEval}))
	asOf := s.metric(observability.MetricCoverageAsOf, map[string]string{"job": jobs.CreditEval})
	require.InDelta(t, float64(time.Now().Unix()), asOf, 60)
	today := s.creditToday()
	y, m, d := today.Date()
	require.Equal(t, float64(time.Date(y, m, d, 0, 0, 0, 0, s.env.Location).Unix()),
		s.metric(observability.MetricCoverageDataDate, map[string]string{"job": jobs.CreditEval}))
	c := s.coverageOf(jobs.CreditEval)
	require.Equal(t, float64(300), c["targets"])
	require.Equal(t, float64(300), c["current"])
	require.Equal(t, float64(0), c["missing"])
	require.Equal(t, s.creditToday().Format(time.DateOnly), c["dataDate"])
	require.Equal(t, true, c["onlyMissing"])

	// 7 grades deleted behind the runner's back.
	lost := []string{targets[3], targets[50], targets[51], targets[120], targets[200], targets[250], targets[299]}
	n, err := s.pool.Exec(ctx, `DELETE FROM credit_grade WHERE corp_code = ANY($1)`, lost)
	require.NoError(t, err)
	require.Equal(t, int64(7), n.RowsAffected())
	s.waitCoverageGauge(jobs.CreditEval, 7)
	// The api's answer and the gauge are each refreshed at most every
	// BUILDRISK_COVERAGE_MAX_AGE: the answer follows within it too.
	s.eventually("GET /v1/coverage to count the 7 lost grades", func() bool {
		return s.coverageOf(jobs.CreditEval)["missing"] == float64(7)
	})
	c = s.coverageOf(jobs.CreditEval)
	require.Equal(t, float64(300), c["targets"])
	require.Equal(t, float64(7), c["missing"])

	// The missing list, in pages of 5.
	status, page := s.get("/v1/coverage/creditEval/missing?limit=5")
	require.Equal(t, http.StatusOK, status, "%v", page)
	require.NotNil(t, page["nextCursor"])
	listed := page["missing"].([]any)
	status, page = s.get("/v1/coverage/creditEval/missing?limit=5&cursor=" + page["nextCursor"].(string))
	require.Equal(t, http.StatusOK, status, "%v", page)
	require.Nil(t, page["nextCursor"])
	listed = append(listed, page["missing"].([]any)...)
	require.Equal(t, fmt.Sprint(lost), fmt.Sprint(listed))
	status, _ = s.get("/v1/coverage/aptTrade/missing")
	require.Equal(t, http.StatusNotFound, status)

	// The console shows the coverage section, served from the same API.
	console := newConsoleClient(t, s.api)
	console.login(testViewerToken)
	page2 := console.page()
	require.Contains(t, page2, `id="coverage"`)

	// onlyMissing: exactly the 7, then nothing missing.
	s.fake.Reset()
	accepted := s.requestCreditEval(`{"onlyMissing":true}`)
	require.Equal(t, float64(jobs.CreditEvalEstimate(7)), accepted["estimatedCalls"])
	done = s.waitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(7), exec["targets"])
	require.Equal(t, int64(7), s.fake.Stats().Total, "the provider is called exactly 7 times")
	require.ElementsMatch(t, lost, keys(s.callsPerKey(fakeupstream.EndpointCreditLookup)))
	s.waitCoverageGauge(jobs.CreditEval, 0)
	s.eventually("GET /v1/coverage to count nothing missing", func() bool {
		return s.coverageOf(jobs.CreditEval)["missing"] == float64(0)
	})
}

// Coverage is exported for every job with a definition, from the api's
// process without any run, and a count that cannot run is counted.
func TestCoverage_ExportedForEveryDefinedJob(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "200ms"}})
	for _, job := range []string{jobs.CreditEval, jobs.StockPrice, jobs.Metrics, jobs.Rules} {
		s.waitCoverageGauge(job, 0)
		require.Zero(t, s.metric(observability.MetricCoverageTargets, map[string]string{"job": job}))
		require.Zero(t, s.metric(observability.MetricCoverageCheckFailures, map[string]string{"job": job}))
	}
	_, ok := metricLine(s.scrapeAPI(), observability.MetricCoverageMissing, `job="aptTrade"`)
	require.False(t, ok, "no coverage series for a job without a definition")
	status, out := s.get("/v1/coverage")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, out["coverage"], 4)
}

// A worker exports the fan-out gauges of every fan-out job from its start,
// before any fan-out job ran.
func TestFanOutGauges_ExportedFromStart(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_FANOUT": "6"}})
	for _, job := range []string{jobs.CreditEval, jobs.StockPrice} {
		_, ok := metricLine(s.scrapeAPI(), observability.MetricFanoutCapacity, `job="`+job+`"`)
		require.False(t, ok, "no worker yet")
	}
	s.startWorker()
	exposition := s.scrapeAPI() // the test's api and worker share one registry
	for _, job := range []string{jobs.CreditEval, jobs.StockPrice} {
		requireMetric(t, exposition, observability.MetricFanoutCapacity, 6, `job="`+job+`"`)
		requireMetric(t, exposition, observability.MetricFanoutInflight, 0, `job="`+job+`"`)
	}
}

// Every 413 is counted in buildrisk_http_refusals_total{reason}.
func TestHTTPRefusals_BodyTooLargeCounted(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_MAX_BODY_BYTES": "1024"}})
	labels := map[string]string{"reason": observability.RefusalBodyTooLarge}
	status, _ := s.post("/v1/jobs/aptTrade/requests", `{"params":{"pad":"`+strings.Repeat("x", 2048)+`"}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, float64(1), s.metric(observability.MetricHTTPRefusals, labels))
}
