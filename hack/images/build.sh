#!/usr/bin/env bash
# Builds the OCI image archives of the local cluster and the e2e suite into bin/images/, without a
# container engine or a registry (hack/images/ociimage writes one-layer OCI layouts):
#
#   pause.tar     okgoes.local/pause:e2e            the pod sandbox: hack/images/pause, static Go
#   operator.tar  okgoes.local/okgoes-operator:e2e-<sha256 of /manager, 12 hex> (in operator.ref)
#                 /manager, the project's static binary (manager and mover)
#   redis.tar     okgoes.local/redis:e2e            Debian's redis-server + redis-cli with their libraries, busybox sh
#   minio.tar     okgoes.local/minio:e2e            bin/minio, the test S3 server (hack/envtest-assets.sh minio)
#   tools.tar     okgoes.local/tools:e2e            busybox (sh, find, sha256sum ...) for the e2e suite's helper pods
#
# and, for the OLM suite (test/olm), images under the references the releases' CSVs name, so that
# OLM's Deployments run them without a registry:
#
#   olm.tar                 okgoes.local/olm:e2e    /bin/olm and /bin/catalog (hack/tools/olm/build.sh)
#   redis-sample.tar        docker.io/library/redis:7.4-alpine   the redis image above under the
#                           reference the CRD defaults to, as an air-gapped mirror would hold it
#                           (the scorecard's samples name no image)
#   opm.tar                 okgoes.local/opm:e2e    /bin/opm (hack/tools/opm/build.sh) + libraries, serves catalogs
#   operator-v0.1.0.tar     quay.io/okgoes/okgoes-operator:v0.1.0   the manager of release 0.1.0, built
#                           from its git commit ($FIRST_RELEASE_REF)
#   operator-v0.2.0.tar,    quay.io/okgoes/okgoes-operator:v0.2.0, :v0.3.0   the current manager (it
#   operator-v0.3.0.tar     is what 0.2.0 and 0.3.0 ship: both CRD versions, either storage version)
#
#   hack/images/build.sh [pause|operator|redis|minio|tools|olm|opm|releases|redis-sample ...]
#   (default: the e2e images)
#
# The operator images are rebuilt on every call (the source changes), but v0.1.0; the others only
# when missing.
# Debian's redis-server, redis-tools and busybox-static are installed when absent.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/bin/images
tag=${IMAGE_TAG:-e2e}
mkdir -p "$out"

ociimage() {
	(cd "$root" && go build -o "$out/.ociimage" ./hack/images/ociimage)
	"$out/.ociimage" "$@"
}

