#!/usr/bin/env bash
# Fails when a package that another build of make test compiles comes from another version of its
# module than in the operator's own build: make test then compiles that package (and every package
# above it) twice, and the Kubernetes libraries would no longer be one release. Checked:
#
#   hack/bundle, scorecard   their tests (fix: cd <module> && go get <module path>@<the operator's
#                            version> && go mod tidy)
#   hack/tools/k8s           kube-apiserver and kubectl, which share k8s.io/api, client-go,
#                            golang.org/x/... with the operator (fix: the same go get in
#                            hack/tools/k8s; it raises Kubernetes' own pins to the operator's)
#   hack/tools/gen           controller-gen and kustomize (apimachinery, protobuf, ...)
#   hack/tools/minio         the MinIO server of the S3 tests (grpc, protobuf, minio-go, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs() { CGO_ENABLED=0 go list -deps -f '{{if .Module}}{{.ImportPath}} {{.Module.Path}} {{.Module.Version}}{{end}}' "$@" | sort -u; }
root=$(pkgs -test ./...)
rc=0
check() {
	local m=$1 own drift
	shift
	own=$(cd "$m" && pkgs "$@")
	drift=$(join <(echo "$own") <(echo "$root") | awk '$3 != $5 {print "  " $2 " " $3 " (the operator: " $5 ")"}' | sort -u)
	if [ -n "$drift" ]; then
		echo "verify-module-versions: $m builds other versions than the operator of:" >&2
		echo "$drift" >&2
		rc=1
	fi
}
check hack/bundle -test ./...
check scorecard -test ./...
check hack/tools/k8s k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
check hack/tools/gen sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/kustomize/kustomize/v5
check hack/tools/minio github.com/minio/minio
[ $rc -ne 0 ] || echo "verify-module-versions: hack/bundle, scorecard, kube-apiserver and kubectl (hack/tools/k8s), controller-gen and kustomize (hack/tools/gen) and MinIO (hack/tools/minio) build the operator's versions of every module they share with it"
exit $rc
