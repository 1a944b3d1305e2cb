#!/usr/bin/env bash
# Builds the operator-sdk CLI v1.42.3 into bin/operator-sdk (or $1), only when it is missing or is
# another version, from the unmodified upstream release archives in ../shared/third_party
# (operator-sdk and ansible-operator-plugins at tag v1.42.3; the module proxy refuses the plugins'
# version, so the operator-sdk module is built with a replace to the unpacked plugins). Both are
# unpacked into a temporary directory and removed afterwards; nothing of them enters this project.
# Built as upstream releases are (.goreleaser.yml): CGO_ENABLED=0, -tags containers_image_openpgp
# (pure Go instead of cgo gpgme), the version ldflags of its Makefile. Nothing is downloaded but Go
# modules. `make test` runs `bundle validate` with it (make bundle-validate).
#
#   THIRD_PARTY_DIR   where the archives are (default: ../shared/third_party beside the checkout)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
out="${1:-$root/bin/operator-sdk}"
version=v1.42.3
commit=2016cae87253bef07444dd47c463bdbb27c44c48 # `git get-tar-commit-id` of the archive: the tag's commit
k8s_version=v1.33.1                             # K8S_VERSION of its Makefile
third_party=${THIRD_PARTY_DIR:-$(cd "$root/.." && pwd)/shared/third_party}

if [[ -x "$out" ]] && "$out" version 2>/dev/null | grep -q "commit: \"$commit\""; then
	exit 0
fi
for f in operator-sdk-$version.tar.gz ansible-operator-plugins-$version.tar.gz; do
	if [[ ! -f "$third_party/$f" ]]; then
		echo "operator-sdk: $third_party/$f not found (THIRD_PARTY_DIR; or git archive of the upstream tag $version)" >&2
		exit 1
	fi
done

src=$(mktemp -d "${TMPDIR:-/tmp}/okgoes-operator-sdk.XXXXXX")
trap 'chmod -R u+w "$src" 2>/dev/null; rm -rf "$src"' EXIT
tar -xzf "$third_party/operator-sdk-$version.tar.gz" -C "$src"
tar -xzf "$third_party/ansible-operator-plugins-$version.tar.gz" -C "$src"
cd "$src/operator-sdk-$version"
go mod edit -replace "github.com/operator-framework/ansible-operator-plugins=../ansible-operator-plugins-$version"

echo "operator-sdk: building $version into $out (first time only; minutes cold on 2 cores)" >&2
start=$SECONDS
mkdir -p "$(dirname "$out")"
repo=github.com/operator-framework/operator-sdk
CGO_ENABLED=0 go build -trimpath -tags containers_image_openpgp -ldflags "-s -w \
	-X $repo/internal/version.Version=$version -X $repo/internal/version.GitVersion=$version \
	-X $repo/internal/version.GitCommit=$commit -X $repo/internal/version.KubernetesVersion=$k8s_version \
	-X $repo/internal/version.ImageVersion=$version" \
	-o "$out.tmp" ./cmd/operator-sdk
mv "$out.tmp" "$out"
echo "operator-sdk: built $out ($version) in $((SECONDS - start))s" >&2