need_debs() {
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "images: installing ${missing[*]}" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

# closure prints -file flags for the binaries and every shared library they load (ldd), plus the
# dynamic loader.
closure() {
	local f lib
	for f in "$@"; do
		echo "-file" "$f"
		ldd "$f" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' | while read -r lib; do
			echo "-file" "$lib"
		done
	done | sort -u
}

busybox_links() {
	local applet
	for applet in sh ash cat chmod chown cp date du echo env find grep head id ln ls md5sum mkdir mv printf rm \
		sed seq sha256sum sleep sort stat tail tar test touch tr true false wc xargs dd; do
		printf -- '-link /bin/%s=busybox\n' "$applet"
	done
}

build() {
	local name=$1 dest=$out/$1.tar
	case $name in
	operator | releases) ;;
	*) if [ -f "$dest" ]; then return 0; fi ;;
	esac
	local start=$SECONDS
	case $name in
	pause)
		(cd "$root" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$out/pause" ./hack/images/pause)
		ociimage -ref "okgoes.local/pause:$tag" -o "$dest" -user 65535 -file "/pause=$out/pause" -entrypoint /pause
		;;
	operator)
		# The same command as `make build`, so the binary (and the Go build cache) is shared. The
		# tag names the binary's content, so that deploying a rebuilt operator onto a running
		# cluster rolls the manager (and the mover Jobs get the new image too).
		(cd "$root" && CGO_ENABLED=0 go build -o "$root/bin/manager" .)
		local ref
		ref="okgoes.local/okgoes-operator:${OPERATOR_TAG:-$tag-$(sha256sum "$root/bin/manager" | cut -c1-12)}"
		ociimage -ref "$ref" -o "$dest" -user 65532:65532 \
			-file "/manager=$root/bin/manager" -dir /tmp=1777 -entrypoint /manager
		echo "$ref" >"$out/operator.ref"
		;;
	redis)
		need_debs redis-server redis-tools busybox-static
		# shellcheck disable=SC2046 # one flag per word
		ociimage -ref "okgoes.local/redis:$tag" -o "$dest" -user 999:999 \
			$(closure /usr/bin/redis-server /usr/bin/redis-cli) -file /bin/busybox \
			$(busybox_links) -dir /data=1777 -dir /etc/redis -dir /tmp=1777 -entrypoint redis-server
		;;
	minio)
		"$root/hack/envtest-assets.sh" minio
		ociimage -ref "okgoes.local/minio:$tag" -o "$dest" -user 1000:1000 -file "/minio=$root/bin/minio" \
			-dir /data=1777 -dir /tmp=1777 -env PATH=/ -env HOME=/tmp -entrypoint /minio
		;;
	redis-sample)
		build redis
		need_debs redis-server redis-tools busybox-static
		# shellcheck disable=SC2046 # one flag per word
		ociimage -ref "docker.io/library/redis:7.4-alpine" -o "$dest" -user 999:999 \
			$(closure /usr/bin/redis-server /usr/bin/redis-cli) -file /bin/busybox \
			$(busybox_links) -dir /data=1777 -dir /etc/redis -dir /tmp=1777 -entrypoint redis-server
		;;
	tools)
		need_debs busybox-static
		# shellcheck disable=SC2046
		ociimage -ref "okgoes.local/tools:$tag" -o "$dest" -file /bin/busybox $(busybox_links) \
			-dir /tmp=1777 -entrypoint /bin/sh
		;;
	olm)
		"$root/hack/tools/olm/build.sh" "$out/olm-bin"
		ociimage -ref "okgoes.local/olm:$tag" -o "$dest" -user 65532:65532 -file "/bin/olm=$out/olm-bin/olm" \
			-file "/bin/catalog=$out/olm-bin/catalog" -dir /tmp=1777 -entrypoint /bin/olm
		;;
	opm)
		"$root/hack/tools/opm/build.sh"
		# shellcheck disable=SC2046 # one flag per word
		ociimage -ref "okgoes.local/opm:$tag" -o "$dest" -user 65532:65532 $(closure "$root/bin/opm") \
			-file "/bin/opm=$root/bin/opm" -dir /tmp=1777 -dir /catalogs -entrypoint /bin/opm
		;;
	releases)
		release_images
		return 0
		;;
	*) echo "images: unknown image $name" >&2; return 2 ;;
	esac
	echo "images: built $name ($(du -h "$dest" | cut -f1)) in $((SECONDS - start))s" >&2
}

# FIRST_RELEASE_REF is the commit of release 0.1.0 (test/upgrade builds its manager from it too).
FIRST_RELEASE_REF=${FIRST_RELEASE_REF:-682e361}

# release_images writes operator-v<version>.tar for every release the OLM suite installs.
release_images() {
	local start=$SECONDS dest=$out/operator-v0.1.0.tar
	if [ ! -f "$dest" ]; then
		if ! git -C "$root" cat-file -e "$FIRST_RELEASE_REF^{commit}" 2>/dev/null; then
			git -C "$root" fetch --quiet --unshallow --tags || git -C "$root" fetch --quiet --tags
		fi
		local src
		src=$(mktemp -d)
		git -C "$root" archive "$FIRST_RELEASE_REF" | tar -x -C "$src"
		(cd "$src" && CGO_ENABLED=0 go build -o "$out/manager-v0.1.0" .)
		rm -rf "$src"
		ociimage -ref "quay.io/okgoes/okgoes-operator:v0.1.0" -o "$dest" -user 65532:65532 \
			-file "/manager=$out/manager-v0.1.0" -dir /tmp=1777 -entrypoint /manager
	fi
	(cd "$root" && CGO_ENABLED=0 go build -o "$root/bin/manager" .)
	local v
	for v in 0.2.0 0.3.0; do
		ociimage -ref "quay.io/okgoes/okgoes-operator:v$v" -o "$out/operator-v$v.tar" -user 65532:65532 \
			-file "/manager=$root/bin/manager" -dir /tmp=1777 -entrypoint /manager
	done
	echo "images: built the release images in $((SECONDS - start))s" >&2
}

if [ $# -eq 0 ]; then
	set -- pause operator redis minio tools
fi
for name in "$@"; do
	build "$name"
done
