package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
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

// requirePromtoolEnv makes the promtool tests fail instead of skipping when
// promtool is not on PATH. CI sets it after `apt-get install prometheus`.
const requirePromtoolEnv = "BUILDRISK_REQUIRE_PROMTOOL"

// dashboardDatasourceUID is how dashboard panels and variables name their
// datasource: the dashboard's datasource variable.
const dashboardDatasourceUID = "${datasource}"

// exprDatasourceUID is the datasource uid of Grafana's server-side
// expressions (threshold, reduce, math).
const exprDatasourceUID = "__expr__"

// metricNameRE finds the names of this service's and River's metrics in a
// PromQL expression.
var metricNameRE = regexp.MustCompile(`\b(?:buildrisk|river)_[a-z0-9_]*[a-z0-9]`)

// ReferencedMetrics returns the sorted, de-duplicated buildrisk_* and
// river_* metric names that expr (PromQL, or a Grafana query such as
// label_values(...)) refers to, as written: histogram series keep their
// _bucket, _sum or _count suffix (see [metricBaseName]).
func ReferencedMetrics(expr string) []string {
	names := metricNameRE.FindAllString(expr, -1)
	sort.Strings(names)
	return slices.Compact(names)
}

// metricBaseName maps a histogram series name (x_bucket, x_sum, x_count) to
// the histogram's name x when x is in observability.HistogramNames, and
// returns any other name unchanged.
func metricBaseName(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(observability.HistogramNames, base) {
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

type promRuleFile struct {
	Groups []struct {
		Interval string `yaml:"interval"`
		Name     string `yaml:"name"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Annotations   map[string]string `yaml:"annotations"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Record        string            `yaml:"record"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type promConfig struct {
	Global        map[string]any `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []struct {
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Port  int      `yaml:"port"`
			Type  string   `yaml:"type"`
		} `yaml:"dns_sd_configs"`
		HonorLabels   bool   `yaml:"honor_labels"`
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// grafanaDatasources is provisioning/datasources/*.yaml (apiVersion 1).
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Access    string         `yaml:"access"`
		Editable  bool           `yaml:"editable"`
		IsDefault bool           `yaml:"isDefault"`
		JSONData  map[string]any `yaml:"jsonData"`
		Name      string         `yaml:"name"`
		Type      string         `yaml:"type"`
		UID       string         `yaml:"uid"`
		URL       string         `yaml:"url"`
	} `yaml:"datasources"`
}

// grafanaDashboardProviders is provisioning/dashboards/*.yaml (apiVersion 1).
type grafanaDashboardProviders struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		AllowUIUpdates  bool   `yaml:"allowUiUpdates"`
		DisableDeletion bool   `yaml:"disableDeletion"`
		Folder          string `yaml:"folder"`
		Name            string `yaml:"name"`
		Options         struct {
			FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			Path                      string `yaml:"path"`
		} `yaml:"options"`
		OrgID                 int    `yaml:"orgId"`
		Type                  string `yaml:"type"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
	} `yaml:"providers"`
}

// grafanaAlerting is provisioning/alerting/*.yaml (apiVersion 1), with the
// fields of Grafana's AlertRuleGroupV1 / AlertRuleV1 / QueryV1
// (pkg/services/provisioning/alerting/rules_types.go) that we use.
type grafanaAlerting struct {
	APIVersion int `yaml:"apiVersion"`
	Groups     []struct {
		Folder   string             `yaml:"folder"`
		Interval string             `yaml:"interval"`
		Name     string             `yaml:"name"`
		OrgID    int                `yaml:"orgId"`
		Rules    []grafanaAlertRule `yaml:"rules"`
	} `yaml:"groups"`
}

type grafanaAlertRule struct {
	Annotations map[string]string `yaml:"annotations"`
	Condition   string            `yaml:"condition"`
	Data        []struct {
		DatasourceUID     string         `yaml:"datasourceUid"`
		Model             map[string]any `yaml:"model"`
		RefID             string         `yaml:"refId"`
		RelativeTimeRange *struct {
			From int64 `yaml:"from"`
			To   int64 `yaml:"to"`
		} `yaml:"relativeTimeRange"`
	} `yaml:"data"`
	ExecErrState  string            `yaml:"execErrState"`
	For           string            `yaml:"for"`
	IsPaused      bool              `yaml:"isPaused"`
	KeepFiringFor string            `yaml:"keepFiringFor"`
	Labels        map[string]string `yaml:"labels"`
	NoDataState   string            `yaml:"noDataState"`
	Title         string            `yaml:"title"`
	UID           string            `yaml:"uid"`
}

// dashboard is the part of a dashboard JSON model the tests check.
type dashboard struct {
	Panels        []dashboardPanel `json:"panels"`
	SchemaVersion int              `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Datasource *datasourceRef `json:"datasource"`
			Definition string         `json:"definition"`
			Name       string         `json:"name"`
			Type       string         `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Title string `json:"title"`
	UID   string `json:"uid"`
}

type dashboardPanel struct {
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct {
		H int `json:"h"`
		W int `json:"w"`
	} `json:"gridPos"`
	ID      int              `json:"id"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Datasource   *datasourceRef `json:"datasource"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		RefID        string         `json:"refId"`
	} `json:"targets"`
	Title string `json:"title"`
	Type  string `json:"type"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadPromRules(t *testing.T) promRuleFile {
	t.Helper()

	var rules promRuleFile
	decodeYAMLStrict(t, filepath.Join("prometheus", "rules.yml"), &rules)
	return rules
}

func loadGrafanaAlerting(t *testing.T) grafanaAlerting {
	t.Helper()

	var alerting grafanaAlerting
	decodeYAMLStrict(t, filepath.Join("grafana", "provisioning", "alerting", "buildrisk.yaml"), &alerting)
	return alerting
}

// loadDashboards returns every dashboard JSON under grafana/dashboards by
// file name.
func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()

	paths, err := filepath.Glob(filepath.Join("grafana", "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	out := map[string]dashboard{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var d dashboard
		require.NoError(t, json.Unmarshal(data, &d), path)
		out[path] = d
	}
	return out
}

// provisionedDatasourceUID returns the uid of the one provisioned
// Prometheus datasource.
func provisionedDatasourceUID(t *testing.T) string {
	t.Helper()

	var ds grafanaDatasources
	decodeYAMLStrict(t, filepath.Join("grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	require.Len(t, ds.Datasources, 1)
	return ds.Datasources[0].UID
}

// allPanels flattens rows' nested panels.
func allPanels(panels []dashboardPanel) []dashboardPanel {
	var out []dashboardPanel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaMacros replaces Grafana's dashboard variables so a panel query
// becomes plain PromQL.
var grafanaMacros = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"${job}", ".*",
	"$job", ".*",
)

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

// --- metric names ------------------------------------------------------------

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
			require.Contains(t, observability.MetricNames, base, "%s uses %s, which is not in observability.MetricNames", e.source, name)
			if strings.HasPrefix(e.source, filepath.Join("grafana", "dashboards")) {
				usedByDashboards[base] = true
			}
		}
	}

	// The dashboard shows every instrument.
	for _, name := range observability.MetricNames {
		require.True(t, usedByDashboards[name], "no dashboard panel shows %s", name)
	}
}

// --- Prometheus --------------------------------------------------------------

// promtoolPath returns promtool's path, skips the test when it is missing,
// or fails it when BUILDRISK_REQUIRE_PROMTOOL=1.
func promtoolPath(t *testing.T) string {
	t.Helper()

	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(requirePromtoolEnv) == "1" {
			t.Fatalf("promtool is not on PATH and %s=1: install it (apt-get install -y --no-install-recommends prometheus): %v", requirePromtoolEnv, err)
		}
		t.Skipf("promtool is not on PATH, skipping (set %s=1 to fail instead): %v", requirePromtoolEnv, err)
	}
	return path
}

