package main

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
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

// GET /v1/requests/{id} shows the execution's figures and its instance's
// side by side: a creditEval stopped by maxCalls mid-chunk, then resumed,
// reads consistently — the resumed execution shows what it did, the
// instance what is done, and the instance adds up to its targets.
func TestAccounting_InstanceFiguresAcrossResume(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_FANOUT": "4"}})
	targets := s.seedCreditTargets()
	require.Greater(t, len(targets), 1500, "more than one chunk")
	s.startWorker()

	status, out := s.post("/v1/jobs/creditEval/requests", `{"params":{},"maxCalls":1500}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	first := s.waitRequest(out["requestId"].(string), "DONE", "FAILED")
	exec := execution(t, first)
	require.Equal(t, "STOPPED", exec["status"], "%v", first)
	inst, ok := first["instance"].(map[string]any)
	require.True(t, ok, "no instance: %v", first)
	paid := float64(s.count(`SELECT count(*) FROM credit_grade`))
	require.GreaterOrEqual(t, paid, float64(1500), "the first chunk and the grades of the second that came back")
	require.Equal(t, map[string]any{
		"id": inst["id"], "executions": float64(1), "chunksDone": float64(1),
		"targets": paid, "itemsWritten": paid, "itemsSkipped": float64(0), "itemsFailed": float64(0),
		"externalCalls": exec["externalCalls"],
	}, inst)
	require.Equal(t, paid, exec["itemsWritten"])

	resumed := s.requestCreditEval(`{}`)
	require.Equal(t, exec["id"], resumed["resumesExecutionId"])
	done := s.waitRequest(resumed["requestId"].(string), "DONE", "FAILED")
	exec2 := execution(t, done)
	require.Equal(t, "COMPLETED", exec2["status"], "%v", done)
	inst2 := done["instance"].(map[string]any)
	require.Equal(t, inst["id"], inst2["id"], "the same instance")
	n := float64(len(targets))
	require.Equal(t, n, exec2["targets"])
	require.Equal(t, n-paid, exec2["itemsWritten"], "the execution: what this run did")
	require.Equal(t, map[string]any{
		"id": inst["id"], "executions": float64(2), "chunksDone": exec2["chunksTotal"],
		"targets": n, "itemsWritten": n, "itemsSkipped": float64(0), "itemsFailed": float64(0),
		"externalCalls": exec["externalCalls"].(float64) + exec2["externalCalls"].(float64),
	}, inst2, "the instance: what is done, adding up to the targets")

	// The list leaves the instance out (one query for a page of requests).
	_, list := s.get("/v1/requests?job=creditEval")
	for _, r := range list["requests"].([]any) {
		require.Nil(t, r.(map[string]any)["instance"])
	}
}

// stockPrice keeps what was paid for too: maxCalls stops it in its second
// chunk, whose prices already fetched are committed; the resume calls only
// the companies without a price, so no company is ever called twice.
func TestAccounting_StockPriceKeepsPaidPrices(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Companies: 1500}})
	s.startRadarWorker()
	s.runJob(jobs.CorpCodeSync, `{}`)
	_, listed := fakeCounts(s)
	require.Greater(t, listed, 140, "more than one chunk")

	status, out := s.post("/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"},"maxCalls":130}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	stopped := s.waitRequest(out["requestId"].(string), "DONE", "FAILED")
	exec := execution(t, stopped)
	require.Equal(t, "STOPPED", exec["status"], "%v", stopped)
	paid := len(s.callsPerKey(fakeupstream.EndpointStockPrice))
	require.GreaterOrEqual(t, paid, 130)
	require.Equal(t, paid, s.count(`SELECT count(*) FROM stock_price`), "every price paid for is committed, the second chunk's included")
	require.Equal(t, float64(paid), exec["itemsWritten"])

	_, done := s.runJob(jobs.StockPrice, `{"params":{"date":"2025-03-14"}}`)
	exec = execution(t, done)
	require.Equal(t, float64(listed-paid), exec["itemsWritten"])
	require.Equal(t, float64(listed), exec["targets"])
	require.Equal(t, float64(listed), exec["domainRows"])
	calls := s.callsPerKey(fakeupstream.EndpointStockPrice)
	require.Len(t, calls, listed)
	for key, n := range calls {
		require.Equal(t, int64(1), n, "%s called again", key)
	}
}

// SIGTERM to a real worker in the middle of creditEval's first 1,000-item
// chunk at 250 ms a call: the worker stops handing out items, waits for the
// calls in flight, commits them and exits 0 — within one call plus one
// commit, not the 50 s the chunk would take. Every call made is committed,
// and the resume calls none of them again. The exit time is logged as a
// figure, not asserted.
func TestProcess_CreditEvalDrainMidChunk(t *testing.T) {
	t.Parallel()
	const fanOut = 5
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Latency: 250 * time.Millisecond}})
	targets := s.seedCreditTargets()
	require.Greater(t, len(targets), 1000, "a full first chunk")
	worker := startRadar(t, bin, s.processEnv(map[string]string{"BUILDRISK_FANOUT": fmt.Sprint(fanOut), "BUILDRISK_DRAIN_TIMEOUT": "45s"}), "worker")
	worker.waitLine(t, regexp.MustCompile(`worker running`))

	id := s.requestCreditEval(`{}`)["requestId"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for s.count(`SELECT count(*) FROM credit_grade`) < 2*fanOut {
		require.True(t, time.Now().Before(deadline), "no grade committed in 60s")
		time.Sleep(10 * time.Millisecond)
	}
	callsAtSignal := s.fake.Stats().Total
	signalled := time.Now()
	require.NoError(t, worker.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, worker.wait(t, 60*time.Second), "the worker exits 0 after draining")
	t.Logf("SIGTERM to exit: %v (one call is 250 ms; the chunk would take 50 s)", time.Since(signalled))

	out := s.waitRequest(id, "DONE", "FAILED")
	exec := execution(t, out)
	require.Equal(t, "STOPPED", exec["status"], "%v", out)
	require.Equal(t, batch.MessageDrainedInChunk, exec["exitMessage"])
	require.Equal(t, float64(0), exec["chunksDone"], "stopped inside the first chunk")
	called := s.callsPerKey(fakeupstream.EndpointCreditLookup)
	require.LessOrEqual(t, s.fake.Stats().Total-callsAtSignal, int64(fanOut), "no item handed out after the drain beyond those in flight")
	committed := s.count(`SELECT count(*) FROM credit_grade`)
	require.Equal(t, len(called), committed, "every call made was committed, those in flight at the drain included")
	require.Equal(t, float64(committed), exec["itemsWritten"])
	require.Equal(t, float64(committed), out["instance"].(map[string]any)["itemsWritten"])

	cfg := s.fake.Config()
	cfg.Latency = 0
	s.fake.SetConfig(cfg)
	s.startWorker()
	again := s.requestCreditEval(`{}`)
	require.Equal(t, exec["id"], again["resumesExecutionId"])
	done := s.waitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	lookups := s.callsPerKey(fakeupstream.EndpointCreditLookup)
	require.Len(t, lookups, len(targets))
	for code, n := range lookups {
		require.Equal(t, int64(1), n, "%s called again after the drain", code)
	}
}
