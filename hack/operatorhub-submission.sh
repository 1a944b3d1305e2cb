#!/usr/bin/env bash
# Lays out a release the way community-operators (OperatorHub.io) and community-operators-prod
# (OpenShift) take it, into <out>/operators/okgoes-operator/: ci.yaml (config/operatorhub) and
# <version>/ with the bundle's manifests/, metadata/ and tests/scorecard/, from releases/<version>
# once released, else from bundle/ (which must be of that version, as for make bundle-build).
# Then it validates the bundle there with the real operator-sdk and the operatorframework suite
# (bin/operator-sdk, built when missing); a warning fails too.
#
#   hack/operatorhub-submission.sh <version> <out>
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: hack/operatorhub-submission.sh <version> <out>}
out=${2:?usage: hack/operatorhub-submission.sh <version> <out>}
dir=bundle
if [ -d "releases/$version/manifests" ]; then
	dir=releases/$version
fi
csv=$(ls "$dir"/manifests/*.clusterserviceversion.yaml)
have=$(sed -n 's/^  version: \(.*\)$/\1/p' "$csv")
if [ "$have" != "$version" ]; then
	echo "operatorhub-submission: $dir holds version $have, not $version; run make bundle VERSION=$version first" >&2
	exit 1
fi
pkg=$out/operators/okgoes-operator
rm -rf "${pkg:?}/$version"
mkdir -p "$pkg/$version/tests"
cp config/operatorhub/ci.yaml "$pkg/ci.yaml"
cp -r "$dir/manifests" "$dir/metadata" "$pkg/$version/"
cp -r "$dir/tests/scorecard" "$pkg/$version/tests/"
hack/tools/operator-sdk/build.sh operator-sdk
result=$(bin/operator-sdk bundle validate "$pkg/$version" --select-optional suite=operatorframework 2>&1) ||
	{ echo "$result" >&2; exit 1; }
echo "$result"
if grep -qE 'level=(warning|error)' <<<"$result"; then
	echo "operatorhub-submission: warnings above" >&2
	exit 1
fi
echo "operatorhub-submission: $pkg/$version from $dir/ (and $pkg/ci.yaml)"
