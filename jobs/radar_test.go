package jobs

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// paramCase is one Decode of a table test: want a field error, or else the
// canonical params and the catalog's estimate.
type paramCase struct {
	name      string
	raw       string
	badField  string
	canonical string
	estimate  int
}

func runParamCases(t *testing.T, def Definition, cases []paramCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := def.Decode(json.RawMessage(tc.raw))
			if tc.badField != "" {
				var pe *ParamError
				require.ErrorAs(t, err, &pe, tc.raw)
				require.Equal(t, tc.badField, pe.Field, pe.Message)
				return
			}
			require.NoError(t, err, tc.raw)
			require.JSONEq(t, tc.canonical, string(p.Canonical))
			require.Equal(t, tc.estimate, p.EstimatedCalls)
		})
	}
}

func TestCorpCodeSync_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	runParamCases(t, CorpCodeSyncSpec(), []paramCase{
		{name: "Empty", raw: `{}`, canonical: `{}`, estimate: 1},
		{name: "Absent", raw: ``, canonical: `{}`, estimate: 1},
		{name: "Null", raw: `null`, canonical: `{}`, estimate: 1},
		{name: "UnknownField", raw: `{"date":"2025-01-01"}`, badField: "params.date"},
		{name: "NotAnObject", raw: `[]`, badField: "params"},
	})
}

func TestFilingParse_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	runParamCases(t, FilingParseSpec(), []paramCase{
		{name: "AllTracked", raw: `{"from":"2025-01-01","to":"2025-03-31"}`,
			canonical: `{"from":"2025-01-01","to":"2025-03-31"}`, estimate: 0},
		{name: "EmptyCorpCodesIsAllTracked", raw: `{"from":"2025-01-01","to":"2025-03-31","corpCodes":[]}`,
			canonical: `{"from":"2025-01-01","to":"2025-03-31"}`, estimate: 0},
		{name: "CorpCodesSortedAndDeduplicated", raw: `{"corpCodes":["00200000","00126380","00200000"],"to":"2025-01-01","from":"2025-01-01"}`,
			canonical: `{"from":"2025-01-01","to":"2025-01-01","corpCodes":["00126380","00200000"]}`, estimate: 2},
		{name: "LeapYear366Days", raw: `{"from":"2024-01-01","to":"2024-12-31"}`,
			canonical: `{"from":"2024-01-01","to":"2024-12-31"}`, estimate: 0},
		{name: "TooLong", raw: `{"from":"2024-01-01","to":"2025-01-01"}`, badField: "params.to"},
		{name: "Reversed", raw: `{"from":"2025-02-01","to":"2025-01-31"}`, badField: "params.from"},
		{name: "MissingFrom", raw: `{"to":"2025-01-31"}`, badField: "params.from"},
		{name: "MissingTo", raw: `{"from":"2025-01-31"}`, badField: "params.to"},
		{name: "BadDate", raw: `{"from":"2025-02-30","to":"2025-03-01"}`, badField: "params.from"},
		{name: "BadFormat", raw: `{"from":"20250101","to":"2025-03-01"}`, badField: "params.from"},
		{name: "BadCorpCode", raw: `{"from":"2025-01-01","to":"2025-01-02","corpCodes":["00126380","1234567"]}`, badField: "params.corpCodes[1]"},
		{name: "CorpCodeNotString", raw: `{"from":"2025-01-01","to":"2025-01-02","corpCodes":[126380]}`, badField: "params.corpCodes[0]"},
		{name: "UnknownField", raw: `{"from":"2025-01-01","to":"2025-01-02","date":"x"}`, badField: "params.date"},
	})
}

func TestFilingParse_Scheduled(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 31, 19, 0, 0, 0, Seoul)
	raw := FilingParseSpec().ScheduledParams(now)
	require.JSONEq(t, `{"from":"2026-01-01","to":"2026-03-31"}`, string(raw), "the last 90 days")
	_, err := FilingParseSpec().Decode(raw)
	require.NoError(t, err)
}

