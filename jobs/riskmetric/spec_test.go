package riskmetric

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog/jobstest"
	"github.com/buildrisk/radar/jobs/riskrule"
)

func TestMetrics_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	// 2026-03-31 20:30 UTC is already April 1st in Seoul.
	clock := func() time.Time { return time.Date(2026, 3, 31, 20, 30, 0, 0, time.UTC) }
	jobstest.RunParamCases(t, spec(clock), []jobstest.ParamCase{
		{Name: "DefaultTodayInSeoul", Raw: `{}`, Canonical: `{"date":"2026-04-01"}`, Estimate: 0},
		{Name: "Given", Raw: `{"date":"2025-03-14"}`, Canonical: `{"date":"2025-03-14"}`, Estimate: 0},
		{Name: "BadDate", Raw: `{"date":"14.03.2025"}`, BadField: "params.date"},
		{Name: "UnknownField", Raw: `{"day":"2025-03-14"}`, BadField: "params.day"},
	})
}

// Metrics chains to rules, and the chain hands metrics' canonical params
// to rules unchanged.
func TestMetrics_ChainsToRules(t *testing.T) {
	t.Parallel()
	require.Equal(t, riskrule.Name, Spec().Next(), "metrics chains to rules")
	require.Empty(t, riskrule.Spec().Next())
	p, err := Spec().Decode(json.RawMessage(`{"date":"2025-03-14"}`))
	require.NoError(t, err)
	r, err := riskrule.Spec().Decode(p.Canonical)
	require.NoError(t, err)
	require.Equal(t, "2025-03-14", r.Value.(*riskrule.Params).Date)
}