// runPromtool runs promtool with args in dir, feeding it stdin, and fails the
// test with promtool's output when it exits non-zero.
func runPromtool(t *testing.T, dir string, stdin []byte, args ...string) string {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtoolPath(t), args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	require.NoError(t, err)
	return string(out)
}

func TestPromtool(t *testing.T) {
	t.Parallel()

	t.Run("CheckRules", func(t *testing.T) {
		t.Parallel()

		out := runPromtool(t, "prometheus", nil, "check", "rules", "rules.yml")
		require.Contains(t, out, "SUCCESS")
	})

	t.Run("TestRules", func(t *testing.T) {
		t.Parallel()

		out := runPromtool(t, "prometheus", nil, "test", "rules", "rules_test.yml", "rules_freshness_test.yml")
		require.Contains(t, out, "SUCCESS")
	})

	t.Run("CheckConfig", func(t *testing.T) {
		t.Parallel()

		out := runPromtool(t, "prometheus", nil, "check", "config", "prometheus.yml")
		require.Contains(t, out, "SUCCESS")
	})

	// The Grafana alert queries and the dashboard queries are valid PromQL:
	// promtool checks them as recording rules of a temporary rule file.
	t.Run("CheckGrafanaAndDashboardQueries", func(t *testing.T) {
		t.Parallel()

		type rule struct {
			Expr   string `yaml:"expr"`
			Record string `yaml:"record"`
		}
		var rules []rule
		for i, e := range allExpressions(t) {
			if e.promQL {
				rules = append(rules, rule{Expr: e.expr, Record: fmt.Sprintf("syntax_check_%d", i)})
			}
		}
		data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "syntax", "rules": rules}}})
		require.NoError(t, err)
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "queries.yml"), data, 0o600))

		out := runPromtool(t, dir, nil, "check", "rules", "queries.yml")
		require.Contains(t, out, "SUCCESS")
	})

	// What the service serves passes promtool's metric lint, scope labels
	// and all.
	t.Run("CheckMetrics", func(t *testing.T) {
		t.Parallel()

		providers, _ := observability.NewTestProviders()
		t.Cleanup(func() { require.NoError(t, providers.Shutdown(context.WithoutCancel(t.Context()))) })
		inst, err := observability.NewInstruments(providers.Meter)
		require.NoError(t, err)

		ctx := t.Context()
		inst.InitSeries(ctx, []string{"aptTrade"}, []string{"MOLIT"})
		inst.ChunkDuration(ctx, "aptTrade", time.Second)
		inst.FanoutInflightAdd(ctx, "aptTrade", 1)
		inst.FanoutCapacitySet(ctx, "aptTrade", 5)
		inst.ProviderCallsRemainingSet(ctx, "MOLIT", 10)
		inst.ProviderDailyCapSet(ctx, "MOLIT", 100)
		inst.WorkersAliveSet(ctx, 1)
		inst.QueueOldestAgeSet(ctx, "aptTrade", 1)
		inst.RequestStartLatency(ctx, "aptTrade", time.Second)
		inst.ScheduleTick(ctx, "aptTrade", observability.TickMissed, 1)
		inst.SchedulePeriodSet(ctx, "aptTrade", 24*time.Hour)
		inst.SetJobFreshnessSource(func(context.Context) (map[string]time.Time, error) {
			return map[string]time.Time{"aptTrade": time.Unix(1_700_000_000, 0)}, nil
		})

		rec := httptest.NewRecorder()
		providers.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)

		runPromtool(t, ".", rec.Body.Bytes(), "check", "metrics")
	})
}

