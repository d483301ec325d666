package deploy

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/buildrisk/radar/docs"
	"github.com/buildrisk/radar/observability"
)

// metricNameRE finds the names of this service's and River's metrics
// (River's own and its OpenTelemetry messaging ones) in a PromQL
// expression.
var metricNameRE = regexp.MustCompile(`\b(?:buildrisk|river|messaging)_[a-z0-9_]*[a-z0-9]`)

// ReferencedMetrics returns the sorted, de-duplicated buildrisk_*, river_*
// and messaging_* metric names that expr (PromQL, or a Grafana query such as
// label_values(...)) refers to, as written: histogram series keep their
// _bucket, _sum or _count suffix (see [metricBaseName]).
func ReferencedMetrics(expr string) []string {
	names := metricNameRE.FindAllString(expr, -1)
	sort.Strings(names)
	return slices.Compact(names)
}

// metricBaseName maps a histogram series name (x_bucket, x_sum, x_count) to
// the histogram's name x when x is in observability.HistogramNames or
// observability.RiverHistogramNames, and returns any other name unchanged.
func metricBaseName(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if ok && (slices.Contains(observability.HistogramNames, base) || slices.Contains(observability.RiverHistogramNames, base)) {
			return base
		}
	}
	return name
}

func TestReferencedMetrics(t *testing.T) {
	t.Parallel()

	expr := `histogram_quantile(0.95, sum by (le) (rate(buildrisk_chunk_duration_seconds_bucket{job=~"$job"}[5m])))
		/ on() group_left sum(buildrisk_items_total{reason!~"cap|provider_429"}) + river_work_count_total + buildrisk_items_total`
	require.Equal(t, []string{"buildrisk_chunk_duration_seconds_bucket", "buildrisk_items_total", "river_work_count_total"}, ReferencedMetrics(expr))
	require.Equal(t, "buildrisk_chunk_duration_seconds", metricBaseName("buildrisk_chunk_duration_seconds_bucket"))
	require.Equal(t, "buildrisk_request_start_latency_seconds", metricBaseName("buildrisk_request_start_latency_seconds_count"))
	require.Equal(t, "buildrisk_items_total_count", metricBaseName("buildrisk_items_total_count"))
	require.Equal(t, "messaging_process_duration_seconds", metricBaseName("messaging_process_duration_seconds_count"))
	require.Equal(t, []string{"messaging_process_duration_seconds_bucket"}, ReferencedMetrics(`rate(messaging_process_duration_seconds_bucket[5m])`))
	require.Empty(t, ReferencedMetrics(`up{job=~"buildrisk-.*"} == 0`))
}

// --- file loading ------------------------------------------------------------

// decodeYAMLStrict decodes the YAML file at path into v, failing on keys v
// has no field for, so a misspelled key (noDatastate) is caught.
func decodeYAMLStrict(t *testing.T, path string, v any) {
	t.Helper()

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v), path)
}

// decodeYAML decodes the YAML file at path into v, ignoring unknown keys.
func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, v), path)
}

// parseDuration parses a duration the way Prometheus and Grafana's
// provisioning do (1m, 0s, 1d, ...).
func parseDuration(t *testing.T, s string) time.Duration {
	t.Helper()

	d, err := model.ParseDuration(s)
	require.NoError(t, err, "duration %q", s)
	return time.Duration(d)
}

// expression is one PromQL expression found in a deploy file.
type expression struct {
	expr   string
	promQL bool // false for Grafana variable queries such as label_values(...)
	source string
}

