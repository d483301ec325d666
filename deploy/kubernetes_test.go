package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

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
