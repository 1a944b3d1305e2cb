#!/usr/bin/env bash
# Builds, only those missing, the binaries the e2e suites need that `make test` does not build:
# the CSI driver and sidecars (bin/csi), OLM (bin/images/olm-bin), the registry (bin/registry,
# bin/ocipush), opm (bin/opm), and the local cluster's other Kubernetes binaries
# (kube-controller-manager, kube-scheduler, kubelet, kube-proxy into bin/k8s). `make e2e-tools`.
# Run it before going offline, or to have every build done before `make test-e2e`. (Run in the
# background of `make test` by .ci/run, it saved nothing: the 2-core machine is busy throughout
# make test, see docs/testing.md.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
"$root/hack/tools/csi/build.sh"
"$root/hack/tools/olm/build.sh" "$root/bin/images/olm-bin"
"$root/hack/tools/registry/build.sh"
"$root/hack/tools/opm/build.sh"
"$root/hack/envtest-assets.sh" kube-controller-manager kube-scheduler kubelet kube-proxy
echo "e2e-tools: done in $((SECONDS - start))s" >&2
