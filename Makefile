# okgoes-operator — the usual targets of an Operator SDK (go/v4-style) project.
# Tools are built into bin/ from pinned versions (hack/tools/*/go.mod); nothing is downloaded
# except Go modules.

# The release being developed, and the one it upgrades from (docs/upgrades.md).
VERSION ?= 0.5.0
PREVIOUS_VERSION ?= 0.4.0
FIRST_VERSION ?= 0.1.0
IMAGE_TAG_BASE ?= quay.io/okgoes/okgoes-operator
IMG ?= $(IMAGE_TAG_BASE):v$(VERSION)
BUNDLE_IMG ?= $(IMAGE_TAG_BASE)-bundle:v$(VERSION)
CHANNELS ?= stable
DEFAULT_CHANNEL ?= stable
# createdAt of the CSV, pinned per version so that bundle/ is reproducible.
BUNDLE_CREATED_AT ?= 2026-12-06T00:00:00Z
CONTAINER_TOOL ?= docker

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

LOCALBIN ?= $(CURDIR)/bin
K8S_ASSETS ?= $(LOCALBIN)/k8s
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
# KUBECTL: the kubectl of make install/uninstall/deploy/undeploy: the one on PATH, else the one
# the test control plane built (bin/k8s/kubectl, hack/envtest-assets.sh), which the e2e suite's
# `make deploy` uses on a CI machine without kubectl on PATH. Nothing is built for it: a user with
# a cluster needs only kubectl (and kustomize, built from the module proxy into bin/).
KUBECTL ?= $(or $(shell command -v kubectl 2>/dev/null),$(wildcard $(K8S_ASSETS)/kubectl),kubectl)
OPERATOR_SDK ?= $(LOCALBIN)/operator-sdk
PROMTOOL ?= $(LOCALBIN)/promtool
PROMETHEUS ?= $(LOCALBIN)/prometheus
export KUBEBUILDER_ASSETS = $(K8S_ASSETS)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC from the kubebuilder markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." paths="./" output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: dashboard
dashboard: ## Generate the Grafana dashboard config/grafana/okgoes-operator.json (hack/tools/dashboard, Grafana Foundation SDK).
	cd hack/tools/dashboard && $(GO_ENV) go run . -out ../../../config/grafana/okgoes-operator.json

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO_ENV) go vet ./...

.PHONY: verify-generated
verify-generated: controller-gen ## Fail when `make generate manifests dashboard` would change the generated files.
	hack/verify-generated.sh

.PHONY: verify-module-versions
verify-module-versions: ## Fail when hack/bundle, scorecard, hack/tools/gen, hack/tools/k8s or hack/tools/minio builds another version of a module than the operator does (compiled twice).
	hack/verify-module-versions.sh

.PHONY: verify-fmt
verify-fmt: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed:" $$out >&2; exit 1; }

# GO_TEST_FLAGS: `make vet` has run every analyzer already (go test's own vet is a subset), and
# a test binary needs no symbol table or DWARF: both save CPU on every run (about 20 s of linking
# on two cores; docs/testing.md).
#
# GO_ENV: one build configuration, no cgo and no build paths (-trimpath), for go vet, go test and
# go build of the operator: the configuration of the manager and mover images (make build,
# hack/images/build.sh), of the kopia CLI (hack/tools/kopia/build.sh), of the e2e suite, and of
# the release managers test/upgrade builds reproducibly, so each package of the operator's module
# graph is compiled once into the build cache, not once per configuration (docs/testing.md). The
# go commands the tests run inherit it (GOFLAGS). hack/bundle and scorecard, controller-gen and
# kustomize (hack/tools/gen), kube-apiserver, kubectl and MinIO (hack/tools/k8s, hack/tools/minio,
# hack/envtest-assets.sh) build the same way and hold the operator's versions of what they share
# with it (make verify-module-versions).
GO_ENV = CGO_ENABLED=0 GOFLAGS='-trimpath $(GOFLAGS)'
GO_TEST_FLAGS ?= -vet=off -ldflags=-s\ -w

.PHONY: test
test: verify-generated verify-fmt verify-module-versions vet k8s-assets promtool ## Run all tests against a real kube-apiserver + etcd and a real MinIO (built into bin/ on first use).
	$(GO_ENV) go test ./... -count=1 -coverprofile cover.out $(GO_TEST_FLAGS)
	cd hack/bundle && $(GO_ENV) go test ./... -count=1
	cd scorecard && $(GO_ENV) go test ./... -count=1
	cd hack/catalog && go test ./... -count=1

