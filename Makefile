# outboxd — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
PKGS ?= ./...
TEST_FLAGS ?= -race -count=1 -timeout 9m
BIN := bin/outboxd
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
IMAGE ?= outboxd:dev
# CONTAINER_ENGINE=docker or podman picks one; by default the first of the
# two that is installed and answers.
CONTAINER_ENGINE ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Install (Debian) and start PostgreSQL and Redis when missing; create the outboxd role and database
	@bash deploy/dev/ensure-services.sh

.PHONY: test-services
test-services: ## services, plus promtool, Chromium and python3 (the tests use them) when missing
	@bash deploy/dev/ensure-services.sh --test-tools

.PHONY: build
build: ## Build bin/outboxd
	$(GO) build -o $(BIN) ./cmd/outboxd

.PHONY: image
image: ## Build the container image (Dockerfile) with Docker or Podman; IMAGE (outboxd:dev), CONTAINER_ENGINE
	@engine="$(CONTAINER_ENGINE)"; \
	if [ -z "$$engine" ]; then \
		for e in docker podman; do \
			if command -v $$e >/dev/null 2>&1 && $$e info >/dev/null 2>&1; then engine=$$e; break; fi; \
		done; \
	fi; \
	if [ -z "$$engine" ]; then \
		for e in docker podman; do \
			if command -v $$e >/dev/null 2>&1; then echo "make image: $$e is installed but does not answer ($$e info fails: is its daemon or socket running?)" >&2; fi; \
		done; \
		echo "make image: no container engine to build with: install Docker or Podman (or set CONTAINER_ENGINE)" >&2; \
		exit 1; \
	fi; \
	set -x; \
	$$engine build \
		--build-arg VERSION="$$(git describe --tags --always --dirty 2>/dev/null || echo dev)" \
		--build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
		--build-arg CREATED="$$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		-t $(IMAGE) .

.PHONY: run
run: services build ## Run every role in one process (outboxd dev) on the SQLite store data/outboxd.db
	./$(BIN) dev

.PHONY: test
test: test-services rules ## Run the alert rules' unit tests, then the Go tests with -race against the local PostgreSQL and Redis (the product's module, then deploy's: the manifests' tests, a module of their own), then the allocation tests without it
	$(GO) test $(TEST_FLAGS) $(PKGS)
	cd deploy && $(GO) test $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory test-allocs

# The allocation tests (testing.AllocsPerRun, and the heap bound of
# internal/httpapi's TestIngestMemoryAllocations; their names end in
# Allocations) skip themselves under -race, which allocates on its own and
# makes sync.Pool drop items: test-allocs runs them without it, in every
# package that has one, so that a regression on the hot path fails.
ALLOC_PKGS = $(sort $(dir $(shell grep -rlE --include='*_test.go' 'testing.AllocsPerRun|func Test[A-Za-z]*Allocations.t ' .)))

.PHONY: test-allocs
test-allocs: ## Run the allocation tests (TestXxxAllocations) without -race, which they skip under
	@test -n "$(ALLOC_PKGS)" || { echo "test-allocs: no test calls testing.AllocsPerRun" >&2; exit 1; }
	$(GO) test -count=1 -run 'Allocations$$' $(ALLOC_PKGS)

.PHONY: rules
rules: test-services ## Check the Prometheus rules and run their unit tests with promtool (make test-services installs it)
	promtool check rules deploy/prometheus/outboxd.rules.yml
	cd deploy/prometheus && promtool test rules outboxd.rules.test.yml

.PHONY: bench
bench: services build ## Run the benchmark harness (cmd/outboxd-bench): raw limits, every stage and its ratio, latency, group sizes, peak RSS, the MongoDB store's commands per path, a chart (bench-results.svg); BENCH_EVENTS, BENCH_OUT, BENCH_CHUNKS, BENCH_PROFILE, BENCH_STEPS, BENCH_MONGO_URI
	$(GO) run ./cmd/outboxd-bench -bin $(BIN)

.PHONY: peer
peer: ## Build bin/outboxd-peer, the Watermill pipeline of the benchmarks (bench/peer, a module of its own)
	cd bench/peer && $(GO) build -o ../../bin/outboxd-peer .

.PHONY: bench-peer
bench-peer: services build peer ## outboxd beside the Watermill peer (bench/peer): the same load from outside, alternating rounds, events/s and CPU per event (process, PostgreSQL, Redis, machine) per stage, exactly-once checked; BENCH_EVENTS (20,000), BENCH_ROUNDS (3), BENCH_LIGHT_RATES, BENCH_LIGHT_FOR, BENCH_OUT
	$(GO) run ./cmd/outboxd-bench peer -bin $(BIN) -peer bin/outboxd-peer -rounds $${BENCH_ROUNDS:-3}

.PHONY: bench-partitions
bench-partitions: services build ## Dispatcher and worker rates for --partitions 1, 2, 4 with one and two dispatchers (SQLite store), on one Redis then on a local Redis Cluster, as tables for docs/benchmarks.md; BENCH_EVENTS (default 50,000)
	$(GO) run ./cmd/outboxd-bench partitions -bin $(BIN)
	$(GO) run ./cmd/outboxd-bench partitions -cluster -bin $(BIN)

.PHONY: bench-replay
bench-replay: services build ## A 100,000-event replay while single events are posted: the live events' p99 before, during (replay lane) and into the stream; REPLAY_EVENTS, REPLAY_LIVE_RATE, REPLAY_BASELINE, REPLAY_RATE, REPLAY_DEV_FLAGS, BENCH_OUT
	$(GO) run ./cmd/outboxd-bench replay -bin $(BIN)

.PHONY: bench-chunks
bench-chunks: services build ## The recovery exercise at growing chunk sizes: a replay of REPLAY_EVENTS (50,000) originals with --chunk and --batch-size at each of REPLAY_CHUNKS (500,1000,2000) while single events are posted: replay time, recovery time, lock-wait share, live p99; BENCH_OUT
	$(GO) run ./cmd/outboxd-bench chunks -bin $(BIN)

.PHONY: load
load: build ## Load run against a running outboxd (make run in another terminal): SERVER, LOAD_SINGLE=60s, LOAD_BATCH=30s
	$(GO) run ./cmd/outboxd-bench load

.PHONY: soak
soak: services build ## Randomized fault soak: every role its own process under a nemesis, then the checker; SOAK_DURATION=10m, SOAK_SEED, SOAK_FAULTS, SOAK_STORE, SOAK_PARTITIONS
	$(GO) run ./cmd/outboxd-bench soak -bin $(BIN)

.PHONY: fuzz
fuzz: ## Fuzz request decoding and validation for 30s
	$(GO) test ./internal/httpapi -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 30s

.PHONY: lint
lint: ## golangci-lint (pinned, through the Go module proxy) with .golangci.yml
	$(GOLANGCI_LINT) run $(PKGS)
