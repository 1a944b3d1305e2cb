#!/usr/bin/env bash
# Fails when `make generate manifests dashboard` would change the committed generated files
# (deepcopy, CRDs, RBAC, the Grafana dashboard). It compares the files before and after
# regenerating, so it also works with uncommitted edits in the working tree; in CI (a clean clone)
# it is exactly "generated == committed".
set -euo pipefail
cd "$(dirname "$0")/.."
generated() { find api -name 'zz_generated.*.go'; find config/crd/bases config/rbac -name '*.yaml'; echo config/grafana/okgoes-operator.json; }
snapshot() { generated | sort | xargs sha256sum; }
before=$(snapshot)
make --no-print-directory generate manifests dashboard >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
	diff <(echo "$before") <(echo "$after") >&2 || true
	echo "verify-generated: generated files were stale and have been regenerated; review and commit them" >&2
	exit 1
fi
echo "verify-generated: deepcopy, CRDs and RBAC match the markers, the dashboard its generator"
