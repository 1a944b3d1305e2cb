#!/usr/bin/env bash
# Builds the test-cluster binaries into bin/k8s from the Go module proxy (no binary downloads are
# possible on the machines this project is built on). Each binary is built only when missing.
#
#   hack/envtest-assets.sh [redis-server|kube-apiserver|etcd|kubectl|minio|kopia ...]   (default: all six)
#
# redis-server is Debian's package (apt-get, only when it is not installed): the RedisCache
# replication stories and internal/redisadmin run real redis-server processes.
#
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy (the local cluster's, built by
# hack/local-cluster.sh and hack/e2e-tools.sh) come from the same wrapper module, when named.
#
# kube-apiserver and kubectl come from k8s.io/kubernetes v1.37.2 through the wrapper module in
# hack/tools/k8s, whose go.mod replaces each staging module with its v0.37.2 release; etcd comes from
# hack/tools/etcd (etcdmain); minio (the S3 server of the backup tests; AGPL, so only ever a
# separate binary) from hack/tools/minio into bin/minio; kopia (the stock CLI the kopiarepo tests
# open the operator's repositories with) by hack/tools/kopia/build.sh into bin/kopia. The version ldflags make discovery report v1.37.2 instead of
# v0.0.0-master, which kubectl and client-go version checks reject.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${K8S_ASSETS_DIR:-$root/bin/k8s}
k8s_version=v1.37.2
mkdir -p "$out"

version_ldflags() {
	local v=$1 major minor
	major=$(echo "${v#v}" | cut -d. -f1)
	minor=$(echo "${v#v}" | cut -d. -f2)
	local flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

build() {
	local name=$1 dir pkg ldflags dest=$out
	case $name in
	redis-server)
		"$root/hack/debs.sh" redis-server
		return ;;
	kopia)
		"$root/hack/tools/kopia/build.sh" "$root/bin/kopia"
		return ;;
	kube-apiserver | kubectl | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
		dir=$root/hack/tools/k8s pkg=k8s.io/kubernetes/cmd/$name ldflags=$(version_ldflags $k8s_version) ;;
	etcd)
		dir=$root/hack/tools/etcd pkg=./cmd/etcd ldflags="-s -w" ;;
	minio)
		dir=$root/hack/tools/minio pkg=github.com/minio/minio ldflags="-s -w" dest=$root/bin ;;
	*) echo "envtest-assets: unknown binary $name" >&2; return 2 ;;
	esac
	if [ -x "$dest/$name" ]; then
		return 0
	fi
	echo "envtest-assets: building $name into $dest (first time only; a few minutes cold on 2 cores)" >&2
	local start=$SECONDS
	mkdir -p "$dest"
	# -trimpath and cgo off as in make test (the Makefile's GO_ENV): the packages kube-apiserver,
	# kubectl and MinIO share with the operator (k8s.io/api, client-go, grpc, ...; hack/tools/k8s
	# and hack/tools/minio require the operator's versions of them, checked by
	# hack/verify-module-versions.sh) compile once.
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dest/$name.tmp" "$pkg")
	mv "$dest/$name.tmp" "$dest/$name"
	echo "envtest-assets: built $name in $((SECONDS - start))s" >&2
}

if [ $# -eq 0 ]; then
	set -- redis-server etcd kube-apiserver kubectl minio kopia
fi
for name in "$@"; do
	build "$name"
done