// allExpressions collects every expression of the Prometheus rules, the
// Grafana alert rules and the dashboards (macros replaced).
func allExpressions(t *testing.T) []expression {
	t.Helper()

	var out []expression
	for _, g := range loadPromRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, expression{expr: r.Expr, promQL: true, source: "prometheus/rules.yml " + r.Alert + r.Record})
		}
	}
	for _, g := range loadGrafanaAlerting(t).Groups {
		for _, r := range g.Rules {
			for _, q := range r.Data {
				if q.DatasourceUID == exprDatasourceUID {
					continue
				}
				expr, _ := q.Model["expr"].(string)
				out = append(out, expression{expr: expr, promQL: true, source: "grafana alert " + r.Title + " " + q.RefID})
			}
		}
	}
	for path, d := range loadDashboards(t) {
		for _, p := range allPanels(d.Panels) {
			for _, target := range p.Targets {
				out = append(out, expression{expr: grafanaMacros.Replace(target.Expr), promQL: true, source: path + " panel " + p.Title + " " + target.RefID})
			}
		}
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				out = append(out, expression{expr: v.Definition, source: path + " variable " + v.Name})
			}
		}
	}
	return out
}

func TestMetricNamesAreInstrumented(t *testing.T) {
	t.Parallel()

	expressions := allExpressions(t)
	require.NotEmpty(t, expressions)

	usedByDashboards := map[string]bool{}
	for _, e := range expressions {
		names := ReferencedMetrics(e.expr)
		if len(names) == 0 {
			// Only Prometheus's own series may be used without ours.
			require.Contains(t, e.expr, "up{", "%s uses no known metric: %s", e.source, e.expr)
			continue
		}
		for _, name := range names {
			base := metricBaseName(name)
			known := slices.Contains(observability.MetricNames, base) || slices.Contains(observability.RiverMetricNames, base)
			require.True(t, known, "%s uses %s, which is neither in observability.MetricNames nor in RiverMetricNames", e.source, name)
			if strings.HasPrefix(e.source, filepath.Join("grafana", "dashboards")) {
				usedByDashboards[base] = true
			}
		}
	}

	// The dashboard shows every instrument, and River's.
	for _, name := range slices.Concat(observability.MetricNames, observability.RiverMetricNames) {
		require.True(t, usedByDashboards[name], "no dashboard panel shows %s", name)
	}
}

// providerKeyRE matches the provider keys, which only workers may hold.
var providerKeyRE = regexp.MustCompile(`^BUILDRISK_KEY_`)

// documentedEnv returns a pattern per variable (or family of variables) of
// docs/configuration.md's tables.
func documentedEnv(t *testing.T) []*regexp.Regexp {
	t.Helper()

	data, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	require.NoError(t, err)
	vars := docs.Variables(string(data))
	require.NotEmpty(t, vars)
	patterns := make([]*regexp.Regexp, len(vars))
	for i, v := range vars {
		patterns[i] = docs.Pattern(v.Name)
	}
	return patterns
}

// requireAllowedEnv fails unless name is a variable docs/configuration.md
// documents: a deploy file never sets a variable radar does not read.
func requireAllowedEnv(t *testing.T, where, name string) {
	t.Helper()

	for _, re := range documentedEnv(t) {
		if re.MatchString(name) {
			return
		}
	}
	t.Fatalf("%s: %s is not a variable of docs/configuration.md", where, name)
}

// requireSeparateDatabaseUsers checks that migrate, api and worker connect
// with three different users, so the services never hold the owner's
// credentials.
func requireSeparateDatabaseUsers(t *testing.T, where, migrate, api, worker string) {
	t.Helper()

	user := func(raw string) string {
		// Compose interpolation: take each ${VAR:-default}'s default.
		raw = regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`).ReplaceAllString(raw, "$1")
		u, err := url.Parse(raw)
		require.NoError(t, err, "%s: %s", where, raw)
		require.NotNil(t, u.User, "%s: %s names no user", where, raw)
		return u.User.Username()
	}
	owner, apiUser, workerUser := user(migrate), user(api), user(worker)
	require.NotEqual(t, owner, apiUser, where)
	require.NotEqual(t, owner, workerUser, where)
	require.NotEqual(t, apiUser, workerUser, where)
	require.Equal(t, "radar_api", apiUser, where)
	require.Equal(t, "radar_worker", workerUser, where)
}
