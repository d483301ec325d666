package main

import (
	"fmt"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// stockPrice keeps what was paid for too: maxCalls stops it in its second
// chunk, whose prices already fetched are committed; the resume calls only
// the companies without a price, so no company is ever called twice.
func TestAccounting_StockPriceKeepsPaidPrices(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: 1500}})
	s.StartRadarWorker()
	s.RunJob(corpcode.Name, `{}`)
	_, listed := apptest.FakeCounts(s)
	require.Greater(t, listed, 140, "more than one chunk")

	status, out := s.Post("/v1/jobs/stockPrice/requests", `{"params":{"date":"2025-03-14"},"maxCalls":130}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	stopped := s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, stopped)
	require.Equal(t, "STOPPED", exec["status"], "%v", stopped)
	paid := len(s.CallsPerKey(fakeupstream.EndpointStockPrice))
	require.GreaterOrEqual(t, paid, 130)
	require.Equal(t, paid, s.Count(`SELECT count(*) FROM stock_price`), "every price paid for is committed, the second chunk's included")
	require.Equal(t, float64(paid), exec["itemsWritten"])

	_, done := s.RunJob(stockprice.Name, `{"params":{"date":"2025-03-14"}}`)
	exec = apptest.Execution(t, done)
	require.Equal(t, float64(listed-paid), exec["itemsWritten"])
	require.Equal(t, float64(listed), exec["targets"])
	require.Equal(t, float64(listed), exec["domainRows"])
	calls := s.CallsPerKey(fakeupstream.EndpointStockPrice)
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
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 250 * time.Millisecond}})
	targets := s.SeedCreditTargets()
	require.Greater(t, len(targets), 1000, "a full first chunk")
	worker := startRadar(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_FANOUT": fmt.Sprint(fanOut), "BUILDRISK_DRAIN_TIMEOUT": "45s"}), "worker")
	worker.waitLine(t, regexp.MustCompile(`worker running`))

	id := s.RequestCreditEval(`{}`)["requestId"].(string)
	apptest.WaitUntil(t, 60*time.Second, "grades committed", func() bool {
		return s.Count(`SELECT count(*) FROM credit_grade`) >= 2*fanOut
	})
	callsAtSignal := s.Fake.Stats().Total
	signalled := time.Now()
	require.NoError(t, worker.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, worker.Wait(t, 60*time.Second), "the worker exits 0 after draining")
	t.Logf("SIGTERM to exit: %v (one call is 250 ms; the chunk would take 50 s)", time.Since(signalled))

	out := s.WaitRequest(id, "DONE", "FAILED")
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"], "%v", out)
	require.Equal(t, batch.MessageDrainedInChunk, exec["exitMessage"])
	require.Equal(t, float64(0), exec["chunksDone"], "stopped inside the first chunk")
	called := s.CallsPerKey(fakeupstream.EndpointCreditLookup)
	require.LessOrEqual(t, s.Fake.Stats().Total-callsAtSignal, int64(fanOut), "no item handed out after the drain beyond those in flight")
	committed := s.Count(`SELECT count(*) FROM credit_grade`)
	require.Equal(t, len(called), committed, "every call made was committed, those in flight at the drain included")
	require.Equal(t, float64(committed), exec["itemsWritten"])
	require.Equal(t, float64(committed), out["instance"].(map[string]any)["itemsWritten"])

	cfg := s.Fake.Config()
	cfg.Latency = 0
	s.Fake.SetConfig(cfg)
	s.StartWorker()
	again := s.RequestCreditEval(`{}`)
	require.Equal(t, exec["id"], again["resumesExecutionId"])
	done := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	lookups := s.CallsPerKey(fakeupstream.EndpointCreditLookup)
	require.Len(t, lookups, len(targets))
	for code, n := range lookups {
		require.Equal(t, int64(1), n, "%s called again after the drain", code)
	}
}
