// Package pack is buildrisk-radar's observability pack as code: the alert
// rules, written once in [Rules], and the Grafana dashboard, built with the
// Grafana Foundation SDK. [Files] renders them into the files deploy/ ships:
// the Prometheus rule file, the Grafana-managed alert rules and the
// dashboard JSON. Those files are generated; `make generate` writes them and
// `make check-generated` (and this package's tests) fail when a committed
// copy differs from what this package renders.
//
// The package is only read by the generator (packgen) and by tests; the
// service never imports it.
package pack

import (
	"fmt"
	"strings"
	"time"
)

// The generated files, by their path relative to deploy/.
const (
	PrometheusRulesPath = "prometheus/rules.yml"
	GrafanaRulesPath    = "grafana/provisioning/alerting/buildrisk.yaml"
	DashboardPath       = "grafana/dashboards/buildrisk.json"
)

// EvaluationInterval is how often both Prometheus and Grafana evaluate the
// rules. It is 10s, not Prometheus's global 15s: Grafana's scheduler ticks
// every 10s and refuses (and exits on) a rule group whose interval is not a
// multiple of it, so 10s is the interval both can share.
const EvaluationInterval = 10 * time.Second

// RunbookURLEnv names the environment variable holding the base of every
// alert's runbook link (docs/configuration.md). Prometheus reads it through
// its external label runbook_base, Grafana by expanding it in its
// provisioning files.
const RunbookURLEnv = "BUILDRISK_RUNBOOK_URL"

// DatasourceUIDEnv names the environment variable holding the uid of the
// Prometheus datasource the Grafana rules query, so the pack imports into a
// Grafana whose Prometheus has any uid.
const DatasourceUIDEnv = "BUILDRISK_GRAFANA_DATASOURCE_UID"

// Severity is an alert's severity label: critical pages, warning does not.
type Severity string

// The severities the Alertmanager and Grafana routes know.
const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
)

// Rule is one alert. Its Prometheus form is exactly Expr, For and the
// annotations; its Grafana form is a query and a threshold on it (Grafana).
type Rule struct {
	// Alert is the alert's name, also the Grafana rule's title.
	Alert string
	// Comment explains the rule to the next reader of rules.yml; it is
	// written above its expr.
	Comment string
	// Expr is the PromQL expression Prometheus alerts on.
	Expr string
	// For is how long Expr must hold before the alert fires ("" fires at
	// once).
	For string
	// Severity is the alert's severity label.
	Severity Severity
	// Summary, Description and Threshold are the annotations (Threshold
	// optional).
	Summary, Description, Threshold string
	// Grafana says how Grafana evaluates the same condition.
	Grafana Grafana
}

// Evaluator is a Grafana threshold's comparison.
type Evaluator string

// The comparisons the rules use.
const (
	Above Evaluator = "gt"
	Below Evaluator = "lt"
)

// Grafana is a rule's Grafana form: query A and threshold C on it.
type Grafana struct {
	// From is how far back query A reads (its relative time range).
	From time.Duration
	// Query is query A; "" is the rule's Expr (an expression that already
	// compares, compared again with > 0).
	Query string
	// Evaluator and Param are threshold C; "" is Above 0.
	Evaluator Evaluator
	Param     float64
	// Summary replaces the rule's summary where $value means something
	// else in Grafana ("" keeps it).
	Summary string
}

// uid is the Grafana rule's uid: the alert name without its Buildrisk
// prefix, in kebab case (BuildriskQueueAgeHigh: buildrisk-queue-age-high).
func (r Rule) uid() string {
	var b strings.Builder
	b.WriteString("buildrisk")
	for _, c := range strings.TrimPrefix(r.Alert, "Buildrisk") {
		if c >= 'A' && c <= 'Z' {
			b.WriteByte('-')
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// anchor is the rule's section in docs/operations.md.
func (r Rule) anchor() string {
	return "docs/operations.md#" + strings.ToLower(r.Alert)
}

// Files renders every file of the pack, by its path relative to deploy/.
func Files() (map[string][]byte, error) {
	prom, err := PrometheusRules(Rules)
	if err != nil {
		return nil, fmt.Errorf("error rendering the prometheus rules: %w", err)
	}
	grafana, err := GrafanaRules(Rules)
	if err != nil {
		return nil, fmt.Errorf("error rendering the grafana rules: %w", err)
	}
	dash, err := DashboardJSON()
	if err != nil {
		return nil, fmt.Errorf("error rendering the dashboard: %w", err)
	}
	return map[string][]byte{PrometheusRulesPath: prom, GrafanaRulesPath: grafana, DashboardPath: dash}, nil
}
