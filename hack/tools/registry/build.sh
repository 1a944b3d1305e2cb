#!/usr/bin/env bash
# Builds the local cluster's OCI registry and its pusher into bin/, each only when missing or older
# than this module (nothing is downloaded but Go modules):
#
#   registry  CNCF distribution at the version go.mod pins (cmd/registry), into bin/registry
#   ocipush   ocipush/ (oras-go): pushes the OCI archives of hack/images/build.sh, into bin/ocipush
#
#   hack/tools/registry/build.sh [registry|ocipush ...]   (default: both)
set -euo pipefail
cd "$(dirname "$0")"
bin=$(cd ../../.. && pwd)/bin
mkdir -p "$bin"
[ $# -gt 0 ] || set -- registry ocipush
for cmd in "$@"; do
	case $cmd in
	registry) pkg=github.com/distribution/distribution/v3/cmd/registry src=(go.mod go.sum) ;;
	ocipush) pkg=./ocipush src=(go.mod go.sum ocipush/main.go) ;;
	*) echo "registry: unknown command $cmd (registry or ocipush)" >&2; exit 2 ;;
	esac
	out=$bin/$cmd fresh=1
	for f in "${src[@]}"; do
		[[ -x "$out" && "$out" -nt "$f" ]] || fresh=0
	done
	[ $fresh = 1 ] && continue
	start=$SECONDS
	echo "registry: building $cmd into $out (first time only)" >&2
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$out.tmp" "$pkg"
	mv "$out.tmp" "$out"
	echo "registry: built $cmd in $((SECONDS - start))s" >&2
done
