# fastagent — the two commands a newcomer needs are `make dev` and `make test`.
# Both need only Go (1.26.8+); modules are fetched on first use.

GO       ?= go
BIN      ?= bin/fastagent
# The Temporal dev server is a program of its own module (it links the
# Temporal server; fastagent links none): `dev` and the tests run it as a
# child process, found through FASTAGENT_DEVSERVER.
DEVSERVER     = bin/fastagent-devserver
DEVSERVER_DIR = cmd/fastagent-devserver
export FASTAGENT_DEVSERVER := $(CURDIR)/$(DEVSERVER)
# Test binaries are linked without the symbol table and DWARF (-s -w):
# linking is a large share of a test run (about 60 -race test binaries of
# 50 to 140 MB), and -s -w halves each link's CPU time. Panics, failures
# and race reports still name functions and lines (from the pclntab).
TEST_LDFLAGS = -ldflags="-s -w"
PKGS_FAST = $(shell $(GO) list ./... | grep -v -e /internal/e2e -e /examples/)
# phase prints a phase's name and, when it ends, how long it took (and adds
# the time to $(PHASE_TIMES), which `make test` prints as a table at the end).
PHASE_TIMES ?= $(CURDIR)/.phase-times
export PHASE_TIMES
phase = @echo "== $(1)"; start=$$(date +%s); $(2) && { took=$$(( $$(date +%s) - start )); echo "== $(1): $${took}s"; printf '%6ss  %s\n' "$$took" "$(1)" >>$(PHASE_TIMES); }

.PHONY: dev test test-phases prepare test-serial test-parallel phase-summary chromium modules build $(DEVSERVER) lint vet modules-test fmt-check tidy-check unit e2e e2e-bin record-histories docs clean

## dev: run everything (a Temporal dev server + Web UI as a child process, worker, HTTP ingress)
dev: $(DEVSERVER)
	$(GO) run ./cmd/fastagent dev $(ARGS)

# The dev server program: built once (the Temporal server's first build takes
# minutes on 2 cores), then only relinked when its module changes.
$(DEVSERVER):
	@mkdir -p bin
	@test -x $(DEVSERVER) || echo "building the Temporal dev server ($(DEVSERVER_DIR), once: it links the Temporal server)"
	cd $(DEVSERVER_DIR) && $(GO) build -ldflags="-s -w" -o $(CURDIR)/$(DEVSERVER) .

## test: what CI runs — format, tidy, lint (go vet's analyzers among its linters), unit tests with
## -race, the examples and deploy/validate modules' tests, and the end-to-end tests on the dev
## server, one phase after another (the tools and modules fetched and built at once first);
## per-phase wall times at the end
test:
	@rm -f $(PHASE_TIMES); start=$$(date +%s); \
	 $(MAKE) --no-print-directory fmt-check prepare tidy-check e2e-bin lint unit modules-test e2e E2E_TEST_BIN=$(CURDIR)/bin/e2e.test DEVSERVER_LINT_FLAGS="$(DEVSERVER_LINT_QUICK)"; rc=$$?; \
	 $(MAKE) --no-print-directory phase-summary TOTAL=$$(( $$(date +%s) - start )) RC=$$rc; \
	 exit $$rc

## test-parallel: the same phases, the end-to-end tests in the background beside lint, the unit
## phase and the other modules' tests (lines prefixed [e2e]). On 2 cores it is not faster: the
## end-to-end shards (three dev servers and their workers) keep a core busy, so the phases beside
## them take as much longer, and timing-sensitive tests share the CPU
test-parallel:
	@rm -f $(PHASE_TIMES); start=$$(date +%s); \
	 $(MAKE) --no-print-directory test-phases; rc=$$?; \
	 $(MAKE) --no-print-directory phase-summary TOTAL=$$(( $$(date +%s) - start )) RC=$$rc; \
	 exit $$rc

