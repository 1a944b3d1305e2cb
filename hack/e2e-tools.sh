#!/usr/bin/env bash
# Builds, only those missing, the binaries the e2e suites need that `make test` does not build:
# the CSI driver and sidecars (bin/csi), OLM (bin/images/olm-bin), the registry (bin/registry,
# bin/ocipush), opm (bin/opm), and the local cluster's other Kubernetes binaries
# (kube-controller-manager, kube-scheduler, kubelet, kube-proxy into bin/k8s). `make e2e-tools`.
#
# .ci/run runs it in the background while `make test` runs, with E2E_TOOLS_WAIT_FOR_APISERVER=1:
# the Kubernetes binaries share most of their packages with kube-apiserver, which make test
# builds, so they are built after it, from a warm cache, rather than compiling the same packages
# twice at once (it gives up waiting after an hour and builds them anyway).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
"$root/hack/tools/csi/build.sh"
"$root/hack/tools/olm/build.sh" "$root/bin/images/olm-bin"
"$root/hack/tools/registry/build.sh"
"$root/hack/tools/opm/build.sh"
if [ "${E2E_TOOLS_WAIT_FOR_APISERVER:-0}" = 1 ]; then
	for _ in $(seq 3600); do
		[ -x "$root/bin/k8s/kube-apiserver" ] && break
		sleep 1
	done
fi
"$root/hack/envtest-assets.sh" kube-controller-manager kube-scheduler kubelet kube-proxy
echo "e2e-tools: done in $((SECONDS - start))s" >&2
