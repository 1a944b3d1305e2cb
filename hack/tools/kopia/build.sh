#!/usr/bin/env bash
# Builds the kopia CLI, at the version go.mod pins (the library version of the operator's go.mod),
# into bin/kopia (or $1), only when it is missing or older than go.mod/go.sum. Nothing is
# downloaded but Go modules. The internal/kopiarepo tests run it to prove that the stock CLI opens
# the repositories the operator writes; they call this script when bin/kopia is missing.
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-$(cd ../../.. && pwd)/bin/kopia}"
if [[ -x "$out" && "$out" -nt go.mod && "$out" -nt go.sum ]]; then
	exit 0
fi
version=$(go list -m -f '{{.Version}}' github.com/kopia/kopia)
mkdir -p "$(dirname "$out")"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/kopia/kopia/repo.BuildVersion=${version#v}" \
	-o "$out.tmp" github.com/kopia/kopia
mv "$out.tmp" "$out"
echo "built $out ($version) in $((SECONDS - start))s" >&2
