# Manta: Ray on Kubernetes. `make run` starts the dev cluster with everything in it; `make test` runs every test,
# `make test-unit` the unit tests alone.
SHELL := /usr/bin/env bash
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
export GOFLAGS := -buildvcs=false
export KUBEBUILDER_ASSETS := $(BIN)
export PATH := $(BIN):$(PATH)

CONTROLLER_GEN := $(BIN)/controller-gen
# -p 3: three test binaries at once on 2 cores. With two, the cores were idle 23 % of `make test` (sampled every
# 10 s): most packages spend their time waiting on a control plane, kwok or Ray, not computing.
GO_TEST_FLAGS ?= -timeout 75m -count=1 -p 3

.PHONY: all
all: build

.PHONY: node-packages
node-packages: ## Install with apt-get the Debian packages the real node and the image builds need (no-op when installed).
	@hack/node-packages.sh

.PHONY: tools
tools: node-packages ## Build the control plane, the real node (kubelet, kube-proxy, containerd, runc, CNI plugins, CoreDNS; installs the Debian packages it needs), generators, helm, staticcheck and the KubeRay oracle into bin/ (no-op when up to date).
	@hack/tools.sh
	@hack/build-kuberay.sh

.PHONY: ray
ray: ## Create bin/ray-venv with the pinned Ray (no-op when up to date).
	@hack/ray-venv.sh

.PHONY: images
images: node-packages ## Build the dev cluster's real-node images (pause, Ray, Redis) into bin/images (no-op when up to date).
	@go run ./hack/images $(BIN)

.PHONY: image
image: ## Build Manta's image (the Dockerfile's, without Docker) as an OCI layout in bin/images/manta; the dev cluster pushes it to its registry.
	@go run ./hack/images -manta $(BIN)

