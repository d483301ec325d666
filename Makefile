# buildrisk-radar — two commands: `make run` and `make test`.
GO ?= go
SQLC = $(GO) tool -modfile=tools/go.mod sqlc
TEST_FLAGS ?= -race -count=1 -timeout 12m

.PHONY: run test bench build generate check-generated fmt vet promtool-test ci

## run: everything in one process (embedded PostgreSQL, migrations, fake upstream, api + worker)
run: build
	./bin/radar dev

## test: the whole suite against private PostgreSQL clusters and the fake upstream
test:
	$(GO) test $(TEST_FLAGS) ./...

## bench: benchmarks with side-by-side ratios (see BENCHMARKS.md)
bench:
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

promtool-test:
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules_test.yml

ci: fmt vet check-generated test
