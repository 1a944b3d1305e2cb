#!/usr/bin/env bash
# Builds opm, operator-registry's CLI, at the version go.mod pins, into bin/opm (or $1) with the
# build tags upstream releases use (json1; containers_image_openpgp avoids cgo gpgme). Nothing is
# downloaded but Go modules. `make catalog` and the hack/catalog test run `opm validate` with it
# when it exists; the e2e serves the catalog with `opm serve`.
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-$(cd ../../.. && pwd)/bin/opm}"
if [[ -x "$out" && "$out" -nt go.mod && "$out" -nt go.sum ]]; then
	exit 0
fi
version=$(go list -m -f '{{.Version}}' github.com/operator-framework/operator-registry)
mkdir -p "$(dirname "$out")"
go build -tags json1,containers_image_openpgp \
	-ldflags "-X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$version" \
	-o "$out" github.com/operator-framework/operator-registry/cmd/opm
echo "built $out ($version)"
