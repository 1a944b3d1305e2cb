#!/usr/bin/env bash
# Fails when a package that hack/bundle's or scorecard's tests build comes from another version of
# its module than in the operator's own build: make test then compiles that package (and every
# package above it) twice, and the Kubernetes libraries would no longer be one release. Fix with
# `cd <module> && go get <module path>@<the operator's version> && go mod tidy`.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs() { CGO_ENABLED=0 go list -deps -test -f '{{if .Module}}{{.ImportPath}} {{.Module.Path}} {{.Module.Version}}{{end}}' ./... | sort -u; }
root=$(pkgs)
rc=0
for m in hack/bundle scorecard; do
	own=$(cd "$m" && pkgs)
	drift=$(join <(echo "$own") <(echo "$root") | awk '$3 != $5 {print "  " $2 " " $3 " (the operator: " $5 ")"}' | sort -u)
	if [ -n "$drift" ]; then
		echo "verify-module-versions: $m builds other versions than the operator of:" >&2
		echo "$drift" >&2
		rc=1
	fi
done
[ $rc -ne 0 ] || echo "verify-module-versions: hack/bundle and scorecard build the operator's versions of every module they share with it"
exit $rc