.PHONY: k8s-assets
k8s-assets: ## Build kube-apiserver, etcd, kubectl (bin/k8s), MinIO (bin/minio) and the kopia CLI (bin/kopia), only those missing.
	hack/envtest-assets.sh

.PHONY: bench-engines
bench-engines: ## Benchmark the mover against restic 0.18.1 (bin/restic-0.18.1, built from the Go module proxy when missing) and the kopia CLI (bin/kopia) on bin/minio; see docs/benchmarks.md. Quick run: BENCH_ENGINES_FLAGS='-scale 0.05 -rounds 1'.
	hack/tools/restic/build.sh $(LOCALBIN)/restic-0.18.1
	hack/tools/kopia/build.sh $(LOCALBIN)/kopia
	go run ./bench/engines -restic $(LOCALBIN)/restic-0.18.1 -kopia $(LOCALBIN)/kopia $(BENCH_ENGINES_FLAGS)

.PHONY: bench-scale
bench-scale: k8s-assets ## Scale harness (issue 13): own kube-apiserver + etcd with an audit log, bin/minio, the manager as a process; see docs/benchmarks.md. Full size: BENCH_SCALE_FLAGS='-backups 10000 -caches 1000 -scheduled 1000 -foreign 10000'.
	go run ./bench/scale $(BENCH_SCALE_FLAGS)

##@ Build

.PHONY: build
build: ## Build the operator image's two programs: the manager and the backup mover.
	$(GO_ENV) go build -o $(LOCALBIN)/manager .
	$(GO_ENV) go build -o $(LOCALBIN)/mover ./cmd/mover

.PHONY: run
run: build k8s-assets ## Run the manager against $KUBECONFIG, or against a local control plane it starts.
	go build -o $(LOCALBIN)/devcluster ./hack/devcluster
	$(LOCALBIN)/devcluster --manager $(LOCALBIN)/manager --assets $(K8S_ASSETS) --crds config/crd/bases

.PHONY: docker-build
docker-build: ## Build the manager image.
	$(CONTAINER_TOOL) build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the manager image.
	$(CONTAINER_TOOL) push $(IMG)

##@ Bundle

.PHONY: bundle
bundle: manifests kustomize ## Generate the OLM bundle (bundle/, bundle.Dockerfile) and validate it.
	cd hack/bundle && go run . --root ../.. --version $(VERSION) --image $(IMG) --created-at $(BUNDLE_CREATED_AT) \
		--channels $(CHANNELS) --default-channel $(DEFAULT_CHANNEL) \
		--replaces okgoes-operator.v$(PREVIOUS_VERSION) --skip-range ">=$(FIRST_VERSION) <$(VERSION)" \
		--digests releases/digests.yaml $(if $(MANAGER_DIGEST),--manager-digest $(MANAGER_DIGEST))
	cd hack/bundle && go test ./... -count=1

.PHONY: bundle-validate
bundle-validate: operator-sdk ## Validate bundle/ with the real operator-sdk and the operatorframework suite (OperatorHub's checks); a warning fails too. make test runs the same validators as a library (hack/bundle), the OLM suite runs this CLI.
	@out=$$($(OPERATOR_SDK) bundle validate ./bundle --select-optional suite=operatorframework 2>&1) || { echo "$$out" >&2; exit 1; }; \
	echo "$$out"; if grep -qE 'level=(warning|error)' <<<"$$out"; then echo "bundle-validate: warnings above" >&2; exit 1; fi

# make bundle names the operator image by digest (containerImage, the manager, RELATED_IMAGE_MOVER,
# relatedImages) when releases/digests.yaml lists VERSION or MANAGER_DIGEST gives it; else by the
# tag IMG. make release builds the image of VERSION (manager and mover) reproducibly from its
# release commit, which RELEASE_REFS in hack/images/build.sh must name (VERSION=<commit>), and pins
# it; then make release-digests records it (docs/install.md, "Images by digest").
MANAGER_DIGEST ?=

.PHONY: release
release: ## Keep the bundle of VERSION, its operator image pinned by digest, in releases/VERSION (the input of make catalog); never edited afterwards.
	rm -f bin/images/operator-v$(VERSION).ref  # never a pin left by an earlier RELEASE_REFS: built again, or missing
	hack/images/build.sh releases
	@test -s bin/images/operator-v$(VERSION).ref || { echo "release: no operator image of $(VERSION): add $(VERSION)=<release commit> to RELEASE_REFS in hack/images/build.sh" >&2; exit 1; }
	$(MAKE) bundle MANAGER_DIGEST=$$(cat bin/images/operator-v$(VERSION).ref)
	@if [ -d releases/$(VERSION) ] && ! diff -r bundle releases/$(VERSION) >/dev/null; then \
		echo "releases/$(VERSION) exists and differs from bundle/: a released bundle is never changed"; exit 1; fi
	mkdir -p releases/$(VERSION) && cp -r bundle/manifests bundle/metadata bundle/tests releases/$(VERSION)/

