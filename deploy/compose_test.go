package deploy

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

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