func TestPrometheusConfig(t *testing.T) {
	t.Parallel()

	var cfg promConfig
	decodeYAML(t, filepath.Join("prometheus", "prometheus.yml"), &cfg)

	require.Contains(t, cfg.RuleFiles, "rules.yml")
	for _, f := range cfg.RuleFiles {
		require.FileExists(t, filepath.Join("prometheus", f))
	}

	jobs := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs[sc.JobName] = true
		// Keeps the batch-job `job` label of buildrisk_* series.
		require.True(t, sc.HonorLabels, "scrape job %s needs honor_labels: true", sc.JobName)
		require.Contains(t, []string{"", "/metrics"}, sc.MetricsPath)
		switch sc.JobName {
		case "buildrisk-api":
			require.Len(t, sc.StaticConfigs, 1)
			require.Equal(t, []string{"api:8080"}, sc.StaticConfigs[0].Targets)
		case "buildrisk-worker":
			require.Len(t, sc.DNSSDConfigs, 1)
			require.Equal(t, []string{"worker"}, sc.DNSSDConfigs[0].Names)
			require.Equal(t, 9090, sc.DNSSDConfigs[0].Port)
			require.Equal(t, "A", sc.DNSSDConfigs[0].Type)
		}
	}
	require.True(t, jobs["buildrisk-api"] && jobs["buildrisk-worker"], "scrape jobs: %v", jobs)

	// BuildriskTargetDown matches these job names.
	for _, g := range loadPromRules(t).Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr, "up{") {
				require.Contains(t, r.Expr, `job=~"buildrisk-.*"`)
			}
		}
	}
}

func TestPrometheusRules(t *testing.T) {
	t.Parallel()

	rules := loadPromRules(t)
	names := map[string]bool{}
	for _, g := range rules.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "only alerting rules here")
			require.False(t, names[r.Alert], "duplicate alert %s", r.Alert)
			names[r.Alert] = true
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			if r.For != "" {
				parseDuration(t, r.For)
			}
		}
	}
	for _, want := range []string{
		"BuildriskFanoutRejections", "BuildriskStaleWorkerReaped", "BuildriskUnaccountedItems",
		"BuildriskQueueAgeHigh", "BuildriskProviderBudgetLow", "BuildriskNoLiveWorker",
		"BuildriskJobNotCompleted", "BuildriskScheduleTicksLost",
	} {
		require.True(t, names[want], "missing alert %s", want)
	}

	// Every alert has a test case in rules_test.yml (the freshness alert's
	// span days and have a file of their own).
	var testFiles string
	for _, f := range []string{"rules_test.yml", "rules_freshness_test.yml"} {
		data, err := os.ReadFile(filepath.Join("prometheus", f))
		require.NoError(t, err)
		testFiles += string(data)
	}
	for name := range names {
		require.Contains(t, testFiles, "alertname: "+name)
	}
}

// --- Grafana -----------------------------------------------------------------