# The phases of `make test-parallel`: the downloads and the builds of the
# tools at once (make -j), the end-to-end test binary, then the shards in
# the background beside lint, the unit phase and the other modules' tests.
# One verdict at the end names the side that failed.
test-phases: fmt-check
	@$(MAKE) --no-print-directory prepare tidy-check e2e-bin
	@rm -f .e2e-status; \
	 { $(MAKE) --no-print-directory e2e E2E_TEST_BIN=$(CURDIR)/bin/e2e.test 2>&1; echo $$? > .e2e-status; } | sed -u 's/^/[e2e] /' & \
	 $(MAKE) --no-print-directory -k lint unit modules-test DEVSERVER_LINT_FLAGS="$(DEVSERVER_LINT_QUICK)"; rc=$$?; \
	 echo "== lint, unit and the other modules done (exit $$rc); waiting for the end-to-end phase"; wait; \
	 erc=$$(cat .e2e-status 2>/dev/null || echo 1); rm -f .e2e-status; \
	 if [ $$rc -ne 0 ] || [ "$$erc" -ne 0 ]; then echo "== make test FAILED (lint, unit and modules exit $$rc; end-to-end exit $$erc)"; exit 1; fi
	@echo "== make test: all phases passed"

## test-serial: make test with the tool builds one at a time too (each phase's time is its own:
## slower, for comparing a phase's time between runs)
test-serial:
	@rm -f $(PHASE_TIMES); start=$$(date +%s); \
	 $(MAKE) --no-print-directory fmt-check prepare PREPARE_JOBS=1 tidy-check e2e-bin lint unit modules-test e2e E2E_TEST_BIN=$(CURDIR)/bin/e2e.test DEVSERVER_LINT_FLAGS="$(DEVSERVER_LINT_QUICK)"; rc=$$?; \
	 $(MAKE) --no-print-directory phase-summary TOTAL=$$(( $$(date +%s) - start )) RC=$$rc; \
	 exit $$rc

phase-summary:
	@echo "== phase wall times (in make test-parallel the end-to-end phase runs beside lint, unit and the modules; load average now $$(cut -d' ' -f1-3 /proc/loadavg), $$(nproc) cores):"
	@cat $(PHASE_TIMES) 2>/dev/null || true
	@printf '%6ss  %s\n' "$(TOTAL)" "total (exit $(RC))"

# prepare: the module downloads, the linters and the dev server program,
# PREPARE_JOBS at once (warm, a few seconds; cold, a third of a run: the
# Temporal server and golangci-lint are the largest builds).
PREPARE_JOBS ?= 4
prepare:
	$(call phase,modules + linters + dev server ($(PREPARE_JOBS) at once),$(MAKE) --no-print-directory -j$(PREPARE_JOBS) modules bin/golangci-lint bin/workflowcheck $(DEVSERVER))

# modules downloads every module the four modules need (network, not CPU:
# it runs beside the tool builds).
modules:
	@$(GO) mod download && (cd examples && $(GO) mod download) && (cd $(VALIDATE_DIR) && $(GO) mod download) && cd $(DEVSERVER_DIR) && $(GO) mod download

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# deploy/validate is a module of its own (Kubernetes, Helm and compose-go
# stay out of fastagent's go.mod): it renders every `fastagent deploy`
# target and validates it with its platform's own libraries.
VALIDATE_DIR = deploy/validate

# vet: go vet over the modules lint does not cover (examples/ and
# deploy/validate). The fastagent module and cmd/fastagent-devserver are
# vetted by lint: golangci-lint's govet runs go vet's own analyzers (its
# default set is cmd/vet's). `make test` does not run this target: the
# other modules' tests run with every analyzer instead (modules-test), one
# pass where a separate go vet would analyse every dependency a second time.
vet:
	$(call phase,vet (examples and deploy/validate; lint vets the rest),(cd examples && $(GO) vet ./...) && cd $(VALIDATE_DIR) && $(GO) vet ./...)

# modules-test: the examples (their own module: a user's program importing
# only the public packages, run against the dev server program) and
# deploy/validate (every `fastagent deploy` target rendered and validated
# with Kubernetes', Helm's and compose's own libraries; most of its time is
# compiling them), with every go vet analyzer (-vet=all), so their tests are
# their vet too; then the dev server program's own tests (its child
# protocol, the Web UI's gate), without vet: lint vets that module, and go
# test's vet would analyse the whole Temporal server for its facts.
modules-test: $(DEVSERVER)
	$(call phase,examples and deploy/validate modules (tests with every go vet analyzer); the dev server program's tests,(cd examples && $(GO) test $(TEST_LDFLAGS) -vet=all -count=1 ./...) && (cd $(VALIDATE_DIR) && $(GO) test $(TEST_LDFLAGS) -vet=all -count=1 ./...) && cd $(DEVSERVER_DIR) && $(GO) test $(TEST_LDFLAGS) -vet=off -count=1 ./...)

# Linters are pinned, built once per machine into the Go path (shared by
# every clone, so a fresh clone does not rebuild them) and linked into bin/.
GOLANGCI_VERSION     ?= v2.15.0
WORKFLOWCHECK_VERSION ?= v0.6.0
TOOLS_DIR ?= $(shell $(GO) env GOPATH)/pkg/fastagent-tools
bin/golangci-lint:
	@mkdir -p bin $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_VERSION)
	@test -x $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint || \
		GOBIN=$(TOOLS_DIR)/golangci-lint-$(GOLANGCI_VERSION) $(GO) install -ldflags="-s -w" github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	ln -sf $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint bin/golangci-lint
