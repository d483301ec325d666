package credit_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// Benchmark scale. The figure is 40,000 targets at 20 ms per call,
// 5% empty lookups and BUILDRISK_FANOUT 5: ideally 250 calls/s, about 170 s.
// `make bench` runs 4,000 targets; BUILDRISK_BENCH_TARGETS=40000 runs the
// full scale (and BUILDRISK_FANOUT another pool size).
const (
	benchTargetsDefault = 4000
	benchLatency        = 20 * time.Millisecond
	benchEmptyRate      = 0.05
	benchFanOutDefault  = 5
)

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// BenchmarkCreditEval40k runs creditEval end to end (runner, fan-out,
// PostgreSQL, the fake upstream over HTTP with 20 ms latency and 5% empty
// lookups) and reports its call throughput as a ratio of the ideal
// BUILDRISK_FANOUT / latency (ideal-ratio; the issue requires ≥ 0.90).
func BenchmarkCreditEval40k(b *testing.B) {
	targets := envInt(b, "BUILDRISK_BENCH_TARGETS", benchTargetsDefault)
	fanOut := envInt(b, "BUILDRISK_FANOUT", benchFanOutDefault)
	bundle := setup(b, setupOpts{targets: targets, fanOut: fanOut, fake: fakeupstream.Config{Latency: benchLatency, EmptyRate: benchEmptyRate}})
	ideal := float64(fanOut) / benchLatency.Seconds()

	// What one call really costs on this machine (latency + the client's
	// budget spend, HTTP, scheduling), measured serially: the fan-out can at
	// best keep fanOut of these busy, so calls/s ÷ (fanOut / call) is the
	// pool's own efficiency, apart from the call path's overhead.
	const probeCalls = 100
	caller := bundle.client.NewCaller("benchProbe", 0)
	probeStart := time.Now()
	for _, code := range bundle.targets[:min(probeCalls, len(bundle.targets))] {
		if _, err := caller.Get(context.Background(), upstream.EndpointCreditFallback, upstream.CreditFallbackQuery(code)); err != nil {
			b.Fatal(err)
		}
	}
	callCost := time.Since(probeStart) / time.Duration(min(probeCalls, len(bundle.targets)))
	achievable := float64(fanOut) / callCost.Seconds()

	var calls int64
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		bundle.fake.Reset()
		id, _ := bundle.request(b, `{}`, nil)
		began := time.Now()
		out, err := bundle.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
		elapsed += time.Since(began)
		if err != nil {
			b.Fatal(err)
		}
		if out.Status != "COMPLETED" {
			b.Fatalf("%s: %s", out.Status, out.Message)
		}
		b.StopTimer()
		exec, err := queries.New().JobExecutionGetByID(context.Background(), bundle.pool, out.ExecutionID)
		if err != nil {
			b.Fatal(err)
		}
		if exec.Targets != int64(targets) || exec.ItemsWritten+exec.ItemsSkipped+exec.ItemsFailed != exec.Targets ||
			exec.DomainRows == nil || *exec.DomainRows != exec.ItemsWritten {
			b.Fatalf("accounting: targets %d written %d skipped %d failed %d domainRows %v",
				exec.Targets, exec.ItemsWritten, exec.ItemsSkipped, exec.ItemsFailed, exec.DomainRows)
		}
		calls += bundle.fake.Stats().Total
		b.StartTimer()
	}
	b.StopTimer()
	perSecond := float64(calls) / elapsed.Seconds()
	b.ReportMetric(perSecond, "calls/s")
	b.ReportMetric(perSecond/ideal, "ideal-ratio")
	b.ReportMetric(perSecond/achievable, "pool-efficiency")
	b.ReportMetric(float64(targets)*float64(b.N)/elapsed.Seconds(), "targets/s")
	b.Logf("%d targets, fan-out %d, %s latency: %d calls in %s = %.1f calls/s, %.1f%% of the ideal %.0f calls/s; "+
		"one call costs %s here, so the pool ran at %.1f%% of the achievable %.1f calls/s",
		targets, fanOut, benchLatency, calls, elapsed.Round(time.Millisecond), perSecond, 100*perSecond/ideal, ideal,
		callCost.Round(10*time.Microsecond), 100*perSecond/achievable, achievable)
}
