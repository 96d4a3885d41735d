# outboxd — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
PKGS ?= ./...
TEST_FLAGS ?= -race -count=1 -timeout 9m
BIN := bin/outboxd
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Install (Debian) and start PostgreSQL and Redis when missing; create the outboxd role and database
	@bash deploy/dev/ensure-services.sh

.PHONY: test-services
test-services: ## services, plus promtool and Chromium (the tests use them) when missing
	@bash deploy/dev/ensure-services.sh --test-tools

.PHONY: build
build: ## Build bin/outboxd
	$(GO) build -o $(BIN) ./cmd/outboxd

.PHONY: run
run: services build ## Run every role in one process (outboxd dev) on the SQLite store data/outboxd.db
	./$(BIN) dev

.PHONY: test
test: test-services rules ## Run the alert rules' unit tests, then the Go tests with -race against the local PostgreSQL and Redis
	$(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: rules
rules: test-services ## Check the Prometheus rules and run their unit tests with promtool (make test-services installs it)
	promtool check rules deploy/prometheus/outboxd.rules.yml
	cd deploy/prometheus && promtool test rules outboxd.rules.test.yml

.PHONY: bench
bench: services build ## Run the benchmark harness (cmd/outboxd-bench): raw limits, every stage and its ratio, latency, peak RSS; BENCH_EVENTS, BENCH_OUT, BENCH_CHUNKS, BENCH_PROFILE
	$(GO) run ./cmd/outboxd-bench -bin $(BIN)

.PHONY: load
load: build ## Load run against a running outboxd (make run in another terminal): SERVER, LOAD_SINGLE=60s, LOAD_BATCH=30s
	$(GO) run ./cmd/outboxd-bench load

.PHONY: fuzz
fuzz: ## Fuzz request decoding and validation for 30s
	$(GO) test ./httpapi -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 30s

.PHONY: lint
lint: ## golangci-lint (pinned, through the Go module proxy) with .golangci.yml
	$(GOLANGCI_LINT) run $(PKGS)