bin/workflowcheck:
	@mkdir -p bin $(TOOLS_DIR)/workflowcheck-$(WORKFLOWCHECK_VERSION)
	@test -x $(TOOLS_DIR)/workflowcheck-$(WORKFLOWCHECK_VERSION)/workflowcheck || \
		GOBIN=$(TOOLS_DIR)/workflowcheck-$(WORKFLOWCHECK_VERSION) $(GO) install -ldflags="-s -w" go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)
	ln -sf $(TOOLS_DIR)/workflowcheck-$(WORKFLOWCHECK_VERSION)/workflowcheck bin/workflowcheck

# tctl, the Temporal CLI's 1.x predecessor, for the end-to-end test that
# drives `fastagent dev` with it (TestTctlDrivesDev): built once per machine
# into the Go path by internal/e2e/tctl.sh (TCTL_VERSION, default v1.18.0;
# cold it downloads about 1.4 GB of modules and compiles for about 160
# CPU-seconds) and linked into bin/ (the e2e phase builds it if needed).
bin/tctl:
	@mkdir -p bin
	ln -sf $$(./internal/e2e/tctl.sh) bin/tctl

## lint: golangci-lint (.golangci.yml, go vet's analyzers among its linters) and Temporal's
## workflowcheck over workflows/
lint: bin/golangci-lint bin/workflowcheck
	$(call phase,lint (golangci-lint with the go vet analyzers; workflowcheck),bin/golangci-lint run ./... && bin/workflowcheck ./workflows/... && cd $(DEVSERVER_DIR) && $(CURDIR)/bin/golangci-lint run --config $(CURDIR)/.golangci.yml $(DEVSERVER_LINT_FLAGS) ./...)

# DEVSERVER_LINT_FLAGS: `make test` lints the dev server program (a small
# module that links the Temporal server) without the linters that analyse
# every dependency for their facts (govet, staticcheck, unused, gosec,
# contextcheck, nilerr, bodyclose): from empty caches they cost about 220
# CPU-seconds there, the other linters 15. `make lint` runs them all.
DEVSERVER_LINT_FLAGS ?=
DEVSERVER_LINT_QUICK = --disable govet,staticcheck,unused,gosec,contextcheck,nilerr,bodyclose

# go.mod and go.sum say exactly what the code imports.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit"; exit 1; }
	@cd examples && $(GO) mod tidy -diff || { echo "examples/go.mod is not tidy: run (cd examples && go mod tidy) and commit"; exit 1; }
	@cd $(DEVSERVER_DIR) && $(GO) mod tidy -diff || { echo "$(DEVSERVER_DIR)/go.mod is not tidy: run (cd $(DEVSERVER_DIR) && go mod tidy) and commit"; exit 1; }
	@cd $(VALIDATE_DIR) && $(GO) mod tidy -diff || { echo "$(VALIDATE_DIR)/go.mod is not tidy: run (cd $(VALIDATE_DIR) && go mod tidy) and commit"; exit 1; }

# Unit tests run with -race: no package of this module links the Temporal
# server any more. Those that need a Temporal (the package examples of
# fastagent.Start, internal/devserver) start the dev server program. They
# and the end-to-end test binary build without go test's vet (-vet=off):
# lint's govet runs every analyzer of that subset over the same packages,
# and go test's would analyse every dependency a second time for its facts.
unit: $(DEVSERVER)
	$(call phase,unit (-race),$(GO) test -race $(TEST_LDFLAGS) -vet=off -count=1 -timeout 15m $(PKGS_FAST))

