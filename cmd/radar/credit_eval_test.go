package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// seedCreditTargets seeds the exposure ledger the way `radar dev` does and
// returns the targets (companies with exposure > 0), in corp code order.
func (s *testSystem) seedCreditTargets() []string {
	s.t.Helper()
	n, err := exposure.Seed(context.Background(), s.pool, s.fake.Companies())
	require.NoError(s.t, err)
	require.Positive(s.t, n)
	rows, err := s.pool.Query(context.Background(), `SELECT corp_code FROM exposure WHERE outstanding_krw > 0 ORDER BY corp_code`)
	require.NoError(s.t, err)
	defer rows.Close()
	var targets []string
	for rows.Next() {
		var code string
		require.NoError(s.t, rows.Scan(&code))
		targets = append(targets, code)
	}
	require.NoError(s.t, rows.Err())
	return targets
}

// requestCreditEval posts a creditEval request and returns its answer.
func (s *testSystem) requestCreditEval(params string) map[string]any {
	s.t.Helper()
	status, out := s.post("/v1/jobs/creditEval/requests", `{"params":`+params+`}`)
	require.Equal(s.t, http.StatusAccepted, status, "%v", out)
	return out
}

// creditToday is the evaluation day of the in-process system right now.
func (s *testSystem) creditToday() time.Time {
	return upstream.Day(time.Now(), s.env.Location)
}

// The lost-events incident's batch (docs/architecture.md), end to end over
// HTTP: a few thousand targets, latency and 5% empty lookups. COMPLETED;
// targets = written + skipped + failed; the domain-row count agrees; no
// rejection; one fallback call per empty lookup. Then a backfill after rows
// went missing re-evaluates only those.
func TestCreditEval_EndToEndAndBackfill(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{
		fake: fakeupstream.Config{Latency: 3 * time.Millisecond, EmptyRate: 0.05},
		env:  map[string]string{"BUILDRISK_FANOUT": "8"},
	})
	targets := s.seedCreditTargets()
	require.Greater(t, len(targets), 1500, "dev seeds a few thousand companies")
	again, err := exposure.Seed(context.Background(), s.pool, s.fake.Companies())
	require.NoError(t, err)
	require.Zero(t, again, "a ledger with rows is never reseeded")
	s.startWorker()

	accepted := s.requestCreditEval(`{}`)
	require.Equal(t, float64(jobs.CreditEvalEstimate(len(targets))), accepted["estimatedCalls"])
	done := s.waitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	n := float64(len(targets))
	require.Equal(t, n, exec["targets"])
	require.Equal(t, exec["targets"], exec["itemsWritten"].(float64)+exec["itemsSkipped"].(float64)+exec["itemsFailed"].(float64))
	require.Equal(t, exec["itemsWritten"], exec["domainRows"], "the two-way count: counters and rows agree")
	require.Equal(t, float64((len(targets)+jobs.CreditEvalChunkSize-1)/jobs.CreditEvalChunkSize), exec["chunksTotal"])

	today := s.creditToday()
	require.Equal(t, len(targets), s.count(`SELECT count(*) FROM credit_grade WHERE eval_date = $1`, today))
	require.Zero(t, s.count(`SELECT count(*) FROM exposure e WHERE outstanding_krw > 0
		AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = $1)`, today), "none missing")
	lookups := s.callsPerKey(fakeupstream.EndpointCreditLookup)
	require.Len(t, lookups, len(targets))
	for code, calls := range lookups {
		require.Equal(t, int64(1), calls, "lookup of %s", code)
	}
	fallbacks := s.callsPerKey(fakeupstream.EndpointCreditFallback)
	require.Equal(t, len(fallbacks), s.count(`SELECT count(*) FROM credit_grade WHERE source = 'fallback'`),
		"fallback calls = empty lookups, each written from its fallback")
	require.InDelta(t, 0.05*n, float64(len(fallbacks)), 0.03*n)
	require.Equal(t, float64(int64(len(targets)+len(fallbacks))), exec["externalCalls"])
	require.Zero(t, s.metric(observability.MetricFanoutRejections, map[string]string{"job": jobs.CreditEval}))
	require.Equal(t, float64(8), s.metric(observability.MetricFanoutCapacity, map[string]string{"job": jobs.CreditEval}))
	require.Zero(t, s.metric(observability.MetricFanoutInflight, map[string]string{"job": jobs.CreditEval}))
	require.Equal(t, n, s.metric(observability.MetricItems, map[string]string{"job": jobs.CreditEval, "outcome": "written"}))

	// 37 grades go missing; a backfill calls for exactly those.
	missing := map[string]bool{}
	for i := 0; len(missing) < 37; i += 41 {
		missing[targets[i]] = true
	}
	codes := keys(missing)
	_, err = s.pool.Exec(context.Background(), `DELETE FROM credit_grade WHERE eval_date = $1 AND corp_code = ANY($2)`, today, codes)
	require.NoError(t, err)
	s.fake.Reset()
	accepted = s.requestCreditEval(`{"backfill":true}`)
	require.Equal(t, float64(jobs.CreditEvalEstimate(37)), accepted["estimatedCalls"])
	require.Nil(t, accepted["resumesExecutionId"])
	done = s.waitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec = execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(37), exec["targets"])
	require.Equal(t, float64(37), exec["itemsWritten"])
	require.Equal(t, float64(37), exec["domainRows"])
	lookups = s.callsPerKey(fakeupstream.EndpointCreditLookup)
	require.ElementsMatch(t, codes, keys(lookups), "only the missing targets are called")
	require.Equal(t, len(targets), s.count(`SELECT count(*) FROM credit_grade WHERE eval_date = $1`, today))
}
