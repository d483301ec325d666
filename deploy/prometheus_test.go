package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// requirePromtoolEnv makes the promtool tests fail instead of skipping when
// promtool is not on PATH. CI sets it after `apt-get install prometheus`.
const requirePromtoolEnv = "BUILDRISK_REQUIRE_PROMTOOL"

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
		SampleLimit   int    `yaml:"sample_limit"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func loadPromRules(t *testing.T) promRuleFile {
	t.Helper()

	var rules promRuleFile
	decodeYAMLStrict(t, filepath.Join("prometheus", "rules.yml"), &rules)
	return rules
}

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

		providers, _ := observabilitytest.NewProviders()
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
		// A target serving unbounded series fails its scrape instead of
		// filling Prometheus.
		require.Positive(t, sc.SampleLimit, "scrape job %s needs a sample_limit", sc.JobName)
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
