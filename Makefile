# buildrisk-radar — two commands: `make run` and `make test`.
# The machine's own Go may be older; this makes the go command fetch and use
# the toolchain go.mod names (the standard library's security fixes live there).
export GOTOOLCHAIN = go1.27.3
GO ?= go
SQLC = $(GO) tool -modfile=tools/go.mod sqlc
STATICCHECK = $(GO) tool -modfile=tools/go.mod staticcheck
GOVULNCHECK = $(GO) tool -modfile=tools/go.mod govulncheck
# The vulnerability database is built offline from the golang.org/x/vulndb
# module pinned in tools/vulndb/go.mod, once per pin, into this cache.
VULNDB_VERSION = $(shell awk '$$1 == "golang.org/x/vulndb" { print $$2 }' tools/vulndb/go.mod)
VULNDB_DIR = $(CURDIR)/.cache/vulndb/$(VULNDB_VERSION)
TEST_FLAGS ?= -race -count=1 -timeout 12m

.PHONY: run test bench bench-smoke bench-go build generate check-generated fmt vet lint vuln promtool-test ci

## run: everything in one process (embedded PostgreSQL, migrations, fake upstream, api + worker)
run: build
	./bin/radar dev

## test: the whole suite against private PostgreSQL clusters and the fake upstream
test:
	$(GO) test $(TEST_FLAGS) ./...

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

build:
	$(GO) build -o bin/radar ./cmd/radar

## generate: regenerate sqlc code from queries/*.sql
generate:
	$(SQLC) generate

## check-generated: fails when committed sqlc output is stale
check-generated:
	$(SQLC) diff

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## lint: staticcheck over the whole module
lint:
	$(STATICCHECK) ./...

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

promtool-test:
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules_test.yml

ci: fmt vet lint check-generated promtool-test vuln test
