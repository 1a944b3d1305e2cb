#!/usr/bin/env bash
# Builds the CSI parts of the local cluster from the unmodified upstream release archives in
# ../shared/third_party (each carries its vendor/ directory, so nothing is downloaded), only when a
# binary is missing or of another version:
#
#   hack/tools/csi/build.sh [outdir]        (default: bin/csi)
#
#   hostpathplugin             csi-driver-host-path v1.18.0    cmd/hostpathplugin
#   csi-provisioner            external-provisioner v6.3.0     cmd/csi-provisioner
#   csi-node-driver-registrar  node-driver-registrar v2.17.0   cmd/csi-node-driver-registrar
#   csi-snapshotter            external-snapshotter v8.6.0     cmd/csi-snapshotter
#   snapshot-controller        external-snapshotter v8.6.0     cmd/snapshot-controller
#
# Built as their release Makefiles (release-tools/build.make) build them: CGO_ENABLED=0, -mod=vendor,
# `-X main.version=<tag>`. Each archive is unpacked into a temporary directory and removed after
# its binaries are built; the canonical deploy manifests and the snapshot CRDs the cluster applies
# are copied next to the binaries (outdir/manifests/<archive>/...), nothing of them enters this
# project. `$outdir/<binary>.version` records the tag.
#
#   THIRD_PARTY_DIR   where the archives are (default: ../shared/third_party beside the checkout, else /work/shared/third_party)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
out="${1:-$root/bin/csi}"
third_party=${THIRD_PARTY_DIR:-$(cd "$root/.." && pwd)/shared/third_party}
if [[ -z "${THIRD_PARTY_DIR:-}" && ! -d "$third_party" && -d /work/shared/third_party ]]; then
	third_party=/work/shared/third_party # a clone outside the workspace (e.g. CI's clean clone in /tmp)
fi

# archive tag binaries... ; manifests are the paths (inside the archive) the cluster applies.
components=(
	"csi-driver-host-path v1.18.0 hostpathplugin"
	"external-provisioner v6.3.0 csi-provisioner"
	"node-driver-registrar v2.17.0 csi-node-driver-registrar"
	"external-snapshotter v8.6.0 csi-snapshotter snapshot-controller"
)
manifests_of() {
	case $1 in
	csi-driver-host-path) echo deploy/kubernetes-1.34/hostpath ;;
	external-provisioner) echo deploy/kubernetes/rbac.yaml ;;
	external-snapshotter) echo client/config/crd deploy/kubernetes/snapshot-controller deploy/kubernetes/csi-snapshotter ;;
	esac
}

mkdir -p "$out"
for c in "${components[@]}"; do
	read -r name tag bins <<<"$c"
	missing=0
	for b in $bins; do
		[[ -x "$out/$b" && "$(cat "$out/$b.version" 2>/dev/null)" == "$name $tag" ]] || missing=1
	done
	for m in $(manifests_of "$name"); do
		[[ -e "$out/manifests/$name/$m" ]] || missing=1
	done
	[[ $missing == 1 ]] || continue
	archive="$third_party/$name-$tag.tar.gz"
	if [[ ! -f "$archive" ]]; then
		echo "csi: $archive not found (THIRD_PARTY_DIR; or git archive of the upstream tag $tag)" >&2
		exit 1
	fi
	src=$(mktemp -d "${TMPDIR:-/tmp}/okgoes-csi.XXXXXX")
	tar -xzf "$archive" -C "$src"
	for m in $(manifests_of "$name"); do
		mkdir -p "$(dirname "$out/manifests/$name/$m")"
		rm -rf "$out/manifests/$name/$m"
		cp -rL "$src/$name-$tag/$m" "$out/manifests/$name/$m"
	done
	for b in $bins; do
		[[ -x "$out/$b" && "$(cat "$out/$b.version" 2>/dev/null)" == "$name $tag" ]] && continue
		echo "csi: building $b ($name $tag) into $out (first time only; minutes cold on 2 cores)" >&2
		start=$SECONDS
		(cd "$src/$name-$tag" && CGO_ENABLED=0 go build -mod=vendor -trimpath \
			-ldflags "-s -w -X main.version=$tag" -o "$out/$b.tmp" "./cmd/$b")
		mv "$out/$b.tmp" "$out/$b"
		echo "$name $tag" >"$out/$b.version"
		echo "csi: built $b in $((SECONDS - start))s" >&2
	done
	chmod -R u+w "$src" 2>/dev/null
	rm -rf "$src"
done
