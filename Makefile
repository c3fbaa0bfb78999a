# Cluster Gateway. `make demo` brings up a local hub with managed clusters and
# the gateway; `make test` runs all tests. Only Go is needed.
SHELL := /bin/bash
.DEFAULT_GOAL := build

OUTPUT   := $(CURDIR)/_output
BIN      := $(OUTPUT)/bin
GO       ?= go
K8S_VERSION := v1.37.2
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version.buildDate=2026-11-01T00:00:00Z

# The version stamped into cluster-gateway and kubectl-cgw (pkg/version):
# `git describe` of the checkout, the commit, and the commit's date (so a
# rebuild of one commit is the same binary).
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-unknown)
GIT_COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE  ?= $(shell git log -1 --format=%cI 2>/dev/null)
VERSION_PKG := github.com/clustergateway/cluster-gateway/pkg/version
VERSION_LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).GitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)

.PHONY: build
build: ## Build the gateway and kubectl-cgw into _output/bin (stamped with VERSION), and the examples.
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/cluster-gateway ./cmd/apiserver
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/kubectl-cgw ./cmd/kubectl-cgw
	$(GO) build -o $(BIN)/examples/ ./examples/...

# The gateway's container image from the Dockerfile, stamped like `make build`.
# Needs docker (or CONTAINER_ENGINE=podman); CI has no container engine and
# does not run it. IMAGE and VERSION choose the tag: $(IMAGE):$(VERSION).
IMAGE            ?= ghcr.io/clustergateway/cluster-gateway
CONTAINER_ENGINE ?= docker

# What a release ships, built and checked here and published by nobody:
# cluster-gateway for linux, kubectl-cgw for linux and darwin, on amd64 and
# arm64, as reproducible .tar.gz archives with LICENSE, with sha256sums.txt
# and the krew manifest cgw.yaml (hack/krew) whose sha256 are the archives'.
# VERSION must be a semantic version (a tag); an untagged checkout is
# released as v0.0.0-dev.g<commit>. RELEASE_FLAGS passes more flags to
# hack/release (e.g. -platforms linux/amd64, -url for the archives' base URL).
RELEASE_DIR := $(OUTPUT)/release

.PHONY: release
release: ## Build the release archives, sha256sums.txt and the krew manifest into _output/release (nothing is published).
	cd hack && $(GO) run ./release -go $(GO) -version $(VERSION) -commit $(GIT_COMMIT) -date $(BUILD_DATE) \
		-out $(RELEASE_DIR) $(RELEASE_FLAGS)

.PHONY: image
image: ## Build the container image $(IMAGE):$(VERSION) (needs docker or podman; not run in CI).
	$(CONTAINER_ENGINE) build --build-arg VERSION=$(VERSION) --build-arg GIT_COMMIT=$(GIT_COMMIT) \
		--build-arg BUILD_DATE=$(BUILD_DATE) -t $(IMAGE):$(VERSION) .

# Upstream binaries for the local environment and end-to-end tests, built from
# the pinned modules in hack/tools and hack/konnectivity. Each is built once.
TOOLS := $(BIN)/kube-apiserver $(BIN)/kubectl $(BIN)/etcd $(BIN)/proxy-server $(BIN)/proxy-agent

.PHONY: tools
tools: $(TOOLS)

$(BIN)/kube-apiserver: hack/tools/go.mod
	cd hack/tools && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $@ ./cmd/kube-apiserver
$(BIN)/kubectl: hack/tools/go.mod
	cd hack/tools && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl
$(BIN)/etcd: hack/tools/go.mod
	cd hack/tools && $(GO) build -o $@ go.etcd.io/etcd/server/v3
$(BIN)/proxy-server: hack/konnectivity/go.mod
	cd hack/konnectivity && $(GO) build -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/server
$(BIN)/proxy-agent: hack/konnectivity/go.mod
	cd hack/konnectivity && $(GO) build -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/agent

# helm, from its own module in hack/helm (its dependencies stay out of the
# others), for `make verify` and the chart tests. The -X flags give it its
# version and the Kubernetes version it renders and lints for.
HELM_VERSION := v3.22.0
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37
tools: $(BIN)/helm
$(BIN)/helm: hack/helm/go.mod
	cd hack/helm && $(GO) build -ldflags "$(HELM_LDFLAGS)" -o $@ helm.sh/helm/v3/cmd/helm

