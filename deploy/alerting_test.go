package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// requirePrometheusEnv makes the end-to-end alerting test fail instead of
// skipping when the prometheus or Alertmanager binary is missing. CI sets it
// after `apt-get install prometheus prometheus-alertmanager`.
const requirePrometheusEnv = "BUILDRISK_REQUIRE_PROMETHEUS"

// binaryPath returns the path of the first of names found on PATH; it skips
// the test when none is, or fails it when BUILDRISK_REQUIRE_PROMETHEUS=1.
func binaryPath(t *testing.T, names ...string) string {
	t.Helper()

	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const install = "apt-get install -y --no-install-recommends prometheus prometheus-alertmanager"
	if os.Getenv(requirePrometheusEnv) == "1" {
		t.Fatalf("none of %v is on PATH and %s=1: install them (%s)", names, requirePrometheusEnv, install)
	}
	t.Skipf("none of %v is on PATH, skipping (%s; set %s=1 to fail instead)", names, install, requirePrometheusEnv)
	return ""
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startProcess runs path with args until the test ends; its output is
// logged when the test fails.
func startProcess(t *testing.T, name, path string, args ...string) {
	t.Helper()

	out := &syncBuffer{}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), name)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
}

// waitFor polls cond every 100 ms and fails the test past d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// webhookAlert is one alert of Alertmanager's webhook payload (version 4).
type webhookAlert struct {
	Annotations map[string]string `json:"annotations"`
	Labels      map[string]string `json:"labels"`
	Status      string            `json:"status"`
}

// webhookReceiver is the test's webhook: it records the time each alert
// name was first delivered firing.
type webhookReceiver struct {
	mu     sync.Mutex
	firing map[string]time.Time
	alerts map[string]webhookAlert
}

func (w *webhookReceiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var payload struct {
		Alerts  []webhookAlert `json:"alerts"`
		Version string         `json:"version"`
	}
	if err := json.NewDecoder(r.Body).Decode(&payload); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range payload.Alerts {
		name := a.Labels["alertname"]
		if _, seen := w.firing[name]; a.Status == "firing" && !seen {
			w.firing[name] = now
			w.alerts[name] = a
		}
	}
}

// delivered returns when the alert name first arrived firing, and its
// labels and annotations.
func (w *webhookReceiver) delivered(name string) (time.Time, webhookAlert, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.firing[name]
	return at, w.alerts[name], ok
}

// promQueryValue returns the value of the first sample of an instant query
// against the Prometheus at addr, and false when there is none.
func promQueryValue(t *testing.T, addr, query string) (string, bool) {
	t.Helper()

	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return "", false // not listening yet
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || len(out.Data.Result) == 0 {
		return "", false
	}
	v, _ := out.Data.Result[0].Value[1].(string)
	return v, true
}