func TestStockPrice_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	runParamCases(t, StockPriceSpec(), []paramCase{
		{name: "Weekday", raw: `{"date":"2025-03-14"}`, canonical: `{"date":"2025-03-14"}`, estimate: 0},
		{name: "Missing", raw: `{}`, badField: "params.date"},
		{name: "BadDate", raw: `{"date":"2025-13-01"}`, badField: "params.date"},
		{name: "NotString", raw: `{"date":20250314}`, badField: "params.date"},
		{name: "UnknownField", raw: `{"date":"2025-03-14","from":"2025-03-14"}`, badField: "params.from"},
	})
	weekend := &StockPriceParams{Date: "2025-03-15"}
	require.True(t, weekend.Weekend(), "a Saturday")
	require.False(t, (&StockPriceParams{Date: "2025-03-14"}).Weekend())
	require.JSONEq(t, `{"date":"2026-03-31"}`, string(StockPriceSpec().ScheduledParams(time.Date(2026, 3, 31, 18, 0, 0, 0, Seoul))))
}

func TestMetricsAndRules_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	// 2026-03-31 20:30 UTC is already April 1st in Seoul.
	clock := func() time.Time { return time.Date(2026, 3, 31, 20, 30, 0, 0, time.UTC) }
	for _, def := range []Definition{metricsSpec(clock), rulesSpec(clock)} {
		t.Run(def.Name(), func(t *testing.T) {
			t.Parallel()
			runParamCases(t, def, []paramCase{
				{name: "DefaultTodayInSeoul", raw: `{}`, canonical: `{"date":"2026-04-01"}`, estimate: 0},
				{name: "Given", raw: `{"date":"2025-03-14"}`, canonical: `{"date":"2025-03-14"}`, estimate: 0},
				{name: "BadDate", raw: `{"date":"14.03.2025"}`, badField: "params.date"},
				{name: "UnknownField", raw: `{"day":"2025-03-14"}`, badField: "params.day"},
			})
		})
	}
	require.Equal(t, Rules, MetricsSpec().Next(), "metrics chains to rules")
	require.Empty(t, RulesSpec().Next())
	// The chain hands metrics' canonical params to rules unchanged.
	p, err := MetricsSpec().Decode(json.RawMessage(`{"date":"2025-03-14"}`))
	require.NoError(t, err)
	r, err := RulesSpec().Decode(p.Canonical)
	require.NoError(t, err)
	require.Equal(t, "2025-03-14", r.Value.(*RulesParams).Date)
}

func TestRules_Thresholds(t *testing.T) {
	t.Parallel()
	defaults := RuleThresholdDefaults()
	require.Len(t, defaults, len(RuleSet))
	require.Equal(t, RulePriceDrawdownDefault, defaults[RulePriceDrawdown])
	require.Equal(t, "BUILDRISK_RULE_PRICE_DRAWDOWN", RuleEnv(RulePriceDrawdown))
	byName := map[string]RuleDef{}
	for _, r := range RuleSet {
		byName[r.Name] = r
	}
	require.NoError(t, ValidateRuleThreshold(byName[RulePriceDrawdown], 0.35))
	require.Error(t, ValidateRuleThreshold(byName[RulePriceDrawdown], 35))
	require.Error(t, ValidateRuleThreshold(byName[RulePriceDrawdown], 0))
	require.NoError(t, ValidateRuleThreshold(byName[RuleRiskFilings], 3))
	require.Error(t, ValidateRuleThreshold(byName[RuleRiskFilings], 1.5))
	require.Error(t, ValidateRuleThreshold(byName[RuleCompound], 0))
	require.Equal(t, RuleCompound, RuleSet[len(RuleSet)-1].Name, "COMPOUND is evaluated last: it counts the others")
}

func TestCatalog_RadarJobsInOrder(t *testing.T) {
	t.Parallel()
	names := Default().Names()
	want := []string{CorpCodeSync, FilingParse, StockPrice, AptTrade, Metrics, Rules}
	var got []string
	for _, n := range names {
		if n != "creditEval" {
			got = append(got, n)
		}
	}
	require.Equal(t, want, got)
	for _, def := range Default().All() {
		_, err := def.Decode(mustJSON(t, def.Example()))
		require.NoError(t, err, "%s's example is valid", def.Name())
		_, err = def.Decode(def.ScheduledParams(time.Date(2026, 3, 31, 18, 0, 0, 0, Seoul)))
		require.NoError(t, err, "%s's scheduled params are valid", def.Name())
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}
