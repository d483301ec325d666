package riskrule

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs"
)

func f(v float64) *float64 { return &v }
func i(v int64) *int64     { return &v }

func rules(alerts []Alert) []string {
	out := []string{}
	for _, a := range alerts {
		out = append(out, a.Rule)
	}
	return out
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    Metric
		th   jobs.RuleThresholds
		want []string
	}{
		{"Nothing", Metric{}, nil, []string{}},
		{"AllNullNeverFires", Metric{RiskFilings90d: 0}, nil, []string{}},
		{"DrawdownAtThreshold", Metric{Drawdown20d: f(-0.20)}, nil, []string{jobs.RulePriceDrawdown}},
		{"DrawdownBelowThreshold", Metric{Drawdown20d: f(-0.19)}, nil, []string{}},
		{"OneRiskFiling", Metric{RiskFilings90d: 1}, nil, []string{jobs.RuleRiskFilings}},
		{"GradeOneNotch", Metric{GradeChangeNotches: i(1)}, nil, []string{}},
		{"GradeTwoNotches", Metric{GradeChangeNotches: i(2)}, nil, []string{jobs.RuleGradeDowngrade}},
		{"Upgrade", Metric{GradeChangeNotches: i(-3)}, nil, []string{}},
		{"AptDropsAreOneSignal", Metric{AptVolumeChange: f(-0.3), AptPriceChange: f(-0.1)}, nil,
			[]string{jobs.RuleAptVolumeDrop, jobs.RuleAptPriceDrop}},
		{"AptAndGrade", Metric{AptPriceChange: f(-0.2), GradeChangeNotches: i(2)}, nil,
			[]string{jobs.RuleGradeDowngrade, jobs.RuleAptPriceDrop, jobs.RuleCompound}},
		{"Compound", Metric{Drawdown20d: f(-0.4), RiskFilings90d: 2}, nil,
			[]string{jobs.RulePriceDrawdown, jobs.RuleRiskFilings, jobs.RuleCompound}},
		{"OverriddenThresholds", Metric{Drawdown20d: f(-0.4), RiskFilings90d: 2},
			jobs.RuleThresholds{jobs.RulePriceDrawdown: 0.5, jobs.RuleRiskFilings: 2},
			[]string{jobs.RuleRiskFilings}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, rules(Evaluate(&tc.m, tc.th)))
		})
	}
}

func TestEvaluate_Values(t *testing.T) {
	t.Parallel()
	alerts := Evaluate(&Metric{Drawdown20d: f(-0.42), RiskFilings90d: 3}, nil)
	require.Len(t, alerts, 3)
	require.Equal(t, Alert{Rule: jobs.RulePriceDrawdown, Severity: jobs.SeverityHigh,
		Values: map[string]any{"drawdown20d": -0.42, "threshold": jobs.RulePriceDrawdownDefault}}, alerts[0])
	require.Equal(t, map[string]any{"riskFilings90d": int64(3), "threshold": float64(jobs.RuleRiskFilingsDefault)}, alerts[1].Values)
	require.Equal(t, jobs.SeverityCritical, alerts[2].Severity)
	require.Equal(t, map[string]any{"rules": []string{jobs.RulePriceDrawdown, jobs.RuleRiskFilings}, "signals": 2,
		"threshold": float64(jobs.RuleCompoundDefault)}, alerts[2].Values)
}
