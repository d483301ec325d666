package credit_test

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// The lost-events incident's batch (docs/architecture.md), end to end over
// HTTP: a few thousand targets, latency and 5% empty lookups. COMPLETED;
// targets = written + skipped + failed; the domain-row count agrees; no
// rejection; one fallback call per empty lookup. Then a backfill after rows
// went missing re-evaluates only those.
func TestCreditEval_EndToEndAndBackfill(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{
		Fake: fakeupstream.Config{Latency: 3 * time.Millisecond, EmptyRate: 0.05},
		Env:  map[string]string{"BUILDRISK_FANOUT": "8"},
	})
	targets := s.SeedCreditTargets()
	require.Greater(t, len(targets), 1500, "dev seeds a few thousand companies")
	again, err := exposure.Seed(context.Background(), s.Pool, s.Fake.Companies())
	require.NoError(t, err)
	require.Zero(t, again, "a ledger with rows is never reseeded")
	s.StartWorker()

	accepted := s.RequestCreditEval(`{}`)
	require.Equal(t, float64(credit.EstimateCalls(len(targets))), accepted["estimatedCalls"])
	done := s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	n := float64(len(targets))
	require.Equal(t, n, exec["targets"])
	require.Equal(t, exec["targets"], exec["itemsWritten"].(float64)+exec["itemsSkipped"].(float64)+exec["itemsFailed"].(float64))
	require.Equal(t, exec["itemsWritten"], exec["domainRows"], "the two-way count: counters and rows agree")
	require.Equal(t, float64((len(targets)+credit.ChunkSize-1)/credit.ChunkSize), exec["chunksTotal"])

	today := s.CreditToday()
	require.Equal(t, len(targets), s.Count(`SELECT count(*) FROM credit_grade WHERE eval_date = $1`, today))
	require.Zero(t, s.Count(`SELECT count(*) FROM exposure e WHERE outstanding_krw > 0
		AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = $1)`, today), "none missing")
	lookups := s.CallsPerKey(fakeupstream.EndpointCreditLookup)
	require.Len(t, lookups, len(targets))
	for code, calls := range lookups {
		require.Equal(t, int64(1), calls, "lookup of %s", code)
	}
	fallbacks := s.CallsPerKey(fakeupstream.EndpointCreditFallback)
	require.Equal(t, len(fallbacks), s.Count(`SELECT count(*) FROM credit_grade WHERE source = 'fallback'`),
		"fallback calls = empty lookups, each written from its fallback")
	require.InDelta(t, 0.05*n, float64(len(fallbacks)), 0.03*n)
	require.Equal(t, float64(int64(len(targets)+len(fallbacks))), exec["externalCalls"])
	require.Zero(t, s.Metric(observability.MetricFanoutRejections, map[string]string{"job": credit.Name}))
	require.Equal(t, float64(8), s.Metric(observability.MetricFanoutCapacity, map[string]string{"job": credit.Name}))
	require.Zero(t, s.Metric(observability.MetricFanoutInflight, map[string]string{"job": credit.Name}))
	require.Equal(t, n, s.Metric(observability.MetricItems, map[string]string{"job": credit.Name, "outcome": "written"}))

	// 37 grades go missing; a backfill calls for exactly those.
	missing := map[string]bool{}
	for i := 0; len(missing) < 37; i += 41 {
		missing[targets[i]] = true
	}
	codes := apptest.Keys(missing)
	require.Equal(t, int64(37), testfactory.LoseCreditGrades(context.Background(), t, s.Pool, today, codes))
	s.Fake.Reset()
	accepted = s.RequestCreditEval(`{"backfill":true}`)
	require.Equal(t, float64(credit.EstimateCalls(37)), accepted["estimatedCalls"])
	require.Nil(t, accepted["resumesExecutionId"])
	done = s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec = apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(37), exec["targets"])
	require.Equal(t, float64(37), exec["itemsWritten"])
	require.Equal(t, float64(37), exec["domainRows"])
	lookups = s.CallsPerKey(fakeupstream.EndpointCreditLookup)
	require.ElementsMatch(t, codes, apptest.Keys(lookups), "only the missing targets are called")
	require.Equal(t, len(targets), s.Count(`SELECT count(*) FROM credit_grade WHERE eval_date = $1`, today))
}