.PHONY: helm
helm: $(BIN)/helm ## Build helm into _output/bin.

CODEGEN := $(BIN)/deepcopy-gen $(BIN)/openapi-gen $(BIN)/client-gen $(BIN)/lister-gen $(BIN)/informer-gen
$(BIN)/openapi-gen: hack/tools/go.mod
	cd hack/tools && $(GO) build -o $@ k8s.io/kube-openapi/cmd/openapi-gen
$(BIN)/%-gen: hack/tools/go.mod
	cd hack/tools && $(GO) build -o $@ k8s.io/code-generator/cmd/$*-gen

.PHONY: generate
generate: $(CODEGEN) ## Regenerate deepcopy, openapi, clientset, listers and informers.
	BIN=$(BIN) hack/update-codegen.sh

.PHONY: verify-generated
verify-generated: generate ## Fail if the generated code is not what `make generate` writes.
	@git diff --exit-code --stat -- pkg/apis pkg/generated || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- pkg/apis pkg/generated)" || { git status --porcelain -- pkg/apis pkg/generated; echo "make generate left new files: commit them"; exit 1; }

.PHONY: test
test: test-unit test-fuzz test-e2e ## All tests: unit (with -race), a short fuzz run, and end-to-end against real components.

# Three Go modules: the product (.), the local environment and benchmarks
# (hack/), the end-to-end and chart tests (test/); test-only dependencies
# stay out of the product's module graph. hack/tools, hack/konnectivity and
# hack/helm pin the upstream tools.
MODULES := . hack test

# hack/localenv's own tests start the environment, gateway included, and
# pkg/pool/konnectivity's start a proxy-server and agent: they need `tools`
# and `build`, and fail (never skip) without them.
.PHONY: test-unit
test-unit: tools build ## Unit tests, with the race detector.
	KUBE_BIN=$(BIN) KONNECTIVITY_BIN=$(BIN) $(GO) test -race -count=1 ./...
	cd hack && KUBE_BIN=$(BIN) $(GO) test -race -count=1 ./...
	cd test && KUBE_BIN=$(BIN) $(GO) test -race -count=1 ./chart/...

# Each fuzz target runs FUZZTIME inputs on top of its committed seeds
# (testdata/fuzz); a longer run is `make test-fuzz FUZZTIME=10m`. A count,
# not a duration: at a duration's end Go's fuzzing coordinator can fail a
# target with a bare "context deadline exceeded" and no failing input
# (golang/go#51484; CI hit it on FuzzInnerPath under load). A count has no
# deadline to race; 1000 inputs took 5-22s a target here, build included.
FUZZTIME ?= 1000x
FUZZ_TARGETS := ./pkg/proxy:FuzzHeaderHygiene ./pkg/proxy:FuzzInnerPath ./pkg/gateways:FuzzFromSecret ./pkg/gateways:FuzzKubeconfig ./pkg/boundedyaml:FuzzToJSON ./pkg/fanout:FuzzPageWalkMeansWhatTheDecoderMeant ./pkg/fanout:FuzzTableEventWalkMeansWhatTheDecoderMeant

.PHONY: test-fuzz
test-fuzz: ## Run every fuzz target for FUZZTIME (inputs, or a duration).
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; done

# The end-to-end tests run a gateway built with the race detector (a race
# report in its log fails the suite), and their in-process parts (the churn
# test's request path, forward proxies, fake kubelets) run under it too.
.PHONY: test-e2e
test-e2e: tools build ## End-to-end tests: a real hub, managed clusters, konnectivity and the gateway.
	$(GO) build -race -o $(BIN)/cluster-gateway-race ./cmd/apiserver
	cd test && KUBE_BIN=$(BIN) GATEWAY_BIN=$(BIN)/cluster-gateway-race $(GO) test -race -count=1 -timeout 45m ./e2e/...

.PHONY: verify
verify: ## gofmt, go vet, and tidy go.mod files.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run gofmt -w on the files above"; exit 1; }
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@for m in $(MODULES) hack/tools hack/konnectivity hack/helm hack/helm-docs; do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "go.mod in $$m is not tidy: run go mod tidy there"; exit 1; }; done

