#!/usr/bin/env bash
# Writes on stdout the Dockerfile of the bundle image of one version, for `make bundle-build`:
# bundle.Dockerfile's form (FROM scratch, the bundle's metadata/annotations.yaml as labels, its
# manifests/, metadata/ and tests/scorecard/ copied to the paths the labels name) over the bundle
# directory of that version: releases/<version> once it is released (a released bundle is never
# changed, so its image is built from what shipped), else bundle/, which must be of that version
# (make bundle VERSION=<version>).
#
#   hack/bundle-dockerfile.sh <version>
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: hack/bundle-dockerfile.sh <version>}
dir=bundle
if [ -d "releases/$version/manifests" ]; then
	dir=releases/$version
fi
csv=$(ls "$dir"/manifests/*.clusterserviceversion.yaml)
have=$(sed -n 's/^  version: \(.*\)$/\1/p' "$csv")
if [ "$have" != "$version" ]; then
	echo "bundle-dockerfile: $dir holds version $have, not $version; run make bundle VERSION=$version first" >&2
	exit 1
fi
echo "# The bundle image of okgoes-operator $version, from $dir/ (hack/bundle-dockerfile.sh)."
echo "FROM scratch"
echo
labels=0
while read -r key value; do
	echo "LABEL ${key%:}=$value"
	labels=$((labels + 1))
done < <(sed -n 's/^  \([a-z0-9.]*:\) \(.*\)$/\1 \2/p' "$dir/metadata/annotations.yaml")
if [ $labels -eq 0 ]; then
	echo "bundle-dockerfile: no annotations in $dir/metadata/annotations.yaml" >&2
	exit 1
fi
echo
echo "COPY $dir/manifests /manifests/"
echo "COPY $dir/metadata /metadata/"
echo "COPY $dir/tests/scorecard /tests/scorecard/"
