package riskrule

import (
	"context"
	"fmt"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the risk-rule job.
const Name = "rules"

// The rules, by the name alerts carry. Each rule's threshold is overridable
// with the environment variable BUILDRISK_RULE_<NAME> (read by cmd/radar).
const (
	// PriceDrawdown fires when the close is at least the threshold (a
	// fraction) below the highest close of the last 20 trading days.
	PriceDrawdown = "PRICE_DRAWDOWN"
	// RiskFilings fires when the company made at least the threshold of
	// risk-flagged filings in the last 90 days.
	RiskFilings = "RISK_FILINGS"
	// GradeDowngrade fires when the latest credit grade is at least the
	// threshold of notches below the previous one.
	GradeDowngrade = "GRADE_DOWNGRADE"
	// AptVolumeDrop fires when apartment trades in the company's main
	// regions fell by at least the threshold (a fraction) over the last 3
	// months against the 3 before.
	AptVolumeDrop = "APT_VOLUME_DROP"
	// AptPriceDrop fires when the median price per m² there fell by at
	// least the threshold (a fraction).
	AptPriceDrop = "APT_PRICE_DROP"
	// Compound fires when at least the threshold of independent signals
	// fired for the same company and date: each rule above is one signal,
	// except that the two apartment rules (the same regional market) are one
	// together.
	Compound = "COMPOUND"
)

// The rules' default thresholds.
const (
	PriceDrawdownDefault  = 0.20
	RiskFilingsDefault    = 1
	GradeDowngradeDefault = 2
	AptVolumeDropDefault  = 0.30
	AptPriceDropDefault   = 0.10
	CompoundDefault       = 2
)

// Alert severities, from least to most severe.
const (
	SeverityLow      = "low"
	SeverityMedium   = "medium"
	SeverityHigh     = "high"
	SeverityCritical = "critical"
)

// Rule is one rule of the rule set.
type Rule struct {
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

// Set is the documented rule set, in evaluation order (COMPOUND last: it
// counts the others).
var Set = []Rule{
	{PriceDrawdown, SeverityHigh, PriceDrawdownDefault, false, "close at least threshold (fraction) below the 20-trading-day high"},
	{RiskFilings, SeverityHigh, RiskFilingsDefault, true, "at least threshold risk-flagged filings in the last 90 days"},
	{GradeDowngrade, SeverityMedium, GradeDowngradeDefault, true, "latest credit grade at least threshold notches below the previous one"},
	{AptVolumeDrop, SeverityLow, AptVolumeDropDefault, false, "apartment trades in the main regions down at least threshold (fraction), last 3 months vs the 3 before"},
	{AptPriceDrop, SeverityMedium, AptPriceDropDefault, false, "median apartment price per m² in the main regions down at least threshold (fraction), same windows"},
	{Compound, SeverityCritical, CompoundDefault, true, "at least threshold independent signals fired for the company on the date (the two apartment rules count as one)"},
}

// Doc documents Set in one line, for the API's description of the alerts
// (api.Config.AlertRules): each rule's name, severity, default threshold
// and when it fires.
func Doc() string {
	var out string
	for i, r := range Set {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s (%s, default threshold %v): %s", r.Name, r.Severity, r.Default, r.Doc)
	}
	return out
}

// Thresholds maps rule names to thresholds.
type Thresholds map[string]float64

// ThresholdDefaults returns every rule's default threshold.
func ThresholdDefaults() Thresholds {
	th := Thresholds{}
	for _, r := range Set {
		th[r.Name] = r.Default
	}
	return th
}

// Env returns the environment variable that overrides rule's threshold.
func Env(rule string) string { return "BUILDRISK_RULE_" + rule }

// ValidateThreshold checks an override: a positive number, whole for
// counting rules, a fraction below 1 for the others.
func ValidateThreshold(r Rule, v float64) error {
	switch {
	case r.Integer && (v < 1 || v != float64(int64(v))):
		return fmt.Errorf("%s needs a whole number of at least 1, got %v", r.Name, v)
	case !r.Integer && (v <= 0 || v >= 1):
		return fmt.Errorf("%s needs a fraction between 0 and 1 (0.2 = 20%%), got %v", r.Name, v)
	}
	return nil
}

// Params are rules' params; metrics' params decode as them, so a chained
// rules run evaluates the date metrics computed. The API names their schema
// RulesParams, after the job.
type Params struct {
	Date string `json:"date,omitempty" doc:"date whose risk metrics are evaluated, YYYY-MM-DD, from 2006 to the end of next year; default: today in Asia/Seoul" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-14"`
	// OnlyMissing plans only the companies with metrics for Date that
	// rules has not checked for it (coverage's missing targets).
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"evaluate only the companies with metrics for the date not yet checked for it (/v1/coverage's missing targets)" example:"false"`
}

// Day returns Date as a date. Only valid params.
func (p *Params) Day() time.Time {
	d, _ := time.Parse(time.DateOnly, p.Date)
	return d
}

// Spec defines rules: the rule set over one date's risk_metric rows,
// replacing that date's alerts.
func Spec() *catalog.Spec[Params] { return spec(time.Now) }

func spec(now func() time.Time) *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Evaluates the rule set (PRICE_DRAWDOWN, RISK_FILINGS, GRADE_DOWNGRADE, APT_VOLUME_DROP, APT_PRICE_DROP, " +
			"COMPOUND; thresholds overridable by BUILDRISK_RULE_<NAME>) over the date's risk metrics and writes " +
			"risk_alert rows with the values that fired them. Re-running a date replaces its alerts. Usually chained from metrics.",
		ChunkDesc:    "one company",
		ExampleValue: Params{Date: "2025-03-14"},
		Validate:     func(p *Params) error { return catalog.ValidateOptionalDate(&p.Date, now) },
		Estimate:     func(*Params) int { return 0 },
		CoverageDef: &catalog.Coverage{
			Targets:     "companies with a risk_metric row for the date (what rules evaluates)",
			Current:     "a risk_rule_check marker for the date (rules evaluated them, whether or not a rule fired)",
			DataDate:    catalog.DayIn,
			OnlyMissing: true,
			Count:       countRulesCoverage,
			Missing:     missingRulesCoverage,
		},
	}
}

// Registration is rules as a process registers it: its definition and its
// implementation, which evaluates with thresholds (a rule missing from it
// uses its default).
func Registration(thresholds Thresholds) batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{Thresholds: thresholds}}
}

// countRulesCoverage is the job's coverage count (queries/coverage.sql).
func countRulesCoverage(ctx context.Context, db queries.DBTX, day time.Time) (int64, int64, error) {
	row, err := queries.New().CoverageRulesCount(ctx, db, day)
	if err != nil {
		return 0, 0, err
	}
	return row.Targets, row.Current, nil
}

// missingRulesCoverage is the job's missing list (queries/coverage.sql).
func missingRulesCoverage(ctx context.Context, db queries.DBTX, day time.Time, after string, limit int32) ([]string, error) {
	return queries.New().CoverageRulesMissing(ctx, db, &queries.CoverageRulesMissingParams{After: after, DataDate: day, RowLimit: limit})
}
