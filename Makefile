# jetbus — make targets. Only Go is required; everything else is fetched by the Go toolchain.
GO        ?= go
PKGS      ?= ./...

.PHONY: all build test test-short test-long vet fmt-check lint bench bench-peers soak dev docs clean e2e e2e-node

all: build test

## build: production builds of the binaries, bin/bridge and bin/projector (no dev mode: neither
## nats-server nor the MongoDB test backend is linked in).
build:
	$(GO) build $(PKGS)
	$(GO) build -o bin/ ./cmd/bridge ./cmd/projector

## test: vet, gofmt check, every test with the race detector (embedded NATS and MongoDB backend),
## 20000 fuzzed inputs each to the snapshot API's query grammar and to ingress's check of
## hostile subjects, headers and bodies (a count, not a duration: a
## duration-bound -fuzztime can fail with a bare "context deadline exceeded" through a race in
## Go's fuzz coordinator, golang/go#75804, fixed after Go 1.26), and the deploy/ files' validation
## (nested module deploy: compose, Kubernetes, Dockerfile and NATS confs parsed offline).
test: vet fmt-check
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory e2e-node; \
	else echo "npm not found: the end-to-end smoke test publishes with its nats.go fallback"; fi
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	$(GO) test -run '^$$' -fuzz '^FuzzListQuery$$' -fuzztime 20000x ./snapshotapi/
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime 20000x ./ingress/
	cd deploy && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## test-short: a quicker subset (no cluster conformance run, 10k-event churns).
test-short:
	$(GO) test -race -count=1 -short $(PKGS)