# The end-to-end tests mostly wait, so they run as E2E_SHARDS processes at
# once (internal/e2e/shards.sh), each with its own dev server child. They
# run without -race: it doubles their CPU time on 2 cores (see README,
# Tests) for no finding the -race unit phase does not make.
E2E_SHARDS ?= 3
# e2e-bin builds the end-to-end test binary (shards.sh runs it when
# E2E_TEST_BIN names it, else builds its own): `make test` builds it before
# lint, which then finds the module's dependencies compiled.
e2e-bin:
	@mkdir -p bin
	$(call phase,end-to-end test binary,$(GO) test -c $(TEST_LDFLAGS) -vet=off -o bin/e2e.test ./internal/e2e)
export E2E_TEST_BIN
# tctl, built once per machine (bin/tctl), is needed only by
# TestTctlDrivesDev: when it is not built yet, the phase builds it in the
# background while the shards start, and the test waits for that build
# (internal/e2e/tctl.sh takes a lock) instead of the whole phase waiting.
e2e: $(DEVSERVER) chromium
	$(call phase,end-to-end tests ($(E2E_SHARDS) shards),\
	  tctl=; if [ -x bin/tctl ]; then tctl=$(CURDIR)/bin/tctl; else \
	    ( p=$$(./internal/e2e/tctl.sh) && ln -sf "$$p" bin/tctl ) & fi; \
	  FASTAGENT_TCTL=$$tctl ./internal/e2e/shards.sh $(E2E_SHARDS); rc=$$?; wait; [ $$rc -eq 0 ])

chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || \
	 if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	   echo "== installing chromium (apt-get) for the web chat's browser test"; \
	   export DEBIAN_FRONTEND=noninteractive; \
	   apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }; \
	 else echo "== no chromium on PATH: TestWebChatInBrowser skips (fails with CI set); install it: apt-get install -y chromium"; fi

## record-histories: record the workflow histories replayed by workflows/replay_test.go that are
## not recorded yet (HISTORIES=name|name… picks scenarios; the recorded ones are kept: running
## sessions have them); FASTAGENT_RECORD_HISTORIES=all rewrites them all (a release's new baseline)
HISTORIES ?=
FASTAGENT_RECORD_HISTORIES ?= 1
record-histories: $(DEVSERVER)
	FASTAGENT_RECORD_HISTORIES=$(FASTAGENT_RECORD_HISTORIES) $(GO) test -count=1 -run 'TestHistories$(if $(HISTORIES),/^($(HISTORIES))$$)' ./internal/e2e/

## docs: regenerate docs/cli.md from the commands' own help (TestCLIReference fails when it is stale)
docs:
	$(GO) test -count=1 -run '^TestCLIReference$$' ./cmd/fastagent -args -update-docs

## build: fastagent (the production binary: no Temporal server in it) and the dev server program beside it
build: $(DEVSERVER)
	$(GO) build -o $(BIN) ./cmd/fastagent

clean:
	rm -rf bin

# --- benchmark and fault suite (cmd/fastagent-lab) -------------------------
# Long runs, not part of `make test`: the fast, deterministic parts of the
# fault suite run in CI through internal/e2e. Shrink the sizes with ARGS,
# e.g. make bench ARGS="-n 30 -sessions 10 -turns 3 -idle 200 -history 60".

.PHONY: bench chaos fuzz load

FUZZTIME ?= 60s

## bench: one table of latency, throughput, history and memory figures, measured side by side;
## also written to bench-out/bench.json with a chart of the latency distributions, bench-out/bench.svg
bench: $(DEVSERVER)
	$(GO) run ./cmd/fastagent-lab bench $(ARGS)

## load: the load curve — open-loop Poisson turns at each offered rate on a realistic scripted model;
## a table per offered load, bench-out/load.json and bench-out/load.svg. Shrink or change it with ARGS,
## e.g. make load ARGS="-rates 5,10 -duration 20s -pool 1000" or ARGS="-shape prod"
load: $(DEVSERVER)
	$(GO) run ./cmd/fastagent-lab load $(ARGS)

## chaos: worker and dev-server SIGKILLs (one while a sub-agent runs), model faults, a panicking tool, a worker killed under load (ARGS="-only delegation" runs one section)
chaos: $(DEVSERVER)
	$(GO) run ./cmd/fastagent-lab chaos $(ARGS)

## fuzz: every fuzz target in the repository, $(FUZZTIME) each
fuzz:
	@fail=0; \
	for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
	  pkg=$$(dirname $$f); \
	  for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== $$fn ($$pkg, $(FUZZTIME))"; \
	    $(GO) test -run='^$$' -fuzz="^$$fn$$" -fuzztime=$(FUZZTIME) $$pkg || fail=1; \
	  done; \
	done; \
	exit $$fail