# The Helm chart lints and renders in each serving-certificate mode (test/chart
# checks what it renders); hack/helm's go.mod is tidy.
CHART := charts/cluster-gateway
.PHONY: verify-chart
verify-chart: $(BIN)/helm ## helm lint and helm template of charts/cluster-gateway.
	$(BIN)/helm lint --strict $(CHART)
	$(BIN)/helm lint --strict $(CHART) --set tls.mode=certManager
	$(BIN)/helm lint --strict $(CHART) --set tls.mode=existingSecret --set tls.caBundle=Q0E=
	$(BIN)/helm lint --strict $(CHART) --set 'credentialSourceNamespaces={capi-clusters,ocm}'
	$(BIN)/helm lint --strict $(CHART) --set serviceMonitor.enabled=true --set prometheusRule.enabled=true \
		--set networkPolicy.enabled=true --set 'networkPolicy.apiServerCIDRs={10.0.0.0/8}'
	$(BIN)/helm template cluster-gateway $(CHART) --namespace cluster-gateway-system >/dev/null
	$(BIN)/helm template cluster-gateway $(CHART) --namespace cluster-gateway-system --set tls.mode=certManager >/dev/null
	$(BIN)/helm template cluster-gateway $(CHART) --namespace cluster-gateway-system --set tls.mode=existingSecret --set tls.caBundle=Q0E= >/dev/null

verify: verify-chart

# Documentation generated from the code: docs/flags.md from the flag sets,
# the alerts table of docs/metrics.md from the chart's alert rules
# (hack/docgen), and the chart's values table from the `# --` comments of
# values.yaml (helm-docs, from its own module in hack/helm-docs).
$(BIN)/helm-docs: hack/helm-docs/go.mod
	cd hack/helm-docs && $(GO) build -o $@ github.com/norwoodj/helm-docs/cmd/helm-docs

GENERATED_DOCS := docs/flags.md docs/metrics.md $(CHART)/README.md

.PHONY: docs
docs: $(BIN)/helm-docs ## Regenerate docs/flags.md, the alerts of docs/metrics.md and the chart's values table.
	cd hack && $(GO) run ./docgen -flags ../docs/flags.md -alerts ../$(CHART)/files/alerts.yaml -metrics ../docs/metrics.md
	$(BIN)/helm-docs --chart-search-root charts --template-files README.md.gotmpl --sort-values-order file \
		--skip-version-footer --log-level warning

