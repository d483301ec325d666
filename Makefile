# buildrisk-radar — two commands: `make run` and `make test`.
# The machine's own Go may be older; this makes the go command fetch and use
# the toolchain go.mod names (the standard library's security fixes live there).
export GOTOOLCHAIN = go1.27.3
GO ?= go
SQLC = $(GO) tool -modfile=tools/go.mod sqlc
STATICCHECK = $(GO) tool -modfile=tools/go.mod staticcheck
GOVULNCHECK = $(GO) tool -modfile=tools/go.mod govulncheck
DEADCODE = $(GO) tool -modfile=tools/go.mod deadcode
# How many functions deadcode may find that no command reaches: code only
# tests use belongs in test files or test-helper packages, unused code goes.
# The three left are test support that needs pglocal's internals (its
# child process and credentials): Cluster.Halt, Cluster.Resume and
# ChildProcAttr.
DEADCODE_MAX = 3
# The vulnerability database is built offline from the golang.org/x/vulndb
# module pinned in tools/vulndb/go.mod, once per pin, into this cache.
VULNDB_VERSION = $(shell awk '$$1 == "golang.org/x/vulndb" { print $$2 }' tools/vulndb/go.mod)
VULNDB_DIR = $(CURDIR)/.cache/vulndb/$(VULNDB_VERSION)
TEST_FLAGS ?= -race -count=1 -timeout 12m
# The chaos soak (see RELIABILITY.md): how long it loads and injects faults,
# its seed (random: a new one each run, printed for a replay), and its
# database (none: one server; async or sync: a primary and a standby, which
# the failover fault promotes).
SOAK_DURATION ?= 10m
SOAK_SEED ?= random
SOAK_REPLICATION ?= none
SOAK_CI_SEED = 20261130

# deploy/validate is a Go module of its own (the Kubernetes and Compose
# loaders stay out of the service's module); make test, vet and lint cover it.
# Its tests are single-goroutine file checks: no -race, which would rebuild
# the Kubernetes libraries instrumented for nothing.
VALIDATE_DIR = deploy/validate
VALIDATE_TEST_FLAGS ?= -count=1 -timeout 10m
# The release build: the flags deploy/Dockerfile builds the image with
# (deploy/dockerfile_test.go fails when the two differ). CI builds with them.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
BUILD_ENV = CGO_ENABLED=0 GOFLAGS=-buildvcs=false
BUILD_FLAGS = -trimpath -tags timetzdata -ldflags "-s -w -X main.version=$(VERSION)"
# How long a cold build of bin/radar took on the reference machine (2
# cores, an empty GOCACHE, the modules already downloaded): measured with
# GOCACHE=$(mktemp -d) and BUILD_ENV/BUILD_FLAGS, 98.6 s of user time.
COLD_BUILD = 1m47s
REDOCLY_DIR = tools/redocly

.PHONY: run test test-under-load bench bench-smoke bench-go build soak soak-ci generate generate-client check-generated fmt vet lint deadcode vuln promtool-test alert-e2e dashboard-lint openapi-lint fuzz ci

## run: everything in one process (embedded PostgreSQL, migrations, fake upstream, api + worker).
## The build runs under tools/progress.sh: a line every 30 s with the time
## elapsed and the packages compiled, so a first build is never silent.
run:
	@test -x bin/radar || echo "first run: building bin/radar. The go command fetches Go 1.27.3 and the modules first (a few hundred MB); then a cold build compiles about 680 packages: $(COLD_BUILD) on the reference machine (2 cores), longer on a loaded one."
	@sh tools/progress.sh "building bin/radar" $(MAKE) --no-print-directory build BUILD_VERBOSE=-v
	./bin/radar dev

## test: the whole suite against private PostgreSQL clusters and the fake upstream
test:
	$(GO) test $(TEST_FLAGS) ./...
	cd $(VALIDATE_DIR) && $(GO) test $(VALIDATE_TEST_FLAGS) ./...
	@sh tools/optional-tests.sh