## spec-mongo: MongoDB's unified specification tests (crud, change streams, transactions, sessions,
## retryable writes, index and collection management, run-command) through the Go driver against
## the MongoDB test backend, a fresh one per test; prints the pass rate per area and overall and
## fails below 85% of the applicable tests (SPEC_FLAGS='-spec.v' lists the failures; see
## BENCHMARKS.md). make test runs a sample of them.
.PHONY: spec-mongo
SPEC_FLAGS ?=
spec-mongo:
	$(GO) test -count=1 -v -timeout 10m -run '^TestUnifiedSpec$$' ./embeddedtest/minimongo/spectest/ -args -spec.all $(SPEC_FLAGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt: not formatted:"; echo "$$out"; exit 1; fi

## lint: vet, gofmt, and jetbus's own linter over the repository (topic names, headers, schemas).
lint: vet fmt-check
	$(GO) run ./cmd/bridge lint --schemas schemas .

## bench: every benchmark, each against raw nats.go or driver calls in the same run (see BENCHMARKS.md).
## Each package's benchmarks have their own sensible iteration count; COUNT repeats them.
COUNT ?= 1
bench:
	$(GO) test -run '^$$' -bench . -benchtime 30000x -count $(COUNT) -timeout 30m ./jetstream/
	$(GO) test -run '^$$' -bench . -benchtime 3x -count $(COUNT) -timeout 30m ./embeddedtest/minimongo/
	$(GO) test -run '^$$' -bench 'Publish|Validate' -benchtime 3000x -count $(COUNT) -timeout 30m ./schema/
	$(GO) test -run '^$$' -bench 'Rebalance|Consume' -benchtime 3x -count $(COUNT) -timeout 30m ./partition/
	$(GO) test -run '^$$' -bench 'Changelog' -benchtime 2x -count $(COUNT) -timeout 30m ./projection/

## bench-peers: the Bus against Watermill and raw nats.go in one run (nested module bench/peers,
## so Watermill stays out of jetbus's module graph; figures in BENCHMARKS.md). PEERS_FLAGS
## passes flags, e.g. PEERS_FLAGS='-rounds 9 -scenarios consume,decode'.
PEERS_FLAGS ?=
bench-peers:
	cd bench/peers && $(GO) vet ./... && $(GO) run . $(PEERS_FLAGS)

## soak: the churn and cluster tests, repeated (make test runs them once; test-short shrinks them),
## and the tests only soak runs (build tag soak): resets racing consumer leader changes, backlog reads that must not stall.
SOAK ?= 5
soak:
	$(GO) test -race -tags soak -count=$(SOAK) -run 'Churn|Conformance|Cluster|ResetDuringLeaderChanges|BacklogReadsDoNotStall' -timeout 60m ./partition/ ./jetstream/ ./embeddedtest/

## e2e-node: install the Node.js client of the end-to-end tests (e2e/nodeclient, npm ci from
## its lockfile; needs Node 20 and npm).
e2e-node:
	cd e2e/nodeclient && npm ci --no-audit --no-fund

## e2e: every end-to-end scenario (build tag e2e): the real binaries as processes on a 3-node
## NATS cluster and the MongoDB test backend, under a minute of load per scenario while
## processes are killed, a NATS node restarts, the DLQ disappears, MongoDB fails. Figures are
## appended to E2E_RESULTS (see BENCHMARKS.md). make test runs the smoke version only.
E2E_RESULTS ?= $(CURDIR)/bin/e2e-results.md
e2e: e2e-node
	mkdir -p $(dir $(E2E_RESULTS))
	JETBUS_E2E_RESULTS=$(E2E_RESULTS) $(GO) test -tags e2e -count=1 -timeout 60m -v ./e2e/

## test-long: the long variants (build tag long): the transactional projection killed with
## SIGKILL mid-batch twelve times over 30,000 events (make test runs three kills over 3,000);
## 5,000 keep-alive HTTP clients against one projector for a minute (latencies logged, and
## written to LOAD_RESULTS; make test runs 300 for 5 s); 2,000 watchers (Server-Sent Events)
## of a view: commit-to-client latency at a steady rate and in bursts, and the projector's
## throughput with and without them in alternating rounds (written to WATCH_LOAD_RESULTS; make
## test runs 100 watchers for a few seconds); a flood of refused 256 KiB messages
## for 30 s beside 20,000 valid ones (make test: 5 s, 5,000); a million dead letters replayed by
## the bridge binary within 64 MiB of memory (make test: 20,000 letters, memory compared with a tenth);
## the watch checker: 50,000 events over 1,000 keys watched by 24 SSE clients of two projector
## processes, one SIGKILLed, while a rebuild switches (make test: 5,000 events over 200 keys);
## the snapshot API's read-your-writes 200 times and paging walks over 10,000 documents
## (make test: 50 times, 3,000 documents).
LOAD_RESULTS ?= $(CURDIR)/bin/load-results.txt
WATCH_LOAD_RESULTS ?= $(CURDIR)/bin/watch-load-results.txt
test-long:
	$(GO) test -race -count=1 -tags long -timeout 30m -run 'SIGKILL' ./projection/
	$(GO) test -race -count=1 -tags long -timeout 10m -run '^(TestReadYourWrites|TestPagingUnderWrites)$$' ./snapshotapi/
	mkdir -p $(dir $(LOAD_RESULTS)) $(dir $(WATCH_LOAD_RESULTS))
	JETBUS_LOAD_RESULTS=$(LOAD_RESULTS) $(GO) test -count=1 -tags long -timeout 10m -run '^TestHTTPLoad$$' -v ./cmd/cmdtest/
	# Without -race, as TestHTTPLoad: it measures the projector (a production build) and the
	# race detector would slow the 2,000 clients many times more (make test runs the short
	# version with -race).
	JETBUS_WATCH_LOAD_RESULTS=$(WATCH_LOAD_RESULTS) $(GO) test -count=1 -tags long -timeout 30m -run '^TestWatchLoad$$' -v ./cmd/cmdtest/
	# Without -race: the flood measures whether ingress reads as fast as a client floods it, and
	# the race detector slows ingress's per-byte checks many times more than the flooder's
	# publishes (make test runs the short flood with -race).
	$(GO) test -count=1 -tags long -timeout 10m -run '^TestFloodOfRefusals$$' -v ./ingress/
	$(GO) test -count=1 -tags long -timeout 20m -run '^TestReplayMillionLetters$$' -v ./cmd/cmdtest/
	# Without -race: the race detector slows the MongoDB test backend, which runs in the test
	# process, more than the load it serves (make test runs the short checker with -race).
	$(GO) test -count=1 -tags long -timeout 20m -run '^TestWatchChecker$$' -v ./cmd/cmdtest/

## dev: the whole pipeline on one machine from examples/jetbus.yaml (DEV_CONFIG): dev builds
## (-tags dev) of bridge and projector, started by bin/dev/jetbus-dev: the bridge with the
## embedded NATS server and the MongoDB test backend (data under ./data, which survives a
## restart), then the projector with the snapshot API on 127.0.0.1:8081 (bridge ops on :8080).
## It prints what to try. Ctrl-C, or SIGTERM to make, stops both in order and frees the ports.
DEV_CONFIG ?= examples/jetbus.yaml
dev:
	$(GO) build -tags dev -o bin/dev/ ./cmd/bridge ./cmd/projector ./cmd/jetbus-dev
	exec bin/dev/jetbus-dev --config $(DEV_CONFIG) --data data

## docs: regenerate docs/config.md from internal/config and README's command reference from the
## commands (tests fail while they differ).
docs:
	$(GO) test -count=1 -run TestReference ./internal/config -update
	$(GO) test -count=1 -run TestREADMEReference ./cmd/bridge -update
	$(GO) test -count=1 -run TestREADMEReference ./cmd/projector -update

clean:
	rm -rf data bin