.PHONY: bundle-build
bundle-build: ## Build the bundle image of VERSION: from releases/VERSION once released (e.g. VERSION=0.2.0), else from bundle/.
	@mkdir -p $(LOCALBIN)
	hack/bundle-dockerfile.sh $(VERSION) > $(LOCALBIN)/bundle-v$(VERSION).Dockerfile
	$(CONTAINER_TOOL) build -f $(LOCALBIN)/bundle-v$(VERSION).Dockerfile -t $(BUNDLE_IMG) .

OPERATORHUB_DIR ?= $(LOCALBIN)/operatorhub
.PHONY: operatorhub-submission
operatorhub-submission: ## Lay out VERSION for community-operators(-prod) in $(OPERATORHUB_DIR)/operators/okgoes-operator/ (ci.yaml in FBC mode, VERSION/ with release-config.yaml; the first submitted version 0.5.0 without replaces), validated.
	hack/operatorhub-submission.sh $(VERSION) $(OPERATORHUB_DIR)

.PHONY: bundle-push
bundle-push: ## Push the bundle image.
	$(CONTAINER_TOOL) push $(BUNDLE_IMG)

.PHONY: scorecard-image
scorecard-image: ## Build the custom scorecard tests image (scorecard/README.md).
	$(CONTAINER_TOOL) build -f scorecard/Dockerfile -t $(IMAGE_TAG_BASE)-scorecard:v$(VERSION) scorecard

# make catalog renders releases/ into catalog/ (committed: the test fails when it is out of date).
# CATALOG_BUNDLE_IMAGES=false renders bundles with an empty image, which OLM installs from their
# olm.bundle.object properties without a registry (opm serve), into bin/catalog-local by default.
# With images, every release's bundle image and (in relatedImages) manager image are pinned by the
# digests in releases/digests.yaml (make release-digests), so OLM pulls bundles IfNotPresent and a
# mirror copies exactly what was tested. CATALOG_ARGS adds flags, e.g. --bundle-image
# 0.3.0=<ref> to name another bundle image of one release.
CATALOG_BUNDLE_IMAGES ?= true
CATALOG_ARGS ?=
CATALOG_DIR ?= $(if $(filter false,$(CATALOG_BUNDLE_IMAGES)),$(LOCALBIN)/catalog-local,$(CURDIR)/catalog)
CATALOG_DIGESTS ?= $(if $(filter false,$(CATALOG_BUNDLE_IMAGES)),,$(CURDIR)/releases/digests.yaml)
OPM ?= $(LOCALBIN)/opm

.PHONY: release-digests
release-digests: ## Build every release's bundle image (releases/) and manager image (its release commit, hack/images/build.sh RELEASE_REFS) reproducibly and write their digests to releases/digests.yaml; then make catalog.
	hack/images/build.sh digests
	cp bin/images/digests.yaml releases/digests.yaml

.PHONY: catalog
catalog: ## Render the file-based catalog of releases/ into catalog/ and validate it (also with bin/opm once hack/tools/opm/build.sh built it).
	cd hack/catalog && go run . --root ../.. --out $(abspath $(CATALOG_DIR)) --bundle-image-base $(IMAGE_TAG_BASE)-bundle \
		--bundle-images=$(CATALOG_BUNDLE_IMAGES) --channel $(DEFAULT_CHANNEL) $(if $(CATALOG_DIGESTS),--digests $(CATALOG_DIGESTS)) $(CATALOG_ARGS)
	@if [ -x $(OPM) ]; then echo "$(OPM) validate $(CATALOG_DIR)"; $(OPM) validate $(CATALOG_DIR); \
	else echo "catalog: $(OPM) not built (hack/tools/opm/build.sh), so only hack/catalog validated it"; fi

# make catalog-build packs catalog/ (make catalog: every release of releases/, so `make release`
# VERSION first to have it in) into the index image CATALOG_IMG, an OCI archive in bin/images
# written without a container engine (hack/images/build.sh catalog: /bin/opm serving /configs, as
# upstream's index images); make catalog-push pushes it (bin/ocipush, hack/tools/registry).
# CATALOG_PUSH_FLAGS: e.g. -plain-http or -ca ca.crt for a local registry.
CATALOG_IMG ?= $(IMAGE_TAG_BASE)-catalog:v$(VERSION)
CATALOG_PUSH_FLAGS ?=

