package jobs

import (
	"fmt"
	"time"
)

// Rules is the name of the risk-rule job.
const Rules = "rules"

// The rules, by the name alerts carry. Each rule's threshold is overridable
// with the environment variable BUILDRISK_RULE_<NAME> (read by cmd/radar).
const (
	// RulePriceDrawdown fires when the close is at least the threshold (a
	// fraction) below the highest close of the last 20 trading days.
	RulePriceDrawdown = "PRICE_DRAWDOWN"
	// RuleRiskFilings fires when the company made at least the threshold of
	// risk-flagged filings in the last 90 days.
	RuleRiskFilings = "RISK_FILINGS"
	// RuleGradeDowngrade fires when the latest credit grade is at least the
	// threshold of notches below the previous one.
	RuleGradeDowngrade = "GRADE_DOWNGRADE"
	// RuleAptVolumeDrop fires when apartment trades in the company's main
	// regions fell by at least the threshold (a fraction) over the last 3
	// months against the 3 before.
	RuleAptVolumeDrop = "APT_VOLUME_DROP"
	// RuleAptPriceDrop fires when the median price per m² there fell by at
	// least the threshold (a fraction).
	RuleAptPriceDrop = "APT_PRICE_DROP"
	// RuleCompound fires when at least the threshold of independent signals
	// fired for the same company and date: each rule above is one signal,
	// except that the two apartment rules (the same regional market) are one
	// together.
	RuleCompound = "COMPOUND"
)

// The rules' default thresholds.
const (
	RulePriceDrawdownDefault  = 0.20
	RuleRiskFilingsDefault    = 1
	RuleGradeDowngradeDefault = 2
	RuleAptVolumeDropDefault  = 0.30
	RuleAptPriceDropDefault   = 0.10
	RuleCompoundDefault       = 2
)

// Alert severities, from least to most severe.
const (
	SeverityLow      = "low"
	SeverityMedium   = "medium"
	SeverityHigh     = "high"
	SeverityCritical = "critical"
)

// RuleDef is one rule of the rule set.
type RuleDef struct {
	Name     string
	Severity string
	// Default is the threshold unless BUILDRISK_RULE_<Name> overrides it.
	Default float64
	// Integer marks thresholds that count something (filings, notches,
	// rules); an override must then be a whole number.
	Integer bool
	// Doc says when the rule fires.
	Doc string
}

// RuleSet is the documented rule set, in evaluation order (COMPOUND last: it
// counts the others).
var RuleSet = []RuleDef{
	{RulePriceDrawdown, SeverityHigh, RulePriceDrawdownDefault, false, "close at least threshold (fraction) below the 20-trading-day high"},
	{RuleRiskFilings, SeverityHigh, RuleRiskFilingsDefault, true, "at least threshold risk-flagged filings in the last 90 days"},
	{RuleGradeDowngrade, SeverityMedium, RuleGradeDowngradeDefault, true, "latest credit grade at least threshold notches below the previous one"},
	{RuleAptVolumeDrop, SeverityLow, RuleAptVolumeDropDefault, false, "apartment trades in the main regions down at least threshold (fraction), last 3 months vs the 3 before"},
	{RuleAptPriceDrop, SeverityMedium, RuleAptPriceDropDefault, false, "median apartment price per m² in the main regions down at least threshold (fraction), same windows"},
	{RuleCompound, SeverityCritical, RuleCompoundDefault, true, "at least threshold independent signals fired for the company on the date (the two apartment rules count as one)"},
}

// RulesDoc documents RuleSet in one line, for the API's description of
// the alerts: each rule's name, severity, default threshold and when it
// fires.
func RulesDoc() string {
	var out string
	for i, r := range RuleSet {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s (%s, default threshold %v): %s", r.Name, r.Severity, r.Default, r.Doc)
	}
	return out
}

// RuleThresholds maps rule names to thresholds.
type RuleThresholds map[string]float64

// RuleThresholdDefaults returns every rule's default threshold.
func RuleThresholdDefaults() RuleThresholds {
	th := RuleThresholds{}
	for _, r := range RuleSet {
		th[r.Name] = r.Default
	}
	return th
}

// RuleEnv returns the environment variable that overrides rule's threshold.
func RuleEnv(rule string) string { return "BUILDRISK_RULE_" + rule }

// ValidateRuleThreshold checks an override: a positive number, whole for
// counting rules, a fraction below 1 for the others.
func ValidateRuleThreshold(r RuleDef, v float64) error {
	switch {
	case r.Integer && (v < 1 || v != float64(int64(v))):
		return fmt.Errorf("%s needs a whole number of at least 1, got %v", r.Name, v)
	case !r.Integer && (v <= 0 || v >= 1):
		return fmt.Errorf("%s needs a fraction between 0 and 1 (0.2 = 20%%), got %v", r.Name, v)
	}
	return nil
}

// RulesParams are rules' params; metrics' params decode as them, so a
// chained rules run evaluates the date metrics computed.
type RulesParams struct {
	Date string `json:"date,omitempty" doc:"date whose risk metrics are evaluated, YYYY-MM-DD, from 2006 to the end of next year; default: today in Asia/Seoul" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-14"`
	// OnlyMissing plans only the companies with metrics for Date that
	// rules has not checked for it (coverage's missing targets).
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"evaluate only the companies with metrics for the date not yet checked for it (/v1/coverage's missing targets)" example:"false"`
}

// Day returns Date as a date. Only valid params.
func (p *RulesParams) Day() time.Time {
	d, _ := time.Parse(time.DateOnly, p.Date)
	return d
}

// RulesSpec defines rules: the rule set over one date's risk_metric rows,
// replacing that date's alerts.
func RulesSpec() *Spec[RulesParams] { return rulesSpec(time.Now) }

func rulesSpec(now func() time.Time) *Spec[RulesParams] {
	return &Spec[RulesParams]{
		JobName: Rules,
		Desc: "Evaluates the rule set (PRICE_DRAWDOWN, RISK_FILINGS, GRADE_DOWNGRADE, APT_VOLUME_DROP, APT_PRICE_DROP, " +
			"COMPOUND; thresholds overridable by BUILDRISK_RULE_<NAME>) over the date's risk metrics and writes " +
			"risk_alert rows with the values that fired them. Re-running a date replaces its alerts. Usually chained from metrics.",
		ChunkDesc:    "one company",
		ExampleValue: RulesParams{Date: "2025-03-14"},
		Validate:     func(p *RulesParams) error { return validateOptionalDate(&p.Date, now) },
		Estimate:     func(*RulesParams) int { return 0 },
		CoverageDef: &Coverage{
			Targets:     "companies with a risk_metric row for the date (what rules evaluates)",
			Current:     "a risk_rule_check marker for the date (rules evaluated them, whether or not a rule fired)",
			DataDate:    DayIn,
			OnlyMissing: true,
		},
	}
}