func TestGrafanaDatasources(t *testing.T) {
	t.Parallel()

	var ds grafanaDatasources
	decodeYAMLStrict(t, filepath.Join("grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	require.Equal(t, 1, ds.APIVersion)
	require.Len(t, ds.Datasources, 1)

	d := ds.Datasources[0]
	require.NotEmpty(t, d.Name)
	require.Equal(t, "prometheus", d.Type)
	require.NotEmpty(t, d.UID)
	require.Equal(t, "proxy", d.Access)
	// The compose service name and Prometheus's port.
	require.Equal(t, "http://prometheus:9090", d.URL)
	require.True(t, d.IsDefault)
}

func TestGrafanaDashboardProvider(t *testing.T) {
	t.Parallel()

	var dp grafanaDashboardProviders
	decodeYAMLStrict(t, filepath.Join("grafana", "provisioning", "dashboards", "buildrisk.yaml"), &dp)
	require.Equal(t, 1, dp.APIVersion)
	require.Len(t, dp.Providers, 1)

	p := dp.Providers[0]
	require.NotEmpty(t, p.Name)
	require.Equal(t, "file", p.Type)
	require.NotEmpty(t, p.Options.Path)
	require.GreaterOrEqual(t, p.UpdateIntervalSeconds, 10)

	// compose.yaml mounts the dashboards where the provider reads them.
	compose := loadCompose(t)
	require.Contains(t, compose.Services["grafana"].Volumes, "./grafana/dashboards:"+p.Options.Path+":ro")
}

func TestGrafanaDashboards(t *testing.T) {
	t.Parallel()

	uid := provisionedDatasourceUID(t)
	uids := map[string]bool{}
	for path, d := range loadDashboards(t) {
		require.NotEmpty(t, d.UID, path)
		require.False(t, uids[d.UID], "duplicate dashboard uid %s", d.UID)
		uids[d.UID] = true
		require.NotEmpty(t, d.Title, path)
		require.Positive(t, d.SchemaVersion, path)
		require.NotEmpty(t, d.Panels, path)

		// Panels and query variables use the dashboard's datasource
		// variable, whose default is the provisioned (default) datasource.
		require.NotEmpty(t, uid)
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				require.NotNil(t, v.Datasource, "variable %s", v.Name)
				require.Equal(t, dashboardDatasourceUID, v.Datasource.UID, "variable %s", v.Name)
			}
		}

		ids := map[int]bool{}
		titles := map[string]bool{}
		for _, p := range allPanels(d.Panels) {
			require.False(t, ids[p.ID], "%s: duplicate panel id %d", path, p.ID)
			ids[p.ID] = true
			require.NotEmpty(t, p.Type, "%s: panel %d", path, p.ID)
			require.NotEmpty(t, p.Title, "%s: panel %d", path, p.ID)
			require.Positive(t, p.GridPos.W, p.Title)
			require.Positive(t, p.GridPos.H, p.Title)
			if p.Type == "row" {
				continue
			}
			titles[p.Title] = true

			require.NotNil(t, p.Datasource, p.Title)
			require.Equal(t, dashboardDatasourceUID, p.Datasource.UID, p.Title)
			require.NotEmpty(t, p.Targets, "panel %q has no targets", p.Title)
			refIDs := map[string]bool{}
			for _, target := range p.Targets {
				require.NotEmpty(t, target.Expr, p.Title)
				require.NotEmpty(t, target.RefID, p.Title)
				require.False(t, refIDs[target.RefID], "%s: duplicate refId %s", p.Title, target.RefID)
				refIDs[target.RefID] = true
				require.NotNil(t, target.Datasource, p.Title)
				require.Equal(t, dashboardDatasourceUID, target.Datasource.UID, p.Title)
			}
		}

		// The panels the runbook asks for.
		for _, want := range []string{
			"Requests by result", "Executions by status", "Items by outcome",
			"Fan-out rejections by reason", "Fan-out in flight vs capacity",
			"External calls by outcome", "Provider budget remaining", "Chunk duration",
			"Workers alive", "Oldest queued request age",
			"Schedule due times by outcome", "Time since last completion vs schedule period",
		} {
			require.True(t, titles[want], "%s: no panel %q", path, want)
		}
	}
}

// Enumerations of Grafana's ngalert models (NoDataStateFromString,
// ErrStateFromString).
var (
	grafanaNoDataStates  = []string{"", "NoData", "Alerting", "OK", "KeepLast"}
	grafanaExecErrStates = []string{"", "Error", "Alerting", "OK", "KeepLast"}
	grafanaExprTypes     = []string{"classic_conditions", "math", "reduce", "resample", "sql", "threshold"}
	grafanaUIDRE         = regexp.MustCompile(`^[a-zA-Z0-9\-_]{1,40}$`)
)