## test-under-load: make test beside stress-ng keeping every CPU busy, so
## the machine is twice as loaded as the suite alone makes it (the tests
## must not depend on timing)
test-under-load:
	@command -v stress-ng >/dev/null || { echo "stress-ng is not installed (Debian: apt-get install stress-ng)"; exit 1; }
	stress-ng --cpu $$(nproc) --timeout 90m --quiet & stress=$$!; \
	trap 'kill $$stress 2>/dev/null' EXIT; \
	$(MAKE) test

## bench: the ratio table (every figure beside its reference from the same
## run, medians of 3 with min–max), printed and written into BENCHMARKS.md
bench:
	BUILDRISK_BENCH=full $(GO) test -run '^TestBenchTable$$' -count 1 -timeout 60m -v ./cmd/radar/

## bench-smoke: the same table at toy sizes, in seconds (CI runs it so the
## table cannot rot); prints only
bench-smoke:
	BUILDRISK_BENCH=smoke $(GO) test -run '^TestBenchTable$$' -count 1 -timeout 10m -v ./cmd/radar/

## bench-go: every Go benchmark once (BenchmarkCreditEval40k, BenchmarkServiceVsRiver)
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./...

## build: bin/radar, built as deploy/Dockerfile builds it (BUILD_VERBOSE=-v
## lists the packages as they compile)
BUILD_VERBOSE ?=
build:
	$(BUILD_ENV) $(GO) build $(BUILD_VERBOSE) $(BUILD_FLAGS) -o bin/radar ./cmd/radar

## soak: the chaos soak against bin/radar (SOAK_DURATION, SOAK_SEED, SOAK_REPLICATION); exits 1 on a breached invariant
soak: build
	$(GO) build -o bin/soak ./cmd/soak
	./bin/soak -bin bin/radar -duration $(SOAK_DURATION) -replication $(SOAK_REPLICATION) $(if $(filter random,$(SOAK_SEED)),,-seed $(SOAK_SEED))

## soak-ci: the soak for CI, 60 s with a fixed seed
soak-ci: build
	$(GO) build -o bin/soak ./cmd/soak
	./bin/soak -bin bin/radar -duration 60s -seed $(SOAK_CI_SEED)

