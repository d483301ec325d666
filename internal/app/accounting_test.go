package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/upstream/fakeupstream"
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
			job:      apttrade.Name,
			body:     apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-02"),
			endpoint: fakeupstream.EndpointAptTrade,
			table:    "apt_trade",
		},
		{
			job:      filing.Name,
			endpoint: fakeupstream.EndpointFilingList,
			table:    "filing",
		},
	} {
		t.Run(tc.job, func(t *testing.T) {
			t.Parallel()
			s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: 300, ShortRate: 1}})
			s.StartWorker()
			body := tc.body
			if tc.job == filing.Name {
				var codes []string
				for _, c := range s.Fake.Companies()[:3] {
					codes = append(codes, fmt.Sprintf("%q", c.CorpCode))
				}
				body = `{"params":{"from":"2025-01-01","to":"2025-12-31","corpCodes":[` + strings.Join(codes, ",") + `]}}`
			}

			failed := s.WaitRequest(s.RequestJob(tc.job, body)["requestId"].(string), "DONE", "FAILED")
			require.Equal(t, "FAILED", failed["status"], "%v", failed)
			exec := apptest.Execution(t, failed)
			require.Equal(t, "FAILED", exec["status"])
			require.Contains(t, exec["exitMessage"], "page 1: ")
			require.Contains(t, exec["exitMessage"], "where the declared total of ")
			require.Contains(t, exec["exitMessage"], "after 3 attempts")
			require.Equal(t, float64(0), exec["chunksDone"], "no chunk completed")
			require.Zero(t, s.Count(`SELECT count(*) FROM `+tc.table))
			calls := s.CallsPerKey(tc.endpoint)
			require.Len(t, calls, 1, "the first chunk failed; no other chunk was called")
			for key, n := range calls {
				require.Equal(t, int64(3), n, "%s: asked three times", key)
			}

			cfg := s.Fake.Config()
			cfg.ShortRate = 0
			s.Fake.SetConfig(cfg)
			_, done := s.RunJob(tc.job, body)
			exec = apptest.Execution(t, done)
			stored := s.Count(`SELECT count(*) FROM ` + tc.table)
			require.Positive(t, stored)
			require.Equal(t, float64(stored), exec["targets"], "targets are the declared totals")
			require.Equal(t, float64(stored), exec["itemsWritten"])
			require.Equal(t, float64(stored), s.Metric(observability.MetricItems, map[string]string{"job": tc.job, "outcome": observability.OutcomeWritten}))
		})
	}
}

// GET /v1/requests/{id} shows the execution's figures and its instance's
// side by side: a creditEval stopped by maxCalls mid-chunk, then resumed,
// reads consistently — the resumed execution shows what it did, the
// instance what is done, and the instance adds up to its targets.
func TestAccounting_InstanceFiguresAcrossResume(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_FANOUT": "4"}, Fake: fakeupstream.Config{Companies: 6000}})
	targets := s.SeedCreditTargets()
	maxCalls := credit.ChunkSize + credit.ChunkSize/2 // the first chunk and part of the second
	require.Greater(t, len(targets), maxCalls, "more than one chunk")
	s.StartWorker()

	status, out := s.Post("/v1/jobs/creditEval/requests", fmt.Sprintf(`{"params":{},"maxCalls":%d}`, maxCalls))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	first := s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, first)
	require.Equal(t, "STOPPED", exec["status"], "%v", first)
	inst, ok := first["instance"].(map[string]any)
	require.True(t, ok, "no instance: %v", first)
	paid := float64(s.Count(`SELECT count(*) FROM credit_grade`))
	require.GreaterOrEqual(t, paid, float64(maxCalls), "the first chunk and the grades of the second that came back")
	require.Equal(t, map[string]any{
		"id": inst["id"], "executions": float64(1), "chunksDone": float64(1), "chunksPlanned": exec["chunksTotal"],
		"targets": paid, "itemsWritten": paid, "itemsSkipped": float64(0), "itemsFailed": float64(0),
		"externalCalls": exec["externalCalls"],
	}, inst)
	require.Equal(t, paid, exec["itemsWritten"])

	resumed := s.RequestCreditEval(`{}`)
	require.Equal(t, exec["id"], resumed["resumesExecutionId"])
	done := s.WaitRequest(resumed["requestId"].(string), "DONE", "FAILED")
	exec2 := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec2["status"], "%v", done)
	inst2 := done["instance"].(map[string]any)
	require.Equal(t, inst["id"], inst2["id"], "the same instance")
	n := float64(len(targets))
	require.Equal(t, n, exec2["targets"])
	require.Equal(t, n-paid, exec2["itemsWritten"], "the execution: what this run did")
	require.Equal(t, inst["chunksPlanned"], exec2["chunksBefore"].(float64)+exec2["chunksTotal"].(float64), "its own chunks and those before it make the plan")
	require.Equal(t, map[string]any{
		"id": inst["id"], "executions": float64(2), "chunksDone": inst["chunksPlanned"], "chunksPlanned": inst["chunksPlanned"],
		"targets": n, "itemsWritten": n, "itemsSkipped": float64(0), "itemsFailed": float64(0),
		"externalCalls": exec["externalCalls"].(float64) + exec2["externalCalls"].(float64),
	}, inst2, "the instance: what is done, adding up to the targets")

	// The list leaves the instance out (one query for a page of requests).
	_, list := s.Get("/v1/requests?job=creditEval")
	for _, r := range list["requests"].([]any) {
		require.Nil(t, r.(map[string]any)["instance"])
	}
}
