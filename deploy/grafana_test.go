package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dashboardDatasourceUID is how dashboard panels and variables name their
// datasource: the dashboard's datasource variable.
const dashboardDatasourceUID = "${datasource}"

// exprDatasourceUID is the datasource uid of Grafana's server-side
// expressions (threshold, reduce, math).
const exprDatasourceUID = "__expr__"

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

// grafanaEnv is the environment the interpolation tests give Grafana.
var grafanaEnv = map[string]string{
	"BUILDRISK_RUNBOOK_URL":            "https://runbooks.example/radar/",
	"BUILDRISK_GRAFANA_DATASOURCE_UID": "prom-a",
}

// grafanaInterpolate expands s as Grafana's provisioning expands every
// value of its files (pkg/services/provisioning/values): "$$" is a literal
// "$", and elsewhere $VAR and ${VAR} are environment variables (unset:
// empty).
func grafanaInterpolate(s string, env map[string]string) string {
	parts := strings.Split(s, "$$")
	for i, p := range parts {
		parts[i] = os.Expand(p, func(name string) string { return env[name] })
	}
	return strings.Join(parts, "$")
}

// The Grafana rules import into any Grafana: the datasource uid and the
// runbook base come from Grafana's environment, and every other "$" (the
// {{ $labels.job }} of a summary) survives Grafana's expansion. They are
// evaluated as often as Prometheus evaluates its copy.
func TestGrafanaAlertRules_FromEnvironment(t *testing.T) {
	t.Parallel()

	promGroups := loadPromRules(t).Groups
	require.Len(t, promGroups, 1)
	promInterval := parseDuration(t, promGroups[0].Interval)
	promAnnotations := map[string]map[string]string{}
	for _, r := range promGroups[0].Rules {
		promAnnotations[r.Alert] = r.Annotations
	}

	for _, g := range loadGrafanaAlerting(t).Groups {
		require.Equal(t, promInterval, parseDuration(t, g.Interval), "group %s: Grafana and Prometheus evaluate every %s and %s", g.Name, g.Interval, promGroups[0].Interval)
		for _, r := range g.Rules {
			for _, q := range r.Data {
				if q.DatasourceUID == exprDatasourceUID {
					continue
				}
				require.Equal(t, "${BUILDRISK_GRAFANA_DATASOURCE_UID}", q.DatasourceUID, "%s %s: the datasource uid is Grafana's environment's", r.Title, q.RefID)
				require.Equal(t, "prom-a", grafanaInterpolate(q.DatasourceUID, grafanaEnv))
				expr, _ := q.Model["expr"].(string)
				require.Equal(t, strings.ReplaceAll(expr, "$$", "$"), grafanaInterpolate(expr, nil), "%s %s: an unescaped $ in the query", r.Title, q.RefID)
			}

			runbook := grafanaInterpolate(r.Annotations["runbook_url"], grafanaEnv)
			require.Equal(t, "https://runbooks.example/radar/docs/operations.md#"+strings.ToLower(r.Title), runbook, r.Title)
			for key, v := range r.Annotations {
				if key == "runbook_url" {
					continue
				}
				got := grafanaInterpolate(v, nil)
				require.Equal(t, strings.ReplaceAll(v, "$$", "$"), got, "%s %s: an unescaped $ that Grafana would expand", r.Title, key)
				if key == "description" {
					require.Equal(t, promAnnotations[r.Title][key], got, "%s: Grafana's description is Prometheus's", r.Title)
				}
			}
		}
	}
}
