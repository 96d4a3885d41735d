# outboxd — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
PKGS ?= ./...
TEST_FLAGS ?= -race -count=1 -timeout 9m
BIN := bin/outboxd

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Install (Debian) and start PostgreSQL and Redis when missing; create the outboxd role and database
	@bash deploy/dev/ensure-services.sh

.PHONY: build
build: ## Build bin/outboxd
	$(GO) build -o $(BIN) ./cmd/outboxd

.PHONY: run
run: services build ## Run everything in one process (outboxd dev) on the embedded MongoDB engine
	./$(BIN) dev

.PHONY: test
test: services ## Run the tests with -race against the local PostgreSQL and Redis
	$(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: bench
bench: services ## Run the benchmarks (ratios against the raw store limits)
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m $(PKGS)

.PHONY: fuzz
fuzz: ## Fuzz request decoding and validation for 30s
	$(GO) test ./outbox -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 30s

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
