package riskrule

import (
	"testing"

	"github.com/stretchr/testify/require"
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
		th   Thresholds
		want []string
	}{
		{"Nothing", Metric{}, nil, []string{}},
		{"AllNullNeverFires", Metric{RiskFilings90d: 0}, nil, []string{}},
		{"DrawdownAtThreshold", Metric{Drawdown20d: f(-0.20)}, nil, []string{PriceDrawdown}},
		{"DrawdownBelowThreshold", Metric{Drawdown20d: f(-0.19)}, nil, []string{}},
		{"OneRiskFiling", Metric{RiskFilings90d: 1}, nil, []string{RiskFilings}},
		{"GradeOneNotch", Metric{GradeChangeNotches: i(1)}, nil, []string{}},
		{"GradeTwoNotches", Metric{GradeChangeNotches: i(2)}, nil, []string{GradeDowngrade}},
		{"Upgrade", Metric{GradeChangeNotches: i(-3)}, nil, []string{}},
		{"AptDropsAreOneSignal", Metric{AptVolumeChange: f(-0.3), AptPriceChange: f(-0.1)}, nil,
			[]string{AptVolumeDrop, AptPriceDrop}},
		{"AptAndGrade", Metric{AptPriceChange: f(-0.2), GradeChangeNotches: i(2)}, nil,
			[]string{GradeDowngrade, AptPriceDrop, Compound}},
		{"Compound", Metric{Drawdown20d: f(-0.4), RiskFilings90d: 2}, nil,
			[]string{PriceDrawdown, RiskFilings, Compound}},
		{"OverriddenThresholds", Metric{Drawdown20d: f(-0.4), RiskFilings90d: 2},
			Thresholds{PriceDrawdown: 0.5, RiskFilings: 2},
			[]string{RiskFilings}},
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
	require.Equal(t, Alert{Rule: PriceDrawdown, Severity: SeverityHigh,
		Values: map[string]any{"drawdown20d": -0.42, "threshold": PriceDrawdownDefault}}, alerts[0])
	require.Equal(t, map[string]any{"riskFilings90d": int64(3), "threshold": float64(RiskFilingsDefault)}, alerts[1].Values)
	require.Equal(t, SeverityCritical, alerts[2].Severity)
	require.Equal(t, map[string]any{"rules": []string{PriceDrawdown, RiskFilings}, "signals": 2,
		"threshold": float64(CompoundDefault)}, alerts[2].Values)
}
