package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/upstream/fakeupstream"
	"github.com/buildrisk/radar/observability"
)

// A page shorter than the provider's declared total never completes a
// chunk: with every page short (shortRate 1), aptTrade and filingParse ask
// for the page again, then fail naming it, commit nothing and write no row.
// With the provider answering whole pages again, a new request resumes and
// completes with targets equal to the declared totals.
func TestAccounting_ShortPageNeverCompletes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		job, body, endpoint, table string
	}{
		{
			job:      jobs.AptTrade,
			body:     aptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-02"),
			endpoint: fakeupstream.EndpointAptTrade,
			table:    "apt_trade",
		},
		{
			job:      jobs.FilingParse,
			endpoint: fakeupstream.EndpointFilingList,
			table:    "filing",
		},
	} {
		t.Run(tc.job, func(t *testing.T) {
			t.Parallel()
			s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Companies: 300, ShortRate: 1}})
			s.startWorker()
			body := tc.body
			if tc.job == jobs.FilingParse {
				var codes []string
				for _, c := range s.fake.Companies()[:3] {
					codes = append(codes, fmt.Sprintf("%q", c.CorpCode))
				}
				body = `{"params":{"from":"2025-01-01","to":"2025-12-31","corpCodes":[` + strings.Join(codes, ",") + `]}}`
			}

			failed := s.waitRequest(s.requestJob(tc.job, body)["requestId"].(string), "DONE", "FAILED")
			require.Equal(t, "FAILED", failed["status"], "%v", failed)
			exec := execution(t, failed)
			require.Equal(t, "FAILED", exec["status"])
			require.Contains(t, exec["exitMessage"], "page 1: ")
			require.Contains(t, exec["exitMessage"], "where the declared total of ")
			require.Contains(t, exec["exitMessage"], "after 3 attempts")
			require.Equal(t, float64(0), exec["chunksDone"], "no chunk completed")
			require.Zero(t, s.count(`SELECT count(*) FROM `+tc.table))
			calls := s.callsPerKey(tc.endpoint)
			require.Len(t, calls, 1, "the first chunk failed; no other chunk was called")
			for key, n := range calls {
				require.Equal(t, int64(3), n, "%s: asked three times", key)
			}

			cfg := s.fake.Config()
			cfg.ShortRate = 0
			s.fake.SetConfig(cfg)
			_, done := s.runJob(tc.job, body)
			exec = execution(t, done)
			stored := s.count(`SELECT count(*) FROM ` + tc.table)
			require.Positive(t, stored)
			require.Equal(t, float64(stored), exec["targets"], "targets are the declared totals")
			require.Equal(t, float64(stored), exec["itemsWritten"])
			require.Equal(t, float64(stored), s.metric(observability.MetricItems, map[string]string{"job": tc.job, "outcome": observability.OutcomeWritten}))
		})
	}
}
