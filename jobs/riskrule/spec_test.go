package riskrule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog/jobstest"
)

func TestRules_ValidateAndEstimate(t *testing.T) {
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

func TestRules_Thresholds(t *testing.T) {
	t.Parallel()
	defaults := ThresholdDefaults()
	require.Len(t, defaults, len(Set))
	require.Equal(t, PriceDrawdownDefault, defaults[PriceDrawdown])
	require.Equal(t, "BUILDRISK_RULE_PRICE_DRAWDOWN", Env(PriceDrawdown))
	byName := map[string]Rule{}
	for _, r := range Set {
		byName[r.Name] = r
	}
	require.NoError(t, ValidateThreshold(byName[PriceDrawdown], 0.35))
	require.Error(t, ValidateThreshold(byName[PriceDrawdown], 35))
	require.Error(t, ValidateThreshold(byName[PriceDrawdown], 0))
	require.NoError(t, ValidateThreshold(byName[RiskFilings], 3))
	require.Error(t, ValidateThreshold(byName[RiskFilings], 1.5))
	require.Error(t, ValidateThreshold(byName[Compound], 0))
	require.Equal(t, Compound, Set[len(Set)-1].Name, "COMPOUND is evaluated last: it counts the others")
}

// Doc names every rule of the set with its severity and default, in
// evaluation order: it is the API's documentation of the alerts.
func TestRules_Doc(t *testing.T) {
	t.Parallel()
	doc := Doc()
	require.Contains(t, doc, "PRICE_DRAWDOWN (high, default threshold 0.2): ")
	require.Contains(t, doc, "; COMPOUND (critical, default threshold 2): ")
}
