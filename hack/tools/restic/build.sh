#!/usr/bin/env bash
# Builds restic 0.18.1 into bin/restic-0.18.1 (or $1), only when it is missing. bench/engines
# (make bench-engines) measures the mover against it: the restic users would install today, not
# Debian's 0.14. restic is not a module the operator links, so it is not a `tool` of go.mod (as
# bin/kopia is, hack/tools/kopia/build.sh): `go install pkg@version` builds it from the Go module
# proxy in a module of its own, with restic's go.sum, leaving the operator's go.mod alone.
# Nothing is downloaded but Go modules. A cold build takes about two minutes on two cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
version=v0.18.1
out="${1:-$root/bin/restic-${version#v}}"
if [[ -x "$out" ]]; then
	exit 0
fi
gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
start=$SECONDS
GOBIN="$gobin" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags "-s -w" \
	"github.com/restic/restic/cmd/restic@$version"
mkdir -p "$(dirname "$out")"
mv "$gobin/restic" "$out"
echo "built $out (restic $version) in $((SECONDS - start))s" >&2
