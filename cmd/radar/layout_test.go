package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/buildrisk/radar/"

// allowedImports is the package map (docs/architecture.md): which of this
// module's packages each package may import (non-test code). Imports point
// down only. internal/app, the composition root, and internal/apptest, the
// test harness built on it, may import every package below them (nil here:
// see belowComposition); cmd/radar imports what its roles need.
var allowedImports = map[string][]string{
	"internal/app":                    nil,
	"internal/apptest":                nil,
	"internal/app/startstop":          {},
	"internal/config":                 {"api", "internal/jobset", "catalog/coverage", "jobs/riskrule", "queries", "queue/batch", "queue/forecast", "queue/request", "queue/worker", "sql/migrations", "upstream"},
	"internal/dbpool":                 {"internal/config", "queries", "sql/migrations", "sql/pgfence", "sql/pgtx"},
	"internal/jobset":                 {"catalog", "jobs/apttrade", "jobs/corpcode", "jobs/credit", "jobs/filing", "jobs/riskmetric", "jobs/riskrule", "jobs/stockprice", "queue/batch"},
	"exposure":                        {"queries", "sql/pgtx", "upstream/fakeupstream"},
	"api":                             {"catalog/coverage", "queue/forecast", "queue/request", "catalog", "queries", "sql/pgtx", "observability", "radartype"},
	"queue/worker":                    {"queue/batch", "queue/request", "upstream", "catalog", "queries", "sql/pgtx", "observability", "radartype", "queue/service", "sql/pgfence"},
	"queue/service":                   {},
	"queue/batch":                     {"upstream", "queue/forecast", "queue/request", "queue/service", "catalog", "queries", "sql/pgtx", "observability", "radartype"},
	"queue/forecast":                  {},
	"queue/request":                   {"catalog", "queries", "sql/pgtx", "observability", "radartype", "queue/service"},
	"catalog/coverage":                {"catalog", "queries"},
	"catalog/jobstest":                {"catalog"},
	"upstream":                        {"queries", "sql/pgtx", "observability"},
	"upstream/fakeupstream":           {},
	"catalog":                         {"queries"},
	"queries":                         {"sql/pgtx"},
	"queries/testfactory":             {"queries", "radartype"},
	"queue/request/requesttest":       {"queries"},
	"queries/testfactory/bulk":        {},
	"sql/pgfence":                     {"queries"},
	"sql/pgtx":                        {},
	"sql/migrations":                  {},
	"sql/pglocal":                     {},
	"sql/pgtest":                      {"sql/migrations", "sql/pglocal"},
	"observability":                   {"radartype"},
	"radartype":                       {},
	"observability/observabilitytest": {"observability", "observability/internal/gathered"},
	"observability/internal/gathered": {},
	"deploy":                          {},
	"deploy/pack":                     {},
	"deploy/pack/packgen":             {"deploy/pack"},
	"docs":                            {},
	"e2e":                             {},
	"cmd/soak":                        {"sql/pglocal"},
	"examples/goclient":               {"examples/goclient/client"},
	"examples/goclient/client":        {},
	"jobs/apttrade":                   jobPackageImports,
	"jobs/corpcode":                   jobPackageImports,
	"jobs/credit":                     jobPackageImports,
	"jobs/filing":                     jobPackageImports,
	"jobs/riskmetric":                 slices.Concat(jobPackageImports, []string{"jobs/riskrule"}), // metrics chains to rules, by name
	"jobs/riskrule":                   jobPackageImports,
	"jobs/stockprice":                 jobPackageImports,
}

// belowComposition is every package of the map that internal/app and
// internal/apptest may import: all but the commands, the examples, the
// harness itself, the whole-system tests (e2e) and the test helpers (the
// jobs' and the row factory: production code never imports a test helper).
func belowComposition() []string {
	var below []string
	for pkg := range allowedImports {
		if strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "examples/") || pkg == "internal/apptest" || pkg == "catalog/jobstest" ||
			strings.HasPrefix(pkg, "queries/testfactory") || pkg == "queue/request/requesttest" || pkg == "e2e" {
			continue
		}
		below = append(below, pkg)
	}
	return below
}

