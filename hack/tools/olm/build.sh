#!/usr/bin/env bash
# Builds Operator Lifecycle Manager's olm and catalog operators and cpb (the tool its bundle unpack
# Jobs copy into a bundle image to copy the bundle out), at the version go.mod pins, as static
# binaries into bin/olm/ (or $1/) for the OLM image of the OLM end-to-end suite
# (hack/images/build.sh olm). Nothing is downloaded but Go modules; rebuilt only when go.mod or
# go.sum is newer than the binaries.
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-$(cd ../../.. && pwd)/bin/olm}"
if [[ -x "$out/olm" && -x "$out/catalog" && -x "$out/cpb" && "$out/olm" -nt go.mod && "$out/olm" -nt go.sum ]]; then
	exit 0
fi
# The proxy serves these modules, the checksum database does not know OLM's pseudo-versions.
export GONOSUMDB=${GONOSUMDB:-github.com/operator-framework,github.com/openshift}
version=$(go list -m -f '{{.Version}}' github.com/operator-framework/operator-lifecycle-manager)
mkdir -p "$out"
start=$SECONDS
for cmd in cmd/olm cmd/catalog util/cpb; do
	CGO_ENABLED=0 go build -ldflags "-s -w -X github.com/operator-framework/operator-lifecycle-manager/pkg/version.OLMVersion=${version#v}" \
		-o "$out/${cmd#*/}" "github.com/operator-framework/operator-lifecycle-manager/$cmd"
done
echo "built $out/olm, $out/catalog and $out/cpb ($version) in $((SECONDS - start))s" >&2
