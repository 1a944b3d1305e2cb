#!/usr/bin/env bash
# Builds a command of operator-sdk v1.42.3 from the unmodified upstream release archives in
# ../shared/third_party (operator-sdk and ansible-operator-plugins at tag v1.42.3; the module
# proxy refuses the plugins' version, so the operator-sdk module is built with a replace to the
# unpacked plugins), only when it is missing or of another version:
#
#   hack/tools/operator-sdk/build.sh [operator-sdk|scorecard-test] [out]
#
#   operator-sdk     the CLI (cmd/operator-sdk), into bin/operator-sdk: the OLM suite of make
#                    test-e2e (olm status, bundle validate, scorecard, run bundle) and make
#                    bundle-validate run it
#   scorecard-test   the binary of the basic and olm scorecard tests (images/scorecard-test, the
#                    entrypoint of quay.io/operator-framework/scorecard-test), into bin/scorecard-test
#
# Both archives are unpacked into a temporary directory and removed afterwards; nothing of them
# enters this project. Built as upstream releases are (.goreleaser.yml, Makefile): CGO_ENABLED=0,
# -tags containers_image_openpgp (pure Go instead of cgo gpgme), the version ldflags. Nothing is
# downloaded but Go modules. `$out.version` records the tag's commit.
#
#   THIRD_PARTY_DIR   where the archives are (default: ../shared/third_party beside the checkout, else /work/shared/third_party)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
cmd=${1:-operator-sdk}
case $cmd in
operator-sdk) pkg=./cmd/operator-sdk ;;
scorecard-test) pkg=./images/scorecard-test ;;
*) echo "operator-sdk: unknown command $cmd (operator-sdk or scorecard-test)" >&2; exit 2 ;;
esac
out="${2:-$root/bin/$cmd}"
version=v1.42.3
commit=2016cae87253bef07444dd47c463bdbb27c44c48 # `git get-tar-commit-id` of the archive: the tag's commit
k8s_version=v1.33.1                             # K8S_VERSION of its Makefile
third_party=${THIRD_PARTY_DIR:-$(cd "$root/.." && pwd)/shared/third_party}
if [[ -z "${THIRD_PARTY_DIR:-}" && ! -d "$third_party" && -d /work/shared/third_party ]]; then
	third_party=/work/shared/third_party # a clone outside the workspace (e.g. CI's clean clone in /tmp)
fi

if [[ -x "$out" && "$(cat "$out.version" 2>/dev/null)" == "$version $commit" ]]; then
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

echo "operator-sdk: building $cmd $version into $out (first time only; minutes cold on 2 cores)" >&2
start=$SECONDS
mkdir -p "$(dirname "$out")"
repo=github.com/operator-framework/operator-sdk
CGO_ENABLED=0 go build -trimpath -tags containers_image_openpgp -ldflags "-s -w \
	-X $repo/internal/version.Version=$version -X $repo/internal/version.GitVersion=$version \
	-X $repo/internal/version.GitCommit=$commit -X $repo/internal/version.KubernetesVersion=$k8s_version \
	-X $repo/internal/version.ImageVersion=$version" \
	-o "$out.tmp" "$pkg"
mv "$out.tmp" "$out"
echo "$version $commit" >"$out.version"
echo "operator-sdk: built $out ($cmd $version) in $((SECONDS - start))s" >&2