func TestGrafanaAlertRules(t *testing.T) {
	t.Parallel()

	alerting := loadGrafanaAlerting(t)
	uid := provisionedDatasourceUID(t)
	require.Equal(t, 1, alerting.APIVersion)
	require.NotEmpty(t, alerting.Groups)

	uids := map[string]bool{}
	titles := map[string]grafanaAlertRule{}
	for _, g := range alerting.Groups {
		// AlertRuleGroupV1.MapToModel: name, folder, interval.
		require.NotEmpty(t, strings.TrimSpace(g.Name))
		require.NotEmpty(t, strings.TrimSpace(g.Folder))
		interval := parseDuration(t, g.Interval)
		require.Positive(t, interval)
		require.Zero(t, interval%(10*time.Second), "group interval must be a multiple of the 10s base interval")

		for _, r := range g.Rules {
			// AlertRuleV1.mapToModel.
			require.NotEmpty(t, r.Title)
			require.Regexp(t, grafanaUIDRE, r.UID, r.Title)
			require.False(t, uids[r.UID], "duplicate uid %s", r.UID)
			uids[r.UID] = true
			_, dup := titles[r.Title]
			require.False(t, dup, "duplicate title %s", r.Title)
			titles[r.Title] = r

			if r.For != "" {
				require.GreaterOrEqual(t, parseDuration(t, r.For), time.Duration(0))
			}
			if r.KeepFiringFor != "" {
				parseDuration(t, r.KeepFiringFor)
			}
			require.Contains(t, grafanaNoDataStates, r.NoDataState, r.Title)
			require.Contains(t, grafanaExecErrStates, r.ExecErrState, r.Title)
			require.NotEmpty(t, r.Condition, r.Title)
			require.NotEmpty(t, r.Data, r.Title)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Title)
			require.NotEmpty(t, r.Annotations["summary"], r.Title)

			refIDs := map[string]bool{}
			for _, q := range r.Data {
				require.NotEmpty(t, q.RefID, r.Title)
				require.False(t, refIDs[q.RefID], "%s: duplicate refId %s", r.Title, q.RefID)
				refIDs[q.RefID] = true
				require.Equal(t, q.RefID, q.Model["refId"], "%s: model refId", r.Title)
			}
			require.True(t, refIDs[r.Condition], "%s: condition %s is not a refId", r.Title, r.Condition)

			for _, q := range r.Data {
				if q.DatasourceUID == exprDatasourceUID {
					require.Contains(t, grafanaExprTypes, q.Model["type"], "%s %s", r.Title, q.RefID)
					ds, _ := q.Model["datasource"].(map[string]any)
					require.Equal(t, exprDatasourceUID, ds["uid"], "%s %s", r.Title, q.RefID)
					if ref, ok := q.Model["expression"].(string); ok {
						require.True(t, refIDs[ref], "%s %s: expression %s is not a refId", r.Title, q.RefID, ref)
					}
					if q.Model["type"] == "threshold" {
						checkThreshold(t, r.Title, q.Model)
					}
					continue
				}
				require.Equal(t, uid, q.DatasourceUID, "%s %s: datasourceUid is not the provisioned datasource", r.Title, q.RefID)
				expr, _ := q.Model["expr"].(string)
				require.NotEmpty(t, strings.TrimSpace(expr), "%s %s", r.Title, q.RefID)
				require.NotNil(t, q.RelativeTimeRange, "%s %s", r.Title, q.RefID)
				require.Greater(t, q.RelativeTimeRange.From, q.RelativeTimeRange.To, "%s %s", r.Title, q.RefID)
			}
			// The condition is an expression, not a raw query.
			for _, q := range r.Data {
				if q.RefID == r.Condition {
					require.Equal(t, exprDatasourceUID, q.DatasourceUID, r.Title)
				}
			}
		}
	}

	// The same alerts as the Prometheus rules: names, severities, for.
	for _, g := range loadPromRules(t).Groups {
		for _, pr := range g.Rules {
			gr, ok := titles[pr.Alert]
			require.True(t, ok, "no Grafana rule titled %s", pr.Alert)
			require.Equal(t, pr.Labels["severity"], gr.Labels["severity"], pr.Alert)
			promFor, grafanaFor := time.Duration(0), time.Duration(0)
			if pr.For != "" {
				promFor = parseDuration(t, pr.For)
			}
			if gr.For != "" {
				grafanaFor = parseDuration(t, gr.For)
			}
			require.Equal(t, promFor, grafanaFor, "for of %s", pr.Alert)
			delete(titles, pr.Alert)
		}
	}
	require.Empty(t, titles, "Grafana rules without a Prometheus rule")
}

// checkThreshold checks a threshold expression's evaluator.
func checkThreshold(t *testing.T, title string, m map[string]any) {
	t.Helper()

	conditions, _ := m["conditions"].([]any)
	require.Len(t, conditions, 1, title)
	cond, _ := conditions[0].(map[string]any)
	evaluator, _ := cond["evaluator"].(map[string]any)
	params, _ := evaluator["params"].([]any)
	switch evaluator["type"] {
	case "gt", "lt":
		require.Len(t, params, 1, title)
	case "within_range", "outside_range", "within_range_included", "outside_range_included":
		require.Len(t, params, 2, title)
	default:
		t.Fatalf("%s: unknown threshold evaluator %v", title, evaluator["type"])
	}
}