// The shipped rules reach a webhook through a real Prometheus and a real
// Alertmanager (Debian's binaries): Prometheus scrapes a process's real
// /metrics (the service's instruments), evaluates deploy/prometheus/rules.yml
// and sends to Alertmanager, whose webhook receiver is this test's server.
// A fan-out rejection is delivered as BuildriskFanoutRejections, the
// database going unreachable as BuildriskDatabaseDown once its `for: 1m`
// has passed, and a running execution forecast past its job's deadline
// (the deadline gauges' source, as the database would answer it) as
// BuildriskDeadlineAtRisk once its `for` has passed. The intervals are the
// test's own (1 s scrape and evaluation, 1 s group wait), so the delivery
// times measure the rules' own delays; so is BuildriskDeadlineAtRisk's
// `for`, shortened from 5m to 15s in the test's copy of the rules (its
// expression, labels and annotations are the shipped ones): the 5m is
// TestPromtool's to prove, and waiting it here held one of the suite's
// two package slots idle for five minutes.
func TestAlertRouting_EndToEnd(t *testing.T) {
	t.Parallel()

	prometheus := binaryPath(t, "prometheus")
	alertmanager := binaryPath(t, "prometheus-alertmanager", "alertmanager")
	ctx := t.Context()
	dir := t.TempDir()

	hook := &webhookReceiver{firing: map[string]time.Time{}, alerts: map[string]webhookAlert{}}
	hookServer := httptest.NewServer(hook)
	t.Cleanup(hookServer.Close)

	// The scraped process: the service's instruments behind its /metrics.
	providers, _ := observabilitytest.NewProviders()
	t.Cleanup(func() { _ = providers.Shutdown(context.WithoutCancel(ctx)) })
	inst, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	inst.InitSeries(ctx, []string{"creditEval"}, []string{"CREDIT"})
	inst.DatabaseUpSet(ctx, true)
	target := httptest.NewServer(providers.MetricsHandler())
	t.Cleanup(target.Close)

	amAddr, promAddr := freeAddr(t), freeAddr(t)
	amConfig := map[string]any{
		"route": map[string]any{
			"receiver": "test-webhook", "group_by": []string{"alertname", "job"},
			"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h",
		},
		"receivers": []any{map[string]any{
			"name":            "test-webhook",
			"webhook_configs": []any{map[string]any{"url": hookServer.URL + "/alerts", "send_resolved": true}},
		}},
	}
	rules := deadlineAtRiskFor(t, filepath.Join("prometheus", "rules.yml"), filepath.Join(dir, "rules.yml"), deadlineAtRiskTestFor)
	promConfig := map[string]any{
		"global": map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s",
			"external_labels": map[string]string{"runbook_base": "https://runbooks.example/buildrisk/"}},
		"rule_files": []string{rules},
		"alerting": map[string]any{"alertmanagers": []any{map[string]any{
			"static_configs": []any{map[string]any{"targets": []string{amAddr}}},
		}}},
		"scrape_configs": []any{map[string]any{
			"job_name": "buildrisk-worker", "honor_labels": true,
			"static_configs": []any{map[string]any{"targets": []string{strings.TrimPrefix(target.URL, "http://")}}},
		}},
	}
	writeYAML := func(name string, v any) string {
		data, err := yaml.Marshal(v)
		require.NoError(t, err)
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}

	startProcess(t, "alertmanager", alertmanager,
		"--config.file="+writeYAML("alertmanager.yml", amConfig),
		"--storage.path="+filepath.Join(dir, "am"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=")
	startProcess(t, "prometheus", prometheus,
		"--config.file="+writeYAML("prometheus.yml", promConfig),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)

	// Prometheus has scraped the 0s, and knows the Alertmanager.
	waitFor(t, time.Minute, "Prometheus to scrape the target", func() bool {
		v, ok := promQueryValue(t, promAddr, `buildrisk_fanout_rejections_total{job="creditEval",reason="queue_full"}`)
		return ok && v == "0"
	})
	waitFor(t, time.Minute, "Prometheus to discover the Alertmanager", func() bool {
		resp, err := http.Get("http://" + promAddr + "/api/v1/alertmanagers")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), amAddr)
	})
	// No alert fires on a healthy process.
	_, _, early := hook.delivered("BuildriskFanoutRejections")
	require.False(t, early, "a rejection alert before any rejection")

	// One item lost in creditEval's fan-out and the database going away.
	rejected := time.Now()
	inst.FanoutRejected(ctx, "creditEval", observability.ReasonQueueFull)
	inst.DatabaseUpSet(ctx, false)

	waitFor(t, time.Minute, "BuildriskFanoutRejections at the webhook", func() bool {
		_, _, ok := hook.delivered("BuildriskFanoutRejections")
		return ok
	})
	at, alert, _ := hook.delivered("BuildriskFanoutRejections")
	t.Logf("BuildriskFanoutRejections delivered %s after the rejection", at.Sub(rejected).Round(100*time.Millisecond))
	require.Equal(t, "creditEval", alert.Labels["job"])
	require.Equal(t, "queue_full", alert.Labels["reason"])
	require.Equal(t, "critical", alert.Labels["severity"])
	require.Equal(t, "https://runbooks.example/buildrisk/docs/operations.md#buildriskfanoutrejections", alert.Annotations["runbook_url"],
		"runbook_url is absolute, from the runbook_base external label")

	// for: 1m, then the group wait: within the 2 minutes the rule promises.
	waitFor(t, 2*time.Minute, "BuildriskDatabaseDown at the webhook", func() bool {
		_, _, ok := hook.delivered("BuildriskDatabaseDown")
		return ok
	})
	at, alert, _ = hook.delivered("BuildriskDatabaseDown")
	took := at.Sub(rejected)
	t.Logf("BuildriskDatabaseDown delivered %s after the database went down", took.Round(100*time.Millisecond))
	require.GreaterOrEqual(t, took, time.Minute, "the rule waits its for: 1m")
	require.Equal(t, "buildrisk-worker", alert.Labels["job"])
	require.Equal(t, "critical", alert.Labels["severity"])
	require.Equal(t, fmt.Sprintf("%s (buildrisk-worker) cannot reach the database for 1m", strings.TrimPrefix(target.URL, "http://")), alert.Annotations["summary"])

	// creditEval's running execution is forecast to end 2 minutes after
	// its deadline (its deadline not missed yet). Prometheus scrapes the
	// forecast; the alert is pending, not sent.
	lateBy := 2 * time.Minute
	late := time.Now()
	inst.SetDeadlineSource(func(context.Context) ([]observability.DeadlineSample, error) {
		return []observability.DeadlineSample{{Job: "creditEval", ForecastLateBy: &lateBy}}, nil
	})
	waitFor(t, time.Minute, "Prometheus to scrape the deadline forecast", func() bool {
		v, ok := promQueryValue(t, promAddr, `buildrisk_job_deadline_forecast_seconds{job="creditEval"}`)
		return ok && v == "120"
	})
	_, _, early = hook.delivered("BuildriskDeadlineAtRisk")
	require.False(t, early, "BuildriskDeadlineAtRisk before its for")
	_, _, missed := hook.delivered("BuildriskDeadlineMissed")
	require.False(t, missed, "BuildriskDeadlineMissed on a deadline not missed")

	// The test's for, then the group wait.
	waitFor(t, 2*time.Minute, "BuildriskDeadlineAtRisk at the webhook", func() bool {
		_, _, ok := hook.delivered("BuildriskDeadlineAtRisk")
		return ok
	})
	at, alert, _ = hook.delivered("BuildriskDeadlineAtRisk")
	took = at.Sub(late)
	t.Logf("BuildriskDeadlineAtRisk delivered %s after the forecast went late", took.Round(100*time.Millisecond))
	require.GreaterOrEqual(t, took, deadlineAtRiskTestFor, "the rule waits its for")
	require.Equal(t, "creditEval", alert.Labels["job"])
	require.Equal(t, "warning", alert.Labels["severity"])
	require.Equal(t, "https://runbooks.example/buildrisk/docs/operations.md#buildriskdeadlineatrisk", alert.Annotations["runbook_url"])
	require.Equal(t, "The running execution of job creditEval is forecast to end 2m 0s after its deadline", alert.Annotations["summary"])
	_, _, missed = hook.delivered("BuildriskDeadlineMissed")
	require.False(t, missed, "BuildriskDeadlineMissed on a deadline not missed")
}