.PHONY: catalog-build
catalog-build: ## Build the index image CATALOG_IMG (default $(IMAGE_TAG_BASE)-catalog:v$(VERSION)) of catalog/ into bin/images/catalog.tar.
	CATALOG_IMG=$(CATALOG_IMG) CATALOG_DIR=$(abspath $(CATALOG_DIR)) hack/images/build.sh catalog

.PHONY: catalog-push
catalog-push: ## Push the index image bin/images/catalog.tar as CATALOG_IMG.
	hack/tools/registry/build.sh ocipush
	$(LOCALBIN)/ocipush $(CATALOG_PUSH_FLAGS) $(LOCALBIN)/images/catalog.tar=$(CATALOG_IMG)

##@ Deployment

.PHONY: install
install: manifests kustomize ## Install the CRDs into the cluster of $KUBECONFIG.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRDs (and every custom resource!) from the cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator (IMG=...) into the cluster of $KUBECONFIG.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the cluster.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/.
$(CONTROLLER_GEN): hack/tools/gen/go.mod
	cd hack/tools/gen && $(GO_ENV) go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: promtool
promtool: $(PROMTOOL) ## Build promtool (github.com/prometheus/prometheus, hack/tools/promtool) into bin/, only when missing; make test runs its check rules and test rules on config/prometheus.
# Stamped with the version hack/tools/promtool/go.mod pins: TestAlertRules fails on a bin/promtool
# of another version (rm it and make promtool) rather than rebuilding it whenever go.mod is touched.
$(PROMTOOL):
	cd hack/tools/promtool && v=$$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus) && \
		$(GO_ENV) go build -tags remove_all_sd -ldflags "-X github.com/prometheus/common/version.Version=$$v" \
		-o $(PROMTOOL) github.com/prometheus/prometheus/cmd/promtool

.PHONY: prometheus
prometheus: $(PROMETHEUS) ## Build the Prometheus server (same module as promtool) into bin/, only when missing: the e2e suite's alert story runs it as a pod (hack/images/build.sh prometheus).
$(PROMETHEUS): hack/tools/promtool/go.mod
	cd hack/tools/promtool && $(GO_ENV) go build -tags remove_all_sd -o $(PROMETHEUS) github.com/prometheus/prometheus/cmd/prometheus

.PHONY: operator-sdk
operator-sdk: ## Build operator-sdk v1.42.3 into bin/ from ../shared/third_party (hack/tools/operator-sdk/build.sh), only when missing.
	hack/tools/operator-sdk/build.sh operator-sdk $(OPERATOR_SDK)

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize into bin/.
$(KUSTOMIZE): hack/tools/gen/go.mod
	cd hack/tools/gen && $(GO_ENV) go build -o $(KUSTOMIZE) sigs.k8s.io/kustomize/kustomize/v5

##@ Local cluster and end-to-end tests (hack/local-cluster.sh, test/e2e; docs/testing.md)

.PHONY: cluster-up
cluster-up: ## Start a single-node Kubernetes v1.37.2 built from source on this machine (root; builds what is missing).
	hack/local-cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it made.
	hack/local-cluster.sh down

.PHONY: e2e-tools
e2e-tools: ## Build what only the e2e suites need (CSI driver and sidecars, OLM, registry, opm, the cluster's other Kubernetes binaries), only those missing.
	hack/e2e-tools.sh

.PHONY: test-e2e
test-e2e: ## End-to-end suites on real pods: the e2e suite (make deploy) and the disaster-recovery story (back up, destroy the cluster, restore on a new one), then the OLM suite (test-olm), each on a local cluster of its own unless one runs. E2E_CLUSTER=existing: the cluster of $KUBECONFIG.
	E2E_PREBUILD_OLM=1 E2E_DR=1 hack/local-cluster.sh e2e
	hack/local-cluster.sh olm

.PHONY: test-olm
test-olm: ## OLM suite: OLM v0.31.0 installs the operator from a catalog of releases/, upgrades it 0.1.0 -> 0.2.0 -> 0.3.0 -> 0.4.0, scorecard of 0.4.0, uninstall; then operator-sdk run bundle 0.2.0, run bundle-upgrade 0.3.0 and cleanup through the local registry.
	hack/local-cluster.sh olm