// --- compose, Kubernetes, Dockerfile -----------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	DependsOn   map[string]any    `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Deploy      struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
	Image           string   `yaml:"image"`
	Ports           []string `yaml:"ports"`
	Profiles        []string `yaml:"profiles"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	StopSignal      string   `yaml:"stop_signal"`
	Volumes         []string `yaml:"volumes"`
}

// dependsOnCondition returns the condition of s's depends_on entry for dep
// ("service_started" for the short list form).
func (s composeService) dependsOnCondition(dep string) (string, bool) {
	v, ok := s.DependsOn[dep]
	if !ok {
		return "", false
	}
	if m, ok := v.(map[string]any); ok {
		c, _ := m["condition"].(string)
		return c, true
	}
	return "service_started", true
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()

	data, err := os.ReadFile("compose.yaml")
	require.NoError(t, err)

	// depends_on may be a list or a map; normalise lists to a map first.
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal(data, &raw))
	services, _ := raw["services"].(map[string]any)
	for _, s := range services {
		svc, _ := s.(map[string]any)
		if list, ok := svc["depends_on"].([]any); ok {
			m := map[string]any{}
			for _, dep := range list {
				m[dep.(string)] = "service_started"
			}
			svc["depends_on"] = m
		}
	}
	normalised, err := yaml.Marshal(raw)
	require.NoError(t, err)

	var c composeFile
	require.NoError(t, yaml.Unmarshal(normalised, &c))
	return c
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

func TestCompose(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	for _, name := range []string{"postgres", "migrate", "api", "worker", "fakeupstream", "prometheus", "alertmanager", "grafana"} {
		require.Contains(t, c.Services, name)
	}

	require.Equal(t, "postgres:15", c.Services["postgres"].Image)

	migrate := c.Services["migrate"]
	require.Equal(t, []string{"migrate"}, migrate.Command)
	cond, ok := migrate.dependsOnCondition("postgres")
	require.True(t, ok)
	require.Equal(t, "service_healthy", cond)

	api := c.Services["api"]
	require.Equal(t, "api", api.Environment["BUILDRISK_ROLE"])
	require.Equal(t, ":8080", api.Environment["BUILDRISK_HTTP_ADDR"])
	require.Contains(t, api.Ports, "8080:8080")
	cond, _ = api.dependsOnCondition("migrate")
	require.Equal(t, "service_completed_successfully", cond)
	for name := range api.Environment {
		require.NotRegexp(t, providerKeyRE, name, "the api must hold no provider keys (it never calls a provider)")
	}

	worker := c.Services["worker"]
	require.Equal(t, "worker", worker.Environment["BUILDRISK_ROLE"])
	require.Equal(t, 60*time.Second, parseDuration(t, worker.StopGracePeriod), "worker stop_grace_period")
	require.Equal(t, 2, worker.Deploy.Replicas)
	require.Equal(t, ":9090", worker.Environment["BUILDRISK_ADMIN_ADDR"])
	require.Less(t, parseDuration(t, worker.Environment["BUILDRISK_DRAIN_TIMEOUT"]), parseDuration(t, worker.StopGracePeriod))
	require.Equal(t, "${BUILDRISK_UPSTREAM_URL:-http://fakeupstream:8090}", worker.Environment["BUILDRISK_UPSTREAM_URL"])
	cond, _ = worker.dependsOnCondition("migrate")
	require.Equal(t, "service_completed_successfully", cond)

	require.Equal(t, []string{"fakeupstream", "--addr", ":8090"}, c.Services["fakeupstream"].Command)

	// Least privilege: migrate connects as the owner, api and worker as
	// roles of their own, created by the postgres init script.
	requireSeparateDatabaseUsers(t, "compose", migrate.Environment["DATABASE_URL"], api.Environment["DATABASE_URL"], worker.Environment["DATABASE_URL"])
	require.Contains(t, c.Services["postgres"].Volumes, "./postgres/10-roles.sh:/docker-entrypoint-initdb.d/10-roles.sh:ro")
	initScript, err := os.ReadFile("postgres/10-roles.sh")
	require.NoError(t, err)
	for user, group := range map[string]string{"radar_api": "radar_app_api", "radar_worker": "radar_app"} {
		require.Contains(t, string(initScript), "CREATE ROLE "+user+" LOGIN PASSWORD :'", "%s gets a password from the environment", user)
		require.Regexp(t, "CREATE ROLE "+user+" [^;]*IN ROLE "+group+";", string(initScript))
	}

	// Safe defaults: no default token (compose refuses to start without
	// one), the fake upstream (whose /__fake/config has no auth) only in the
	// dev profile and never published, and nothing but the api published
	// beyond loopback.
	require.Regexp(t, `^\$\{BUILDRISK_API_TOKENS:\?.+\}$`, api.Environment["BUILDRISK_API_TOKENS"])
	for name, svc := range c.Services {
		for k, v := range svc.Environment {
			require.NotRegexp(t, `\$\{BUILDRISK_API_TOKENS:-`, v, "%s %s: no default token", name, k)
		}
	}
	fake := c.Services["fakeupstream"]
	require.Equal(t, []string{"dev"}, fake.Profiles)
	require.Empty(t, fake.Ports, "the fake upstream is not published")
	require.Empty(t, c.Services["postgres"].Ports, "the database is not published")
	dep, _ := worker.DependsOn["fakeupstream"].(map[string]any)
	require.Equal(t, false, dep["required"], "the worker starts without the dev profile")
	for name, svc := range c.Services {
		for _, port := range svc.Ports {
			if name == "api" {
				continue
			}
			require.True(t, strings.HasPrefix(port, "127.0.0.1:"), "%s publishes %s beyond loopback", name, port)
		}
	}

	// Every radar service runs the image built from deploy/Dockerfile.
	for _, name := range []string{"migrate", "api", "worker", "fakeupstream"} {
		s := c.Services[name]
		require.Equal(t, "buildrisk-radar:local", s.Image, name)
		build, _ := s.Build.(map[string]any)
		require.Equal(t, "deploy/Dockerfile", build["dockerfile"], name)
		require.Equal(t, "..", build["context"], name)
		for env := range s.Environment {
			requireAllowedEnv(t, "compose "+name, env)
		}
	}

	require.Contains(t, c.Services["prometheus"].Volumes, "./prometheus/rules.yml:/etc/prometheus/rules.yml:ro")
	require.Contains(t, c.Services["prometheus"].Volumes, "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro")
	require.Contains(t, c.Services["grafana"].Volumes, "./grafana/provisioning:/etc/grafana/provisioning:ro")

	// Bind-mount sources exist; named volumes are declared.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				_, err := os.Stat(src)
				require.NoError(t, err, "%s mounts a missing %s", name, src)
				continue
			}
			require.Contains(t, c.Volumes, src, "%s uses an undeclared volume", name)
		}
	}
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

type k8sObject struct {
	APIVersion string            `yaml:"apiVersion"`
	Data       map[string]string `yaml:"data"`
	Kind       string            `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		BackoffLimit *int   `yaml:"backoffLimit"`
		ClusterIP    string `yaml:"clusterIP"`
		Ports        []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
		Replicas *int           `yaml:"replicas"`
		Selector map[string]any `yaml:"selector"`
		Template struct {
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
}

type k8sPodSpec struct {
	Containers []struct {
		Args []string `yaml:"args"`
		Env  []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		EnvFrom []struct {
			ConfigMapRef *struct {
				Name string `yaml:"name"`
			} `yaml:"configMapRef"`
			SecretRef *struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Image         string    `yaml:"image"`
		LivenessProbe *k8sProbe `yaml:"livenessProbe"`
		Name          string    `yaml:"name"`
		Ports         []struct {
			ContainerPort int    `yaml:"containerPort"`
			Name          string `yaml:"name"`
		} `yaml:"ports"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
	RestartPolicy                 string `yaml:"restartPolicy"`
	TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// loadK8s decodes every document of every k8s/*.yaml except the
// kustomization, keyed by kind/name.
func loadK8s(t *testing.T) map[string]k8sObject {
	t.Helper()

	paths, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	require.NoError(t, err)
	objects := map[string]k8sObject{}
	for _, path := range paths {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var obj k8sObject
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, path)
			require.NotEmpty(t, obj.APIVersion, path)
			require.NotEmpty(t, obj.Kind, path)
			require.NotEmpty(t, obj.Metadata.Name, path)
			key := obj.Kind + "/" + obj.Metadata.Name
			require.NotContains(t, objects, key, "duplicate %s", key)
			objects[key] = obj
		}
	}
	return objects
}

// probePort resolves a probe's port (number or container port name).
func probePort(t *testing.T, pod k8sPodSpec, port any) int {
	t.Helper()

	switch p := port.(type) {
	case int:
		return p
	case string:
		for _, c := range pod.Containers {
			for _, cp := range c.Ports {
				if cp.Name == p {
					return cp.ContainerPort
				}
			}
		}
	}
	t.Fatalf("unresolvable probe port %v", port)
	return 0
}

func TestKubernetes(t *testing.T) {
	t.Parallel()

	// The kustomization lists every manifest.
	var kustomization struct {
		Resources []string `yaml:"resources"`
	}
	decodeYAML(t, filepath.Join("k8s", "kustomization.yaml"), &kustomization)
	paths, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	require.NoError(t, err)
	for _, path := range paths {
		if base := filepath.Base(path); base != "kustomization.yaml" {
			require.Contains(t, kustomization.Resources, base)
		}
	}
	for _, r := range kustomization.Resources {
		require.FileExists(t, filepath.Join("k8s", r))
	}

	objects := loadK8s(t)

	// Every envFrom reference resolves; every variable is a known one; only
	// the worker sees provider keys.
	keysOf := func(kind, name string) map[string]string {
		obj, ok := objects[kind+"/"+name]
		require.True(t, ok, "%s/%s is referenced but not defined", kind, name)
		if kind == "Secret" {
			return obj.StringData
		}
		return obj.Data
	}
	envOf := func(workload string) map[string]string {
		obj, ok := objects[workload]
		require.True(t, ok, "missing %s", workload)
		require.Len(t, obj.Spec.Template.Spec.Containers, 1, workload)
		c := obj.Spec.Template.Spec.Containers[0]
		require.Equal(t, "buildrisk-radar", c.Image, workload)
		env := map[string]string{}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				for k, v := range keysOf("ConfigMap", ef.ConfigMapRef.Name) {
					env[k] = v
				}
			}
			if ef.SecretRef != nil {
				for k, v := range keysOf("Secret", ef.SecretRef.Name) {
					env[k] = v
				}
			}
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		for name := range env {
			requireAllowedEnv(t, workload, name)
		}
		require.NotEmpty(t, env["DATABASE_URL"], workload)
		return env
	}

	worker := objects["Deployment/buildrisk-radar-worker"]
	workerEnv := envOf("Deployment/buildrisk-radar-worker")
	require.Equal(t, "worker", workerEnv["BUILDRISK_ROLE"])
	require.NotNil(t, worker.Spec.Template.Spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*worker.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	require.Equal(t, 60*time.Second, grace)
	require.Less(t, parseDuration(t, workerEnv["BUILDRISK_DRAIN_TIMEOUT"]), grace)
	wc := worker.Spec.Template.Spec.Containers[0]
	require.NotNil(t, wc.ReadinessProbe)
	require.NotNil(t, wc.ReadinessProbe.HTTPGet)
	require.Equal(t, "/readyz", wc.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, 9090, probePort(t, worker.Spec.Template.Spec, wc.ReadinessProbe.HTTPGet.Port))
	require.Equal(t, ":9090", workerEnv["BUILDRISK_ADMIN_ADDR"])
	hasKeys := false
	for name := range workerEnv {
		hasKeys = hasKeys || providerKeyRE.MatchString(name)
	}
	require.True(t, hasKeys, "the worker needs the provider keys")

	api := objects["Deployment/buildrisk-radar-api"]
	apiEnv := envOf("Deployment/buildrisk-radar-api")
	require.Equal(t, "api", apiEnv["BUILDRISK_ROLE"])
	require.Equal(t, ":8080", apiEnv["BUILDRISK_HTTP_ADDR"])
	// Tokens come from a mounted secret file, never a default.
	require.Empty(t, apiEnv["BUILDRISK_API_TOKENS"])
	tokensFile := apiEnv["BUILDRISK_API_TOKENS_FILE"]
	require.NotEmpty(t, tokensFile)
	mounted := false
	for _, m := range api.Spec.Template.Spec.Containers[0].VolumeMounts {
		for _, v := range api.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && filepath.Dir(tokensFile) == m.MountPath {
				secret := keysOf("Secret", v.Secret.SecretName)
				require.Contains(t, secret, filepath.Base(tokensFile))
				mounted = true
			}
		}
	}
	require.True(t, mounted, "BUILDRISK_API_TOKENS_FILE is in a mounted secret")
	for name := range apiEnv {
		require.NotRegexp(t, providerKeyRE, name, "the api must hold no provider keys (it never calls a provider)")
	}
	ac := api.Spec.Template.Spec.Containers[0]
	require.NotNil(t, ac.ReadinessProbe)
	require.Equal(t, "/readyz", ac.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, 8080, probePort(t, api.Spec.Template.Spec, ac.ReadinessProbe.HTTPGet.Port))

	svc, ok := objects["Service/buildrisk-radar-api"]
	require.True(t, ok)
	require.Len(t, svc.Spec.Ports, 1)
	require.Equal(t, 8080, svc.Spec.Ports[0].Port)

	job, ok := objects["Job/buildrisk-radar-migrate"]
	require.True(t, ok)
	migrateEnv := envOf("Job/buildrisk-radar-migrate")
	requireSeparateDatabaseUsers(t, "kubernetes", migrateEnv["DATABASE_URL"], apiEnv["DATABASE_URL"], workerEnv["DATABASE_URL"])
	require.Equal(t, []string{"migrate"}, job.Spec.Template.Spec.Containers[0].Args)
	require.Contains(t, []string{"Never", "OnFailure"}, job.Spec.Template.Spec.RestartPolicy)
}

func TestDockerfile(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	text := string(data)

	var froms []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "FROM ") {
			froms = append(froms, line)
		}
	}
	require.Len(t, froms, 2, "multi-stage: build and runtime")
	// The build stage uses the Go that go.mod names, so the image is built with
	// the same toolchain (and the same standard-library fixes) as CI.
	goMod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(goMod))
	require.NotNil(t, goLine, "go.mod has a go line")
	require.True(t, strings.HasPrefix(froms[0], "FROM golang:"+goLine[1]+"-"), "%s does not use go %s", froms[0], goLine[1])
	require.Contains(t, text, "./cmd/radar")
	require.Contains(t, text, "-X main.version=")
	require.Contains(t, text, `ENTRYPOINT ["radar"]`)
	require.FileExists(t, "Dockerfile.dockerignore")
}

// shellWords splits s the way a shell splits a command line of plain words
// and double-quoted strings (all the Makefile and Dockerfile use).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// makeVariable returns the value of a `NAME = value` line of the Makefile.
func makeVariable(t *testing.T, makefile, name string) string {
	t.Helper()

	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[:?]?=\s*(.*)$`).FindStringSubmatch(makefile)
	require.NotNil(t, m, "the Makefile sets no %s", name)
	return strings.TrimSpace(m[1])
}

// The image is built with the flags CI builds with: the Dockerfile's build
// environment and `go build` flags equal the Makefile's BUILD_ENV and
// BUILD_FLAGS, which `make build` (run by .ci/run) uses.
func TestDockerfileBuildsLikeMakefile(t *testing.T) {
	t.Parallel()

	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	makefile := string(mk)
	require.Regexp(t, `(?m)^build:\n\t\$\(BUILD_ENV\) \$\(GO\) build \$\(BUILD_FLAGS\) -o bin/radar \./cmd/radar$`, makefile,
		"make build uses BUILD_ENV and BUILD_FLAGS")
	wantEnv := shellWords(makeVariable(t, makefile, "BUILD_ENV"))
	wantFlags := shellWords(makeVariable(t, makefile, "BUILD_FLAGS"))

	df, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	// Join continuation lines, then read the build stage's ENV and go build.
	dockerfile := strings.ReplaceAll(string(df), "\\\n", " ")
	var gotEnv, gotFlags []string
	for line := range strings.SplitSeq(dockerfile, "\n") {
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			gotEnv = append(gotEnv, shellWords(rest)...)
		}
		if _, build, ok := strings.Cut(line, " go build "); ok {
			require.Nil(t, gotFlags, "one go build in the Dockerfile")
			flags, _, ok := strings.Cut(build, " -o ")
			require.True(t, ok, "go build ... -o OUT")
			gotFlags = shellWords(strings.ReplaceAll(flags, "${VERSION}", "$(VERSION)"))
		}
	}
	require.NotNil(t, gotFlags, "the Dockerfile runs go build")
	require.ElementsMatch(t, wantEnv, gotEnv, "the Dockerfile's ENV and the Makefile's BUILD_ENV")
	require.Equal(t, wantFlags, gotFlags, "the Dockerfile's go build flags and the Makefile's BUILD_FLAGS")
}

func TestShellWords(t *testing.T) {
	t.Parallel()

	require.Equal(t, []string{"-trimpath", "-ldflags", "-s -w -X main.version=$(VERSION)", "x"},
		shellWords(` -trimpath  -ldflags "-s -w -X main.version=$(VERSION)" x`))
}
