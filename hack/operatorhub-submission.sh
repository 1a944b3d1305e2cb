#!/usr/bin/env bash
# Lays out a release the way community-operators (OperatorHub.io) and community-operators-prod
# (OpenShift) take it, into <out>/operators/okgoes-operator/: ci.yaml (config/operatorhub, FBC
# mode) and <version>/ with the bundle's manifests/, metadata/ and tests/scorecard/, from
# releases/<version> once released, else from bundle/ (which must be of that version, as for make
# bundle-build), plus release-config.yaml (where the release pipeline puts the bundle in the
# catalog template: channel stable, replaces and skipRange as the CSV says).
#
# OPERATORHUB_FIRST_VERSION (0.5.0) is the first version submitted: it replaces nothing there, so
# its CSV is submitted without spec.replaces (operator-pipelines' check_replaces_availability
# fails a bundle that replaces a version the repository lacks; olm.skipRange stays: it names no
# bundle). Earlier versions were never submitted (0.1.0-0.3.0 lack com.redhat.openshift.versions)
# and are refused. docs/install.md, "OperatorHub".
#
# Then it validates the bundle there with the real operator-sdk and the operatorframework suite
# (bin/operator-sdk, built when missing); a warning fails too. OPERATORHUB_SDK_VALIDATE=false skips
# that (hack/bundle's TestOperatorHubSubmission runs the same validators as a library, with the
# community static checks).
#
#   hack/operatorhub-submission.sh <version> <out>
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: hack/operatorhub-submission.sh <version> <out>}
out=${2:?usage: hack/operatorhub-submission.sh <version> <out>}
first=${OPERATORHUB_FIRST_VERSION:-0.5.0}
if [ "$(printf '%s\n%s\n' "$first" "$version" | sort -V | head -1)" != "$first" ]; then
	echo "operatorhub-submission: $version was never submitted: the first submitted version is $first" >&2
	exit 1
fi
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
sub=$pkg/$version/manifests/${csv##*/}
if [ "$version" = "$first" ]; then
	sed -i '/^  replaces: /d' "$sub"
fi
replaces=$(sed -n 's/^  replaces: \(.*\)$/\1/p' "$sub")
skip_range=$(sed -n 's/^    olm.skipRange: \(.*\)$/\1/p' "$sub")
{
	echo "# Where the release pipeline puts this bundle in the catalog template of ci.yaml's fbc block."
	echo "catalog_templates:"
	echo "  - template_name: basic.yaml"
	echo "    channels: [stable]"
	echo "    defaultChannel: stable"
	[ -z "$replaces" ] || echo "    replaces: $replaces"
	[ -z "$skip_range" ] || echo "    skipRange: $skip_range"
} >"$pkg/$version/release-config.yaml"
if [ "${OPERATORHUB_SDK_VALIDATE:-true}" != false ]; then
	hack/tools/operator-sdk/build.sh operator-sdk
	result=$(bin/operator-sdk bundle validate "$pkg/$version" --select-optional suite=operatorframework 2>&1) ||
		{ echo "$result" >&2; exit 1; }
	echo "$result"
	if grep -qE 'level=(warning|error)' <<<"$result"; then
		echo "operatorhub-submission: warnings above" >&2
		exit 1
	fi
fi
echo "operatorhub-submission: $pkg/$version from $dir/ (and $pkg/ci.yaml)"
