package validate

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// k8sDir and composeFile are the deploy files, relative to this package.
const (
	k8sDir      = "../k8s"
	composeFile = "../compose.yaml"
)

// decoder decodes the Kubernetes kinds the deploy files use, strictly: a
// field the API type does not have, or a field given twice, is an error,
// and so is a kind the scheme does not know.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
	} {
		require.NoError(t, add(scheme))
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// build runs kustomize on dir, as `kubectl kustomize dir` does, and returns
// every object it emits as YAML.
func build(t *testing.T, dir string) [][]byte {
	t.Helper()

	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	var docs [][]byte
	for _, r := range resources.Resources() {
		y, err := r.AsYAML()
		require.NoError(t, err)
		docs = append(docs, y)
	}
	require.NotEmpty(t, docs)
	return docs
}

// objects is deploy/k8s after kustomize, decoded into the API types and
// keyed by kind/name.
func objects(t *testing.T) map[string]runtime.Object {
	t.Helper()

	dec := decoder(t)
	objs := map[string]runtime.Object{}
	for _, doc := range build(t, k8sDir) {
		obj, gvk, err := dec.Decode(doc, nil, nil)
		require.NoError(t, err, "strict decode of\n%s", doc)
		m, err := meta.Accessor(obj)
		require.NoError(t, err)
		key := gvk.Kind + "/" + m.GetName()
		require.NotContains(t, objs, key, "duplicate %s", key)
		objs[key] = obj
	}
	return objs
}

// The decoder is strict: a misspelled field, a field of the wrong type and
// an unknown kind all fail, so TestKustomizeBuildDecodesStrictly can fail.
func TestDecoderIsStrict(t *testing.T) {
	t.Parallel()

	dec := decoder(t)
	good := []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      terminationGracePeriodSeconds: 60
      containers: [{name: c, image: i}]
`)
	_, _, err := dec.Decode(good, nil, nil)
	require.NoError(t, err)

	for name, bad := range map[string][]byte{
		"misspelled field": regexp.MustCompile(`terminationGracePeriodSeconds`).ReplaceAll(good, []byte("terminationGracePeriod")),
		"wrong type":       regexp.MustCompile(`: 60`).ReplaceAll(good, []byte(`: sixty`)),
		"unknown kind":     regexp.MustCompile(`kind: Deployment`).ReplaceAll(good, []byte("kind: Deploymnet")),
		"duplicate field":  append(slices.Clone(good), []byte("  replicas: 1\n  replicas: 2\n")...),
	} {
		_, _, err := dec.Decode(bad, nil, nil)
		require.Error(t, err, name)
	}
}

// `kubectl kustomize deploy/k8s` builds, every object decodes strictly into
// its API type, and the objects fit together: selectors select their
// pods, every envFrom names an object of the build, the worker drains
// within its grace period, and a disruption budget keeps workers up.
func TestKustomizeBuildDecodesStrictly(t *testing.T) {
	t.Parallel()

	objs := objects(t)
	get := func(key string) runtime.Object {
		obj, ok := objs[key]
		require.True(t, ok, "kustomize build has no %s (has %v)", key, slices.Sorted(func(yield func(string) bool) {
			for k := range objs {
				if !yield(k) {
					return
				}
			}
		}))
		return obj
	}

	podSpecs := map[string]corev1.PodTemplateSpec{}
	for key, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			require.NoError(t, err, key)
			require.True(t, sel.Matches(labels.Set(o.Spec.Template.Labels)), "%s: selector does not select its pods", key)
			podSpecs[key] = o.Spec.Template
		case *batchv1.Job:
			podSpecs[key] = o.Spec.Template
		}
	}
	require.NotEmpty(t, podSpecs)
	for _, tmpl := range podSpecs {
		for _, c := range tmpl.Spec.Containers {
			for _, ef := range c.EnvFrom {
				switch {
				case ef.ConfigMapRef != nil:
					get("ConfigMap/" + ef.ConfigMapRef.Name)
				case ef.SecretRef != nil:
					get("Secret/" + ef.SecretRef.Name)
				}
			}
		}
	}

	worker := get("Deployment/buildrisk-radar-worker").(*appsv1.Deployment)
	grace := time.Duration(*worker.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	drain := 45 * time.Second
	cm := get("ConfigMap/buildrisk-radar-env").(*corev1.ConfigMap)
	if v, ok := cm.Data["BUILDRISK_DRAIN_TIMEOUT"]; ok {
		var err error
		drain, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	require.Less(t, drain, grace, "the worker's drain must end before SIGKILL")

	pdb := get("PodDisruptionBudget/buildrisk-radar-worker").(*policyv1.PodDisruptionBudget)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	require.True(t, sel.Matches(labels.Set(worker.Spec.Template.Labels)), "the worker PDB selects the worker pods")
	api := get("Deployment/buildrisk-radar-api").(*appsv1.Deployment)
	require.False(t, sel.Matches(labels.Set(api.Spec.Template.Labels)), "the worker PDB selects only workers")
	require.True(t, pdb.Spec.MaxUnavailable != nil || pdb.Spec.MinAvailable != nil, "the PDB limits disruptions")
	require.NotNil(t, worker.Spec.Replicas)
	if pdb.Spec.MinAvailable != nil {
		require.Less(t, pdb.Spec.MinAvailable.IntValue(), int(*worker.Spec.Replicas), "minAvailable below replicas, or a node drain never finishes")
	}
}

// composeVarRE finds the variables compose.yaml interpolates.
var composeVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// loadCompose loads path with the Compose Specification's loader (schema
// validation, interpolation, normalization, consistency checks), every
// profile enabled and every interpolated variable set.
func loadCompose(t *testing.T, path string) (*composetypes.Project, error) {
	t.Helper()

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	env := composetypes.Mapping{}
	for _, m := range composeVarRE.FindAllSubmatch(data, -1) {
		env[string(m[1])] = "set-by-test"
	}
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	return loader.LoadWithContext(context.Background(), composetypes.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []composetypes.ConfigFile{{Filename: abs, Content: data}},
		Environment: env,
	}, func(o *loader.Options) {
		o.SetProjectName("buildrisk-radar", true)
		o.Profiles = []string{"*"}
	})
}

// deploy/compose.yaml is a valid Compose file: the reference loader accepts
// it, and the services it must have are there.
func TestComposeLoads(t *testing.T) {
	t.Parallel()

	project, err := loadCompose(t, composeFile)
	require.NoError(t, err)
	for _, name := range []string{"postgres", "migrate", "api", "worker", "prometheus", "grafana"} {
		_, err := project.GetService(name)
		require.NoError(t, err, "compose has no %s service", name)
	}
	worker, err := project.GetService("worker")
	require.NoError(t, err)
	require.NotNil(t, worker.StopGracePeriod)
	require.Equal(t, 60*time.Second, time.Duration(*worker.StopGracePeriod))
}

// The loader rejects what the schema does not allow, so TestComposeLoads
// can fail: a misspelled service key fails to load.
func TestComposeLoaderIsStrict(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	bad := regexp.MustCompile(`(?m)^(\s+)stop_grace_period:`).ReplaceAll(data, []byte("${1}stop_grace_perod:"))
	require.NotEqual(t, data, bad)
	dir := t.TempDir()
	path := filepath.Join(dir, "compose.yaml")
	require.NoError(t, os.WriteFile(path, bad, 0o644))
	_, err = loadCompose(t, path)
	require.Error(t, err)
	require.Contains(t, err.Error(), "stop_grace_perod")
}