## fuzz: every Go fuzz target (func FuzzXxx in a _test.go) for FUZZTIME each,
## starting from its committed seeds in testdata/fuzz; a failing input is
## written there, to be committed with its fix
FUZZTIME ?= 3s
fuzz:
	@set -e; grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sort | while IFS=: read -r file decl; do \
		name=$${decl#func }; pkg=./$$(dirname $${file#./}); \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

## generate: regenerate sqlc code from queries/*.sql, and the observability
## pack (deploy/pack: the Prometheus and Grafana alert rules and the
## Grafana dashboard) from its Go source
PACKGEN = $(GO) run ./deploy/pack/packgen -dir deploy
generate:
	$(SQLC) generate
	$(PACKGEN)

## generate-client: regenerate examples/goclient/client from the served
## OpenAPI document with oapi-codegen (pinned in tools/go.mod);
## TestGeneratedClients fails when it is stale
OAPI_CODEGEN = $(GO) tool -modfile=tools/go.mod oapi-codegen
generate-client:
	mkdir -p .cache
	$(GO) test -count=1 -run '^TestOpenAPIDocument$$' ./api -args -openapi.out=$(CURDIR)/.cache/openapi.json
	$(OAPI_CODEGEN) -config examples/goclient/client/oapi-codegen.yaml -o examples/goclient/client/client.gen.go $(CURDIR)/.cache/openapi.json

## check-generated: fails when committed sqlc output or a generated
## observability pack file is stale
check-generated:
	$(SQLC) diff
	$(PACKGEN) -check

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd $(VALIDATE_DIR) && $(GO) vet ./...

## lint: staticcheck over the whole module, then make deadcode
lint:
	$(STATICCHECK) ./...
	cd $(VALIDATE_DIR) && $(GO) tool -modfile=$(CURDIR)/tools/go.mod staticcheck ./...
	@$(MAKE) --no-print-directory deadcode

## deadcode: the functions no command (./cmd/...) reaches, listed; fails
## when there are more than DEADCODE_MAX
deadcode:
	@out=$$($(DEADCODE) ./cmd/...) || { echo "deadcode failed"; exit 1; }; \
	n=$$(printf '%s\n' "$$out" | grep -c . || true); \
	[ -z "$$out" ] || printf '%s\n' "$$out"; \
	echo "deadcode: $$n unreachable functions (at most $(DEADCODE_MAX))"; \
	[ "$$n" -le $(DEADCODE_MAX) ]

## vuln: govulncheck against the pinned offline database; fails on a reachable vulnerability
vuln: $(VULNDB_DIR)/index/db.json
	$(GOVULNCHECK) -db file://$(VULNDB_DIR) ./...

$(VULNDB_DIR)/index/db.json:
	@test -n "$(VULNDB_VERSION)" || { echo "cannot read the golang.org/x/vulndb pin from tools/vulndb/go.mod"; exit 1; }
	rm -rf $(VULNDB_DIR).tmp
	$(GO) mod download -modfile=tools/vulndb/go.mod golang.org/x/vulndb
	$(GO) tool -modfile=tools/vulndb/go.mod indexdb \
		-vulns "$$($(GO) list -modfile=tools/vulndb/go.mod -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv" \
		-out $(VULNDB_DIR).tmp
	mv $(VULNDB_DIR).tmp $(VULNDB_DIR)

## dashboard-lint: grafana/dashboard-linter's rules over the generated
## dashboard, offline: TestGrafanaDashboardLint checks the same rules (its
## exclusions in deploy/grafana/dashboards/.lint) with no network. The
## linter itself is not pinned in tools/go.mod because it cannot be
## installed here: the module proxy refuses github.com/grafana/dashboard-linter
## (403 "not available" for its tags and for an older commit, 5e22d6dc65a1),
## so no version could be built. Where you have its binary,
## DASHBOARD_LINTER=/path/to/dashboard-linter runs it as well.
DASHBOARD_LINTER ?=
dashboard-lint:
	$(GO) test -count=1 -run '^TestGrafanaDashboardLint$$' ./deploy/
	@if [ -n "$(DASHBOARD_LINTER)" ]; then \
		set -e; for f in deploy/grafana/dashboards/*.json; do echo "== $$f"; $(DASHBOARD_LINTER) lint --strict "$$f"; done; \
	else \
		echo "dashboard-lint: the linter's rules passed offline (TestGrafanaDashboardLint); grafana/dashboard-linter itself was not run: the module proxy refuses it, so it is not installed (DASHBOARD_LINTER=/path/to/binary runs it too)"; \
	fi

## alert-e2e: the shipped rules through a real Prometheus and Alertmanager
## (Debian's prometheus and prometheus-alertmanager) to a test webhook;
## part of make test too, skipped there when the binaries are missing
alert-e2e:
	BUILDRISK_REQUIRE_PROMETHEUS=1 $(GO) test -count=1 -run '^TestAlertRouting_' -v ./deploy/

promtool-test:
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules_test.yml deploy/prometheus/rules_freshness_test.yml

## openapi-lint: Redocly's recommended rules over the served OpenAPI document
## (the CLI pinned in tools/redocly/package-lock.json, installed by npm ci)
openapi-lint:
	cd $(REDOCLY_DIR) && npm ci --no-audit --no-fund --loglevel=error
	$(GO) test -count=1 -run '^TestOpenAPIDocument$$' ./api -args -openapi.out=$(CURDIR)/$(REDOCLY_DIR)/openapi.json
	cd $(REDOCLY_DIR) && npx --no-install redocly lint --config redocly.yaml --format stylish openapi.json

ci: fmt vet lint check-generated promtool-test vuln build openapi-lint test