var jobPackageImports = []string{"queue/batch", "upstream", "catalog", "queries", "observability"}

// forbiddenThirdParty keeps HTTP out of the jobs and River's worker side
// out of the api.
var forbiddenThirdParty = map[string][]string{
	"api":     {"github.com/riverqueue/river"},
	"jobs":    {"github.com/danielgtaylor/huma"},
	"catalog": {"github.com/danielgtaylor/huma"},
}

func TestLayout_ImportsPointDown(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if pkg == "cmd/radar" {
			// The command parses flags and the environment and picks a
			// role; it may import anything but the test harness.
			require.NotContains(t, fields[1:], module+"internal/apptest", "cmd/radar must not import internal/apptest (test-only)")
			continue
		}
		allowed, known := allowedImports[pkg]
		require.True(t, known, "package %s is not in the layout map (allowedImports)", pkg)
		if allowed == nil && (pkg == "internal/app" || pkg == "internal/apptest") {
			allowed = belowComposition()
			if pkg == "internal/apptest" {
				allowed = append(allowed, "internal/app", "queue/request/requesttest")
			}
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				require.Contains(t, allowed, strings.TrimPrefix(imp, module), "%s must not import %s", pkg, imp)
			}
			for prefix, banned := range forbiddenThirdParty {
				if pkg != prefix && !strings.HasPrefix(pkg, prefix+"/") {
					continue
				}
				for _, b := range banned {
					require.False(t, strings.HasPrefix(imp, b), "%s must not import %s", pkg, imp)
				}
			}
		}
	}
}

// The queue packages' tests build only the pieces they test: scenarios of
// the whole system (internal/app, internal/apptest) live in e2e, so `go test
// ./queue/...` compiles neither the api nor Huma.
func TestLayout_QueueTestsStayAtTheirSeams(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-test", "-deps", module+"queue/...").CombinedOutput()
	require.NoError(t, err, string(out))
	banned := []string{module + "api", module + "internal/app", module + "internal/apptest", "github.com/danielgtaylor/huma"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dep := strings.Fields(line)[0]
		for _, b := range banned {
			require.False(t, dep == b || strings.HasPrefix(dep, b+"/"), "the tests of queue/... depend on %s (%s): whole-system tests belong in e2e", dep, line)
		}
	}
}

// The top-level folders are layers: no import runs from a lower folder to
// a higher one, so no folder spans two layers. Before, jobs/ held both the
// catalog, below queue/, and the job packages, above it.
func TestLayout_FoldersAreLayers(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	require.NoError(t, err, string(out))
	folder := func(pkg string) string { return strings.SplitN(strings.TrimPrefix(pkg, module), "/", 2)[0] }
	edges := map[string]map[string]string{} // folder -> imported folder -> one import that makes it
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) || folder(fields[0]) == folder(imp) {
				continue
			}
			if edges[folder(fields[0])] == nil {
				edges[folder(fields[0])] = map[string]string{}
			}
			edges[folder(fields[0])][folder(imp)] = strings.TrimPrefix(fields[0], module) + " -> " + strings.TrimPrefix(imp, module)
		}
	}
	// A cycle of folders is an import from a lower folder to a higher one.
	var path []string
	state := map[string]int{} // 1: on the path, 2: done
	var visit func(f string)
	visit = func(f string) {
		state[f] = 1
		path = append(path, f)
		for next, why := range edges[f] {
			switch state[next] {
			case 1:
				t.Fatalf("folders import each other: %s -> %s (%s)", strings.Join(path, " -> "), next, why)
			case 0:
				visit(next)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	for f := range edges {
		if state[f] == 0 {
			visit(f)
		}
	}
}
