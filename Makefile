# edgepipe — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export CGO_ENABLED := 1

.PHONY: setup run test test-postgres lint build vet bench demo images acceptance up up-postgres chaos mutation chromium

build:
	$(GO) build -o bin/edgepipe ./cmd/edgepipe

setup:
	./scripts/setup.sh

run: setup build
	./bin/edgepipe serve

demo: setup build
	./scripts/demo.sh

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# golangci-lint with .golangci.yml, pinned; installed with go install (not
# a go.mod dependency) into the cache CI uses, when missing.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(HOME)/.cache/edgepipe-bin/golangci-lint
lint:
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q ' $(GOLANGCI_LINT_VERSION:v%=%) ' || \
		GOBIN=$(dir $(GOLANGCI_LINT)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOLANGCI_LINT) run ./...

# The job-store suites against a throwaway PostgreSQL (Debian's postgresql
# package; scripts/postgres.sh runs initdb as the postgres user).
test-postgres:
	@eval "$$(./scripts/postgres.sh start)"; \
	$(GO) test -race -tags postgres -count=1 ./storage/... ./internal/app; rc=$$?; \
	./scripts/postgres.sh stop "$$EDGEPIPE_PG_DIR"; exit $$rc

# The SQLite burn-down next to its ceiling (bench/sqliteceiling) and the
# ceiling with status events and the terminal wall, alternating: the rates,
# the ratios and the load average per round. N jobs, ROUNDS
# rounds; BASELINE=<checkout> adds that checkout's burn-down as a column.
bench:
	GO=$(GO) ./bench/sqliteceiling/compare.sh

images:
	./docker/images.sh

acceptance: images
	$(GO) test -tags acceptance -count=1 -v -timeout 15m ./acceptance

# The operator pages in a real headless Chromium (Debian's chromium
# package); rewrites api/testdata/admin-job-story.png.
chromium:
	$(GO) test -race -tags chromium -count=1 -run Chromium ./api/

up: images
	docker-compose up -d

# The scale-out topology: Postgres + MinIO + API + 2 workers (API on :8180).
up-postgres: images
	docker-compose -p edgepipe-pg -f docker-compose.postgres.yml up -d

chaos: build
	./scripts/chaos.sh

mutation:
	./scripts/mutation.sh
