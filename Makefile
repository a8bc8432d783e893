# edgepipe — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export CGO_ENABLED := 1

.PHONY: setup run test build vet bench demo images acceptance up chaos mutation chromium

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

bench:
	$(GO) test ./storage/sqlite -run '^$$' -bench BurnDown -benchtime 20000x

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

chaos: build
	./scripts/chaos.sh

mutation:
	./scripts/mutation.sh
