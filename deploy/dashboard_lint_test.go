package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// dashboardLintConfig is grafana/dashboard-linter's .lint file.
type dashboardLintConfig struct {
	Exclusions map[string]*struct {
		Entries []struct {
			Panel string `yaml:"panel"`
		} `yaml:"entries"`
		Reason string `yaml:"reason"`
	} `yaml:"exclusions"`
}

// excluded tells whether rule is excluded for panel.
func (c dashboardLintConfig) excluded(rule, panel string) bool {
	e, ok := c.Exclusions[rule]
	if !ok {
		return false
	}
	if e == nil || len(e.Entries) == 0 {
		return true
	}
	return slices.ContainsFunc(e.Entries, func(x struct {
		Panel string `yaml:"panel"`
	}) bool {
		return x.Panel == panel
	})
}

// lintUnits are the units the dashboards may use: a subset of Grafana's
// value formats, which the linter's panel-units-rule accepts.
var lintUnits = []string{"short", "none", "percent", "percentunit", "s", "ms", "bool", "bool_yes_no", "reqps", "ops", "dateTimeAsIso"}

// rangeSelectorRE finds the range of rate(), irate() and increase().
var rangeSelectorRE = regexp.MustCompile(`\b(?:rate|irate|increase)\((?:[^()\[]|\([^()]*\))*\[([^\]]+)\]`)

// The dashboards pass grafana/dashboard-linter's rules (the same rules,
// checked offline; `make dashboard-lint` runs this test, and the linter
// itself when DASHBOARD_LINTER names its binary: the module proxy refuses
// the linter's module, so it cannot be pinned in tools/go.mod): one datasource variable named datasource for
// Prometheus, every panel and target on it, a valid unit, a title and a
// description on every panel, query variables reloaded on time change, the
// dashboard uneditable (provisioned from this file), and rate() and
// increase() over $__rate_interval, except what .lint excludes with a
// reason.
func TestGrafanaDashboardLint(t *testing.T) {
	t.Parallel()

	var cfg dashboardLintConfig
	decodeYAMLStrict(t, filepath.Join("grafana", "dashboards", ".lint"), &cfg)
	for rule, e := range cfg.Exclusions {
		require.NotNil(t, e, rule)
		require.NotEmpty(t, e.Reason, "exclusion of %s without a reason", rule)
	}

	paths, err := filepath.Glob(filepath.Join("grafana", "dashboards", "*.json"))
	require.NoError(t, err)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var d struct {
			Editable   bool `json:"editable"`
			Templating struct {
				List []struct {
					Datasource *datasourceRef `json:"datasource"`
					Label      string         `json:"label"`
					Name       string         `json:"name"`
					Query      any            `json:"query"`
					Refresh    int            `json:"refresh"`
					Type       string         `json:"type"`
				} `json:"list"`
			} `json:"templating"`
			Panels []lintPanel `json:"panels"`
		}
		require.NoError(t, json.Unmarshal(data, &d), path)

		// template-datasource-rule
		var dsVars []string
		for _, v := range d.Templating.List {
			if v.Type == "datasource" {
				dsVars = append(dsVars, v.Name)
				require.Equal(t, "prometheus", v.Query, "%s: datasource variable %s", path, v.Name)
				require.Equal(t, "Data source", v.Label, "%s: datasource variable %s", path, v.Name)
			}
		}
		require.Equal(t, []string{"datasource"}, dsVars, "%s: exactly one datasource variable, named datasource", path)
		// template-on-time-change-reload-rule
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				require.Equal(t, 2, v.Refresh, "%s: variable %s reloads on time range change", path, v.Name)
			}
		}
		// template-uneditable-rule
		require.False(t, d.Editable, "%s: provisioned dashboards are not editable", path)

		panels := lintPanels(d.Panels)
		require.NotEmpty(t, panels)
		titles := map[string]bool{}
		for _, p := range panels {
			titles[p.Title] = true
			if p.Type == "row" {
				continue
			}
			// panel-datasource-rule
			require.NotNil(t, p.Datasource, "%s: %s", path, p.Title)
			require.Contains(t, []string{"$datasource", "${datasource}"}, p.Datasource.UID, "%s: panel %s uses a templated datasource", path, p.Title)
			// panel-title-description-rule
			require.NotEmpty(t, p.Title, path)
			require.NotEmpty(t, p.Description, "%s: panel %s has a description", path, p.Title)
			// panel-units-rule
			if slices.Contains([]string{"stat", "singlestat", "graph", "table", "timeseries", "gauge"}, p.Type) {
				require.Contains(t, lintUnits, p.FieldConfig.Defaults.Unit, "%s: panel %s has a unit", path, p.Title)
			}
			for _, target := range p.Targets {
				require.Contains(t, []string{"$datasource", "${datasource}"}, target.Datasource.UID, "%s: %s %s", path, p.Title, target.RefID)
				// target-rate-interval-rule
				if cfg.excluded("target-rate-interval-rule", p.Title) {
					continue
				}
				for _, m := range rangeSelectorRE.FindAllStringSubmatch(target.Expr, -1) {
					require.Equal(t, "$__rate_interval", m[1], "%s: %s %s: %s", path, p.Title, target.RefID, target.Expr)
				}
			}
		}
		// Every excluded panel exists, so a rename cannot leave a stale entry.
		for rule, e := range cfg.Exclusions {
			for _, entry := range e.Entries {
				require.True(t, titles[entry.Panel], ".lint excludes %s for panel %q, which no dashboard has", rule, entry.Panel)
			}
		}
	}
}

// lintPanel is the part of a panel the lint rules read.
type lintPanel struct {
	Datasource  *datasourceRef `json:"datasource"`
	Description string         `json:"description"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels  []lintPanel `json:"panels"`
	Targets []struct {
		Datasource datasourceRef `json:"datasource"`
		Expr       string        `json:"expr"`
		RefID      string        `json:"refId"`
	} `json:"targets"`
	Title string `json:"title"`
	Type  string `json:"type"`
}

func lintPanels(panels []lintPanel) []lintPanel {
	var out []lintPanel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, lintPanels(p.Panels)...)
	}
	return out
}
