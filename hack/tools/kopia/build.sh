#!/usr/bin/env bash
# Builds the kopia CLI into bin/kopia (or $1), only when it is missing or older than go.mod/go.sum.
# The internal/kopiarepo tests run it to prove that the stock CLI opens the repositories the
# operator writes; they call this script when bin/kopia is missing.
#
# The CLI is a `tool` of the operator's own module (go.mod: `tool github.com/kopia/kopia`), so it
# is always the kopia version the operator links, with the same versions of every module they
# share. It is built with the settings of `make vet` and `make test` (CGO_ENABLED=0, -trimpath:
# the Makefile's GO_ENV), so every package the operator also uses (the repository format, the S3 storage,
# minio-go, ...) comes from the build cache those already filled: a cold `make test` compiles
# only the CLI's own packages here (docs/testing.md). Nothing is downloaded but Go modules.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out="${1:-$root/bin/kopia}"
if [[ -x "$out" && "$out" -nt "$root/go.mod" && "$out" -nt "$root/go.sum" ]]; then
	exit 0
fi
cd "$root"
version=$(go list -m -f '{{.Version}}' github.com/kopia/kopia)
mkdir -p "$(dirname "$out")"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/kopia/kopia/repo.BuildVersion=${version#v}" \
	-o "$out.tmp" github.com/kopia/kopia
mv "$out.tmp" "$out"
echo "built $out ($version) in $((SECONDS - start))s" >&2
