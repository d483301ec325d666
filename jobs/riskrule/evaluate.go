package riskrule

// Metric is one company's risk_metric row; nil is NULL (not computable,
// which never fires a rule).
type Metric struct {
	Drawdown20d        *float64
	RiskFilings90d     int64
	GradeChangeNotches *int64
	AptVolumeChange    *float64
	AptPriceChange     *float64
}

// Alert is one rule that fired, with the values that fired it.
type Alert struct {
	Rule     string
	Severity string
	// Values holds the metric value(s) the rule compared and its threshold,
	// under the names of the API's JSON (drawdown20d, riskFilings90d, ...).
	Values map[string]any
}

// Evaluate applies Set to m with thresholds th (a rule missing
// from th uses its default) and returns the alerts, in rule-set order.
//
//	PRICE_DRAWDOWN   drawdown20d        ≤ −threshold
//	RISK_FILINGS     riskFilings90d     ≥ threshold
//	GRADE_DOWNGRADE  gradeChangeNotches ≥ threshold
//	APT_VOLUME_DROP  aptVolumeChange    ≤ −threshold
//	APT_PRICE_DROP   aptPriceChange     ≤ −threshold
//	COMPOUND         signals fired above ≥ threshold
//
// COMPOUND counts independent signals: the two apartment rules measure the
// same regional market, so together they are one signal (a regional slump
// alone never makes every builder there critical).
func Evaluate(m *Metric, th Thresholds) []Alert {
	var alerts []Alert
	for _, r := range Set {
		t, ok := th[r.Name]
		if !ok {
			t = r.Default
		}
		var values map[string]any
		switch r.Name {
		case PriceDrawdown:
			if m.Drawdown20d != nil && *m.Drawdown20d <= -t {
				values = map[string]any{"drawdown20d": *m.Drawdown20d}
			}
		case RiskFilings:
			if float64(m.RiskFilings90d) >= t {
				values = map[string]any{"riskFilings90d": m.RiskFilings90d}
			}
		case GradeDowngrade:
			if m.GradeChangeNotches != nil && float64(*m.GradeChangeNotches) >= t {
				values = map[string]any{"gradeChangeNotches": *m.GradeChangeNotches}
			}
		case AptVolumeDrop:
			if m.AptVolumeChange != nil && *m.AptVolumeChange <= -t {
				values = map[string]any{"aptVolumeChange": *m.AptVolumeChange}
			}
		case AptPriceDrop:
			if m.AptPriceChange != nil && *m.AptPriceChange <= -t {
				values = map[string]any{"aptPriceChange": *m.AptPriceChange}
			}
		case Compound:
			fired := make([]string, len(alerts))
			signals := map[string]bool{}
			for i, a := range alerts {
				fired[i] = a.Rule
				signals[signal(a.Rule)] = true
			}
			if len(signals) > 0 && float64(len(signals)) >= t {
				values = map[string]any{"rules": fired, "signals": len(signals)}
			}
		}
		if values != nil {
			values["threshold"] = t
			alerts = append(alerts, Alert{Rule: r.Name, Severity: r.Severity, Values: values})
		}
	}
	return alerts
}

// signal groups rules that measure the same thing, for COMPOUND.
func signal(rule string) string {
	switch rule {
	case AptVolumeDrop, AptPriceDrop:
		return "HOUSING_MARKET"
	default:
		return rule
	}
}