// deadlineAtRiskTestFor is BuildriskDeadlineAtRisk's for in the alert
// routing test's copy of the rules.
const deadlineAtRiskTestFor = 15 * time.Second

// deadlineAtRiskFor writes to dst the rules of src with
// BuildriskDeadlineAtRisk's for set to d, every other field as shipped, and
// returns dst's absolute path.
func deadlineAtRiskFor(t *testing.T, src, dst string, d time.Duration) string {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	var file map[string]any
	require.NoError(t, yaml.Unmarshal(data, &file))
	changed := 0
	for _, group := range file["groups"].([]any) {
		for _, rule := range group.(map[string]any)["rules"].([]any) {
			if r := rule.(map[string]any); r["alert"] == "BuildriskDeadlineAtRisk" {
				require.Equal(t, "5m", r["for"], "the shipped for")
				r["for"] = d.String()
				changed++
			}
		}
	}
	require.Equal(t, 1, changed)
	out, err := yaml.Marshal(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, out, 0o600))
	abs, err := filepath.Abs(dst)
	require.NoError(t, err)
	return abs
}

// grafanaNotifications is provisioning/alerting/notifications.yaml
// (apiVersion 1): contact points and the notification policy tree.
type grafanaNotifications struct {
	APIVersion    int `yaml:"apiVersion"`
	ContactPoints []struct {
		Name      string `yaml:"name"`
		OrgID     int    `yaml:"orgId"`
		Receivers []struct {
			DisableResolveMessage bool           `yaml:"disableResolveMessage"`
			Settings              map[string]any `yaml:"settings"`
			Type                  string         `yaml:"type"`
			UID                   string         `yaml:"uid"`
		} `yaml:"receivers"`
	} `yaml:"contactPoints"`
	Policies []grafanaPolicy `yaml:"policies"`
}

type grafanaPolicy struct {
	GroupBy        []string   `yaml:"group_by"`
	GroupInterval  string     `yaml:"group_interval"`
	GroupWait      string     `yaml:"group_wait"`
	ObjectMatchers [][]string `yaml:"object_matchers"`
	OrgID          int        `yaml:"orgId"`
	Receiver       string     `yaml:"receiver"`
	RepeatInterval string     `yaml:"repeat_interval"`
	Routes         []grafanaPolicy
}