.PHONY: generate
generate: tools ## Generate deepcopy, CRDs and RBAC from markers, and the oracle's differences table in docs/compatibility.md.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd:maxDescLen=0,generateEmbeddedObjectMeta=true paths=./api/... output:crd:artifacts:config=config/crd
	@# One least-privilege role per binary, from its own markers; the proxy subresources are roles of their own,
	@# bound only when --use-kubernetes-proxy is on (internal/rbac/*proxy).
	$(CONTROLLER_GEN) rbac:roleName=manta-operator paths=./internal/controller/... paths=./internal/operator/... output:rbac:artifacts:config=config/rbac/operator
	$(CONTROLLER_GEN) rbac:roleName=manta-operator-proxy paths=./internal/rbac/operatorproxy/... output:rbac:artifacts:config=config/rbac/operator-proxy
	$(CONTROLLER_GEN) rbac:roleName=manta-apiserver paths=./internal/apiserver/... output:rbac:artifacts:config=config/rbac/apiserver
	$(CONTROLLER_GEN) rbac:roleName=manta-apiserver-proxy paths=./internal/rbac/apiserverproxy/... output:rbac:artifacts:config=config/rbac/apiserver-proxy
	@# The chart carries copies of the generated CRDs and roles, so it cannot drift from the markers.
	rm -f charts/manta/crds/*.yaml && cp config/crd/*_*.yaml charts/manta/crds/
	cp config/rbac/operator/role.yaml charts/manta/files/operator-role.yaml
	cp config/rbac/apiserver/role.yaml charts/manta/files/apiserver-role.yaml
	cp config/rbac/operator-proxy/role.yaml charts/manta/files/operator-proxy-role.yaml
	cp config/rbac/apiserver-proxy/role.yaml charts/manta/files/apiserver-proxy-role.yaml
	@# docs/compatibility.md lists every row of the oracle's differences file.
	go run ./hack/compatdoc test/oracle/differences.yaml docs/compatibility.md

.PHONY: verify
verify: generate ## Fail when generated files drift from the markers.
	@git diff --exit-code -- api config charts docs/compatibility.md || { echo "generated files are out of date: run make generate and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { git status --porcelain -- api config; echo "untracked generated files: run make generate and commit" >&2; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting" >&2; exit 1; }
	@go mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy" >&2; exit 1; }
	go vet ./...

.PHONY: lint
lint: tools ## Run staticcheck (configuration: staticcheck.conf).
	$(BIN)/staticcheck ./...

.PHONY: build
build: ## Build bin/manta (stamped with the git commit).
	go build -ldflags "-X github.com/manta-dev/manta/internal/version.Commit=$$(git rev-parse HEAD 2>/dev/null)" -o $(BIN)/manta ./cmd/manta

# What `make test` needs, built side by side: compiling the tools keeps both cores busy, while the Ray venv and the
# images spend much of their time in pip, dpkg and disk writes; one after the other they cost a cold run minutes.
.PHONY: deps
deps: ## Build everything make test needs (tools, the Ray venv, the images), the three side by side.
	@$(MAKE) --no-print-directory -j3 tools ray images

.PHONY: test
test: deps ## Run every test: unit, envtest, Ray conformance, end-to-end on the dev cluster.
	# test/real, the longest package, is named first so that it starts first and the others run beside it.
	# The output is kept in test-artifacts/make-test.log; when a test fails, its message is repeated at the end
	# (hack/failsummary), where a CI log's reader finds it.
	@mkdir -p test-artifacts
	go test $(GO_TEST_FLAGS) ./test/real/ ./... 2>&1 | tee test-artifacts/make-test.log; \
		rc=$${PIPESTATUS[0]}; [ $$rc -eq 0 ] || go run ./hack/failsummary test-artifacts/make-test.log; exit $$rc

# STRESS_ROUNDS runs of `make test`'s command in a row, each beside STRESS_HOGS busy threads; every failed test is
# written down with its output in stress-results/summary.md (hack/stress). A test that fails here needs an idle machine.
STRESS_ROUNDS ?= 3
STRESS_HOGS ?= 1

.PHONY: test-stress
test-stress: deps ## Run every test STRESS_ROUNDS times in a row beside STRESS_HOGS CPU hogs; failures in stress-results/summary.md.
	go run ./hack/stress -rounds $(STRESS_ROUNDS) -hogs $(STRESS_HOGS) -out $(CURDIR)/stress-results -- $(GO_TEST_FLAGS) ./test/real/ ./...

# The unit tests are every package but the envtest and integration ones: a test that starts a control plane lives in
# its package's <pkg>/envtest, one that starts a dev cluster or another process in <pkg>/integration, and test/ holds
# the suites of whole systems. hack's TestUnitPackagesStartNothing holds the unit packages' tests to that (their
# imports and calls); MANTA_UNIT_TESTS makes testutil.StartEnvtest fail a test that reached it anyway. Nothing to
# build first.
GO_UNIT_TEST_FLAGS ?= -timeout 10m -count=1
UNIT_PACKAGES = $(shell go list ./... | grep -Ev '/(envtest|integration)$$|^github.com/manta-dev/manta/test/')

.PHONY: test-unit
test-unit: ## Run the unit tests, in seconds with no control plane: every package but <pkg>/envtest, <pkg>/integration and test/.
	MANTA_UNIT_TESTS=1 go test $(GO_UNIT_TEST_FLAGS) $(UNIT_PACKAGES)

.PHONY: oracle
oracle: tools ## Compare Manta's RayCluster controller with KubeRay's operator on every sample (test/oracle).
	go test $(GO_TEST_FLAGS) -run TestOracle ./test/oracle/

.PHONY: run
run: tools build images ## Start `manta dev`: the local simulated cluster with Manta running.
	$(BIN)/manta dev

# BENCH_SIZES: RayClusters per trial; BENCH_CONTENDERS: see test/bench/README.md. For a before/after in one run,
# BENCH_CONTENDERS=manta,manta-base MANTA_BENCH_BASE=<git revision> (manta-base is Manta built from that revision).
BENCH_SIZES ?= 100,500,1000
BENCH_CONTENDERS ?= raw,raw-parallel,manta,kuberay,kuberay-c8
BENCH_ROUNDS ?= 1
# BENCH_IDLE: a duration (10m): after each operator trial, its CPU and requests over that idle window.
BENCH_IDLE ?=
BENCH_TIMEOUT ?= 120m

.PHONY: bench
bench: tools build ## Race Manta's and KubeRay's operators and the raw ceiling, one fresh dev cluster per trial; writes bench-results.json.
	MANTA_BENCH_SIZES=$(BENCH_SIZES) MANTA_BENCH_CONTENDERS=$(BENCH_CONTENDERS) MANTA_BENCH_ROUNDS=$(BENCH_ROUNDS) \
	MANTA_BENCH_IDLE=$(BENCH_IDLE) MANTA_BENCH_JSON=$(CURDIR)/bench-results.json \
	go test -timeout $(BENCH_TIMEOUT) -count=1 -run '^$$' -bench '^BenchmarkSideBySide$$' -benchtime 1x ./test/bench/

# The cost curve to 10,000 RayClusters (test/bench/README.md): CURVE_STEPS, CURVE_CONTENDERS; writes bench-curve/.
CURVE_STEPS ?= 1000,2500,5000,10000
CURVE_CONTENDERS ?= manta,kuberay-c8

.PHONY: bench-curve
bench-curve: tools build ## Grow one dev cluster per operator to 10,000 RayClusters in steps; memory, CPU and time per step, plotted.
	MANTA_CURVE_STEPS=$(CURVE_STEPS) MANTA_CURVE_CONTENDERS=$(CURVE_CONTENDERS) MANTA_CURVE_OUT=$(CURDIR)/bench-curve \
	go test -timeout 300m -count=1 -run '^$$' -bench BenchmarkScaleCurve -benchtime 1x ./test/bench/

# RayJob throughput (test/bench/README.md): JOBS RayJobs per trial, JOB_CONTENDERS; writes bench-rayjobs.json.
JOBS ?= 200
JOB_CONTENDERS ?= manta,kuberay-c8
JOB_ROUNDS ?= 1

.PHONY: bench-rayjobs
bench-rayjobs: tools build ## Race the operators on RayJob throughput (HTTPMode, fake Ray heads at the pods' IPs); needs root.
	MANTA_BENCH_JOBS=$(JOBS) MANTA_BENCH_JOB_CONTENDERS=$(JOB_CONTENDERS) MANTA_BENCH_JOB_ROUNDS=$(JOB_ROUNDS) \
	MANTA_BENCH_JOBS_JSON=$(CURDIR)/bench-rayjobs.json \
	go test -timeout 120m -count=1 -run '^$$' -bench BenchmarkSideBySideRayJobs -benchtime 1x ./test/bench/

# The sample RayJob on the real node, from its create to SUCCEEDED (test/bench/README.md): REALJOB_ROUNDS rounds of
# REALJOB_CONTENDERS alternated, each on REALJOB_IMAGE (warm, cold); writes bench-realjob.json.
REALJOB_ROUNDS ?= 3
REALJOB_CONTENDERS ?= manta,manta-early,kuberay
REALJOB_IMAGE ?= warm,cold

.PHONY: bench-realjob
bench-realjob: tools build images ray ## Time config/samples/rayjob.yaml from create to SUCCEEDED on the real node under Manta and KubeRay, warm and cold image; writes bench-realjob.json.
	MANTA_REALJOB_ROUNDS=$(REALJOB_ROUNDS) MANTA_REALJOB_CONTENDERS=$(REALJOB_CONTENDERS) MANTA_REALJOB_IMAGE=$(REALJOB_IMAGE) \
	MANTA_REALJOB_JSON=$(CURDIR)/bench-realjob.json \
	go test -timeout 180m -count=1 -run '^$$' -bench '^BenchmarkRealJob$$' -benchtime 1x ./test/real/

# Idle suspension at scale (test/bench/README.md): IDLE_CLUSTERS RayClusters, IDLE_WINDOW; writes bench-idle.json.
IDLE_CLUSTERS ?= 500
IDLE_WINDOW ?= 5m

.PHONY: bench-idle
bench-idle: tools build ## What idle checks cost an idle fleet (manta.dev/idle-timeout on every cluster, fake Ray heads) and what suspending it costs; needs root.
	MANTA_BENCH_IDLE_CLUSTERS=$(IDLE_CLUSTERS) MANTA_BENCH_IDLE_WINDOW=$(IDLE_WINDOW) \
	MANTA_BENCH_IDLE_JSON=$(CURDIR)/bench-idle.json \
	go test -timeout 120m -count=1 -run '^$$' -bench '^BenchmarkSideBySideIdle$$' -benchtime 1x ./test/bench/

# The console at scale (test/bench/README.md): CONSOLE_CLUSTERS, CONSOLE_LOADS, CONSOLE_WINDOW; writes bench-console.json.
CONSOLE_CLUSTERS ?= 1000
CONSOLE_LOADS ?= 5
CONSOLE_WINDOW ?= 60s

.PHONY: bench-console
bench-console: tools build ## Time the console's list of 1,000 RayClusters in Chromium, and count what its open pages cost the API server.
	MANTA_BENCH_CONSOLE_CLUSTERS=$(CONSOLE_CLUSTERS) MANTA_BENCH_CONSOLE_LOADS=$(CONSOLE_LOADS) MANTA_BENCH_CONSOLE_WINDOW=$(CONSOLE_WINDOW) \
	MANTA_BENCH_CONSOLE_JSON=$(CURDIR)/bench-console.json \
	go test -timeout 60m -count=1 -run '^$$' -bench '^BenchmarkScaleConsole$$' -benchtime 1x ./test/bench/

.PHONY: bench-operator
bench-operator: tools build ## Run the in-process operator benchmarks (API calls, steady state, memory, large clusters, ImagePullJob).
	go test -timeout 60m -count=1 -run '^$$' -bench 'Benchmark[^S]' -benchtime 1x ./test/bench/...
