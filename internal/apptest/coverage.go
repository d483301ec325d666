package apptest

import (
	"net/http"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
)

// CoverageOf returns job's entry of GET /v1/coverage.
func (s *System) CoverageOf(job string) map[string]any {
	s.T.Helper()
	status, out := s.Get("/v1/coverage")
	require.Equal(s.T, http.StatusOK, status, "%v", out)
	for _, c := range out["coverage"].([]any) {
		if c := c.(map[string]any); c["job"] == job {
			return c
		}
	}
	s.T.Fatalf("no coverage of %s in %v", job, out)
	return nil
}

// WaitCoverageGauge polls buildrisk_coverage_missing{job} until it is want,
// failing the test after a minute.
func (s *System) WaitCoverageGauge(job string, want float64) {
	s.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		// Scraped, so an absent series never reads as 0.
		v, ok := MetricLine(s.ScrapeAPI(), observability.MetricCoverageMissing, `job="`+job+`"`)
		if ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("%s{job=%q} is %v (exported: %v) after a minute, want %v", observability.MetricCoverageMissing, job, v, ok, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