// Alerts have a route as shipped: Prometheus sends to the compose file's
// Alertmanager, whose configuration passes amtool and is the one the
// Kubernetes example carries; Grafana has a contact point and a policy
// routing to it.
func TestAlertRouting_Config(t *testing.T) {
	t.Parallel()

	var prom struct {
		Alerting struct {
			Alertmanagers []struct {
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"alertmanagers"`
		} `yaml:"alerting"`
	}
	decodeYAML(t, filepath.Join("prometheus", "prometheus.yml"), &prom)
	require.Len(t, prom.Alerting.Alertmanagers, 1)
	require.Len(t, prom.Alerting.Alertmanagers[0].StaticConfigs, 1)
	require.Equal(t, []string{"alertmanager:9093"}, prom.Alerting.Alertmanagers[0].StaticConfigs[0].Targets)

	compose := loadCompose(t)
	am, ok := compose.Services["alertmanager"]
	require.True(t, ok, "compose runs the Alertmanager prometheus.yml sends to")
	require.Contains(t, am.Volumes, "./alertmanager/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro")
	require.Contains(t, am.Command, "--config.file=/etc/alertmanager/alertmanager.yml")

	config, err := os.ReadFile(filepath.Join("alertmanager", "alertmanager.yml"))
	require.NoError(t, err)
	var amConfig struct {
		Receivers []struct {
			Name           string `yaml:"name"`
			WebhookConfigs []struct {
				URL string `yaml:"url"`
			} `yaml:"webhook_configs"`
		} `yaml:"receivers"`
		Route struct {
			Receiver string `yaml:"receiver"`
		} `yaml:"route"`
	}
	require.NoError(t, yaml.Unmarshal(config, &amConfig))
	require.Len(t, amConfig.Receivers, 1)
	require.Equal(t, amConfig.Route.Receiver, amConfig.Receivers[0].Name, "the default route goes to the webhook")
	require.Len(t, amConfig.Receivers[0].WebhookConfigs, 1)

	// The Kubernetes example carries the same configuration.
	data, err := os.ReadFile(filepath.Join("k8s", "alerting", "alertmanager.yaml"))
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var configMap struct {
		Data map[string]string `yaml:"data"`
		Kind string            `yaml:"kind"`
	}
	require.NoError(t, dec.Decode(&configMap))
	require.Equal(t, "ConfigMap", configMap.Kind)
	require.Equal(t, string(config), configMap.Data["alertmanager.yml"], "k8s/alerting/alertmanager.yaml's ConfigMap differs from alertmanager/alertmanager.yml")

	var grafana grafanaNotifications
	decodeYAMLStrict(t, filepath.Join("grafana", "provisioning", "alerting", "notifications.yaml"), &grafana)
	require.Equal(t, 1, grafana.APIVersion)
	require.Len(t, grafana.ContactPoints, 1)
	cp := grafana.ContactPoints[0]
	require.Len(t, cp.Receivers, 1)
	require.Equal(t, "webhook", cp.Receivers[0].Type)
	require.Regexp(t, grafanaUIDRE, cp.Receivers[0].UID)
	require.Equal(t, amConfig.Receivers[0].WebhookConfigs[0].URL, cp.Receivers[0].Settings["url"], "both alerting paths use the same default receiver")
	require.Len(t, grafana.Policies, 1)
	var walk func(p grafanaPolicy)
	walk = func(p grafanaPolicy) {
		require.Equal(t, cp.Name, p.Receiver, "a policy routes to the provisioned contact point")
		for _, d := range []string{p.GroupWait, p.GroupInterval, p.RepeatInterval} {
			if d != "" {
				parseDuration(t, d)
			}
		}
		for _, m := range p.ObjectMatchers {
			require.Len(t, m, 3)
		}
		for _, r := range p.Routes {
			walk(r)
		}
	}
	walk(grafana.Policies[0])

	amtool, err := exec.LookPath("amtool")
	if err != nil {
		if os.Getenv(requirePrometheusEnv) == "1" {
			t.Fatalf("amtool is not on PATH and %s=1: install prometheus-alertmanager", requirePrometheusEnv)
		}
		t.Skipf("amtool is not on PATH, skipping its check: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), amtool, "check-config", filepath.Join("alertmanager", "alertmanager.yml")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "SUCCESS")
}