.PHONY: verify-docs
verify-docs: docs ## Fail if the generated docs are not what `make docs` writes, or a chart value is undocumented.
	@! grep -n '|  |$$' $(CHART)/README.md || { echo "the chart values above have no description: add a '# -- ' comment above each in $(CHART)/values.yaml"; exit 1; }
	@git diff --exit-code --stat -- $(GENERATED_DOCS) || { echo "generated docs are stale: run make docs and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED_DOCS))" || { git status --porcelain -- $(GENERATED_DOCS); echo "make docs left new files: commit them"; exit 1; }

verify: verify-docs

# The local environment of hack/localenv: etcd, a hub and two managed
# kube-apiservers with fake kubelets, and the gateway, all on 127.0.0.0/8.
LOCAL_STATE := $(OUTPUT)/local
LOCAL_PID   := $(LOCAL_STATE)/local-env.pid

.PHONY: demo
demo: tools build ## Bring the local environment up in the foreground; Ctrl-C stops it.
	cd hack && $(GO) build -o $(BIN)/local-env ./local-env
	$(BIN)/local-env -state-dir $(LOCAL_STATE) -bin $(BIN) $(ARGS)

.PHONY: local-up
local-up: tools build ## Bring the local environment up in the background (`make local-down` stops it).
	@if [ -f $(LOCAL_PID) ] && kill -0 $$(cat $(LOCAL_PID)) 2>/dev/null; then \
		echo "local environment already running (pid $$(cat $(LOCAL_PID))); run 'make local-down' first"; exit 1; fi
	cd hack && $(GO) build -o $(BIN)/local-env ./local-env
	@mkdir -p $(LOCAL_STATE) && rm -f $(LOCAL_STATE)/ready
	@nohup $(BIN)/local-env -state-dir $(LOCAL_STATE) -bin $(BIN) $(ARGS) >$(LOCAL_STATE)/local-env.log 2>&1 </dev/null & echo $$! >$(LOCAL_PID)
	@pid=$$(cat $(LOCAL_PID)); for i in $$(seq 1 300); do \
		if [ -f $(LOCAL_STATE)/ready ]; then sed -n '/^Local environment is up/,$$p' $(LOCAL_STATE)/local-env.log; exit 0; fi; \
		if ! kill -0 $$pid 2>/dev/null; then echo "local-env exited; its log:"; cat $(LOCAL_STATE)/local-env.log; rm -f $(LOCAL_PID); exit 1; fi; \
		sleep 1; done; echo "not ready after 300s; see $(LOCAL_STATE)/local-env.log; 'make local-down' stops it"; exit 1

.PHONY: local-down
local-down: ## Stop the background local environment and wait for it to exit.
	@if [ ! -f $(LOCAL_PID) ]; then echo "no $(LOCAL_PID): nothing to stop"; exit 0; fi; \
	pid=$$(cat $(LOCAL_PID)); kill -TERM $$pid 2>/dev/null; \
	for i in $$(seq 1 60); do kill -0 $$pid 2>/dev/null || { rm -f $(LOCAL_PID); echo "stopped (pid $$pid)"; exit 0; }; sleep 1; done; \
	echo "pid $$pid still running after 60s; see $(LOCAL_STATE)/local-env.log"; exit 1

# Benchmarks of the proxied request path: the in-process Go benchmarks of
# pkg/proxy, then loads side by side, memory per pooled cluster, a slow
# saturated cluster next to a steady one (isolation), port-forward, exec and
# logs -f throughput (streams) and 10,000 idle watches (watches) in a fresh
# local environment under _output/bench. Writes and prints docs/performance.md.
# BENCH_FLAGS passes more flags to hack/bench (e.g. -duration 20s, -watches
# 2000); with BENCH_FLAGS="-only loads" (or ab, isolation, streams, watches,
# or scan) only that section runs, and its report goes to
# _output/bench/performance-<section>.md, not docs/.
.PHONY: bench
bench: tools build ## Benchmark the proxy path (about 25 minutes: in-process, loads, isolation, streams, 10,000 idle watches, a 10,000-gateway scan); writes docs/performance.md.
	cd hack && $(GO) build -o $(BIN)/bench ./bench
	$(BIN)/bench -go $(GO) -bin $(patsubst $(CURDIR)/%,%,$(BIN)) -state-dir $(patsubst $(CURDIR)/%,%,$(OUTPUT))/bench -out docs/performance.md $(BENCH_FLAGS)

# A soak for a person to run before a release (not part of `make test`):
# TestChurn alone for SOAK_DURATION, logging goroutines, fds, heap, pool
# entries and tunnels every SOAK_REPORT_EVERY cycles, and failing if they are
# not back at the baseline at the end. SOAK_TIMEOUT bounds the whole run
# (raise it with SOAK_DURATION); SOAK_FLAGS passes more test flags, e.g.
# -churn.profiles=/tmp/soak for heap profiles at the baseline and the end.
# Then TestSecretSourceRotation for SOAK_ROTATION: a kubeconfig Secret rotated
# every second (token, client certificate, CA) under a watch, logs -f,
# port-forward and ordinary requests, then the same baseline checks; then
# TestCredentialProviderShortLivedTokens for SOAK_ROTATION with one-minute
# tokens. `make test` runs the three short (flags' defaults).
SOAK_DURATION     ?= 10m
SOAK_ROTATION     ?= 30m
SOAK_REPORT_EVERY ?= 10
SOAK_TIMEOUT      ?= 3h

.PHONY: soak
soak: tools build ## Churn the proxy path for SOAK_DURATION (default 10m), rotate a credential Secret, then a provider's one-minute tokens, for SOAK_ROTATION (30m) each, and check that nothing leaked.
	cd test && KUBE_BIN=$(BIN) $(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestChurn$$' -v ./e2e/ \
		-churn.cycles=0 -churn.duration=$(SOAK_DURATION) -churn.report-every=$(SOAK_REPORT_EVERY) $(SOAK_FLAGS)
	cd test && KUBE_BIN=$(BIN) $(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSecretSourceRotation$$' -v ./e2e/ \
		-source-rotation.duration=$(SOAK_ROTATION) $(SOAK_FLAGS)
	cd test && KUBE_BIN=$(BIN) $(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestCredentialProviderShortLivedTokens$$' -v ./e2e/ \
		-provider-tokens.duration=$(SOAK_ROTATION) -provider-tokens.ttl=1m $(SOAK_FLAGS)
