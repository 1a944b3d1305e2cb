#!/usr/bin/env bash
# Builds the OCI image archives of the local cluster and the e2e suite into bin/images/, without a
# container engine or a registry (hack/images/ociimage writes one-layer OCI layouts):
#
#   pause.tar     okgoes.local/pause:e2e            the pod sandbox: hack/images/pause, static Go
#   operator.tar  okgoes.local/okgoes-operator:e2e-<sha256 of /manager and /mover, 12 hex> (in operator.ref)
#                 /manager and /mover (cmd/mover, the program of the backup Jobs), static binaries
#   redis.tar     okgoes.local/redis:e2e            Debian's redis-server + redis-cli with their libraries, busybox sh
#   minio.tar     okgoes.local/minio:e2e            bin/minio, the test S3 server (hack/envtest-assets.sh minio)
#   tools.tar     okgoes.local/tools:e2e            busybox (sh, find, sha256sum ...) for the e2e suite's helper pods
#   prometheus.tar okgoes.local/prometheus:e2e      bin/prometheus (make prometheus), the alert story's server
#
# and, for the OLM suite (test/olm), images under the references the releases' CSVs name, so that
# OLM's Deployments run them without a registry:
#
#   olm.tar                 okgoes.local/olm:e2e    /bin/olm, /bin/catalog and /bin/cpb (hack/tools/olm/build.sh),
#                           /bin/cp (busybox): also the util image of OLM's bundle unpack Jobs
#   bundle-v<x.y.z>.tar     quay.io/okgoes/okgoes-operator-bundle:v<x.y.z>   every release's bundle
#                           image, what bundle.Dockerfile builds from releases/<x.y.z>/ (same files,
#                           same labels); bundle-v<x.y.z>.ref holds its reference by digest, the form
#                           a catalog pins (reproducible archives: the digest depends on the content only)
#   scorecard-v<x.y.z>.tar  quay.io/okgoes/okgoes-operator-scorecard:v<x.y.z>   the custom scorecard
#                           tests (scorecard/) under every image the scorecard configurations of
#                           bundle/ and releases/ name, laid out as scorecard/Dockerfile lays it out
#   redis-sample.tar        docker.io/library/redis:7.4-alpine   the redis image above under the
#                           reference the CRD defaults to, as an air-gapped mirror would hold it
#                           (the scorecard's samples name no image)
#   opm.tar                 okgoes.local/opm:e2e    /bin/opm (hack/tools/opm/build.sh) + libraries, serves catalogs;
#                           also the index image of `operator-sdk run bundle` (pushed to the local
#                           registry): an empty file-based catalog in /configs, named by the label
#                           operators.operatorframework.io.index.configs.v1 as in upstream's opm
#                           image, and busybox sh (the registry pod runs `sh -c "opm serve ..."`)
#   catalog.tar             $CATALOG_IMG            make catalog-build's index image: catalog/ in /configs
#                           (CATALOG_DIR), served by /bin/opm (hack/tools/opm/build.sh), labelled
#                           operators.operatorframework.io.index.configs.v1=/configs as upstream's
#   run-bundle-init.tar     registry.access.redhat.com/ubi9/ubi:9.8   what the init container of
#                           operator-sdk's run bundle registry pod needs of its default
#                           --decompression-image (`run bundle-upgrade` has no flag for it): sh,
#                           cat and gzip (busybox), as an air-gapped mirror would hold it
#   scorecard-test.tar      quay.io/operator-framework/scorecard-test:v1.42.3   the basic and olm scorecard
#                           tests: images/scorecard-test of operator-sdk v1.42.3, built from
#                           ../shared/third_party (hack/tools/operator-sdk/build.sh scorecard-test), laid
#                           out as its Dockerfile lays it out (/usr/local/bin/scorecard-test, uid 1001)
#   scorecard-untar.tar     okgoes.local/scorecard-untar:e2e   what images/scorecard-untar is for
#                           `operator-sdk scorecard --untar-image`: a tar in PATH (busybox), no
#                           entrypoint, uid 1001 (upstream's image is named by a digest no local
#                           build can have)
#   operator-v<x.y.z>.tar   quay.io/okgoes/okgoes-operator:v<x.y.z>   the manager of every release,
#                           built from its release commit ($RELEASE_REFS), as users run it,
#                           reproducibly (release_build); operator-v<x.y.z>.ref holds its reference
#                           by digest, the form releases/digests.yaml and the catalog pin
#
# and, for the CSI stack of the local cluster (hack/csi), images under the references upstream's
# manifests name, each holding the binary hack/tools/csi/build.sh builds from ../shared/third_party,
# laid out as upstream's Dockerfile lays it out (the binary at /, as its entrypoint, root):
#
#   csi-hostpathplugin.tar             registry.k8s.io/sig-storage/hostpathplugin:v1.18.0, plus busybox's
#                                      tar, gzip, mount and umount (upstream's image is alpine with
#                                      util-linux and tar: the driver runs them for snapshots and mounts)
#   csi-provisioner.tar                registry.k8s.io/sig-storage/csi-provisioner:v6.3.0
#   csi-node-driver-registrar.tar      registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0
#   csi-snapshotter.tar                registry.k8s.io/sig-storage/csi-snapshotter:v8.6.0
#   csi-snapshot-controller.tar        registry.k8s.io/sig-storage/snapshot-controller:v8.6.0
#   (`hack/images/build.sh csi` builds all five)
#
#   hack/images/build.sh [pause|operator|redis|minio|tools|prometheus|csi|olm|opm|catalog|releases|bundles|digests|scorecard|scorecard-test|scorecard-untar|redis-sample|run-bundle-init ...]
#   (digests: releases and bundles, then bin/images/digests.yaml, the input of releases/digests.yaml)
#   (default: the e2e images)
#
# The operator image, the bundle images and the scorecard image are rebuilt on every
# call (the source changes); the others only when missing or older than this script.
# Debian's redis-server, redis-tools and busybox-static are installed when absent.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# IMAGES_OUT: where the archives go (tests build into a temporary directory).
out=${IMAGES_OUT:-$root/bin/images}
tag=${IMAGE_TAG:-e2e}
mkdir -p "$out"

ociimage() {
	(cd "$root" && go build -o "$out/.ociimage" ./hack/images/ociimage)
	"$out/.ociimage" "$@"
}

need_debs() { "$root/hack/debs.sh" "$@"; }

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
	operator | releases | bundles | digests | scorecard | csi | catalog) ;;
	*) if [ -f "$dest" ] && [ "$dest" -nt "$0" ]; then return 0; fi ;;
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
		(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$root/bin/manager" . &&
			CGO_ENABLED=0 go build -trimpath -o "$root/bin/mover" ./cmd/mover)
		local ref
		ref="okgoes.local/okgoes-operator:${OPERATOR_TAG:-$tag-$(cat "$root/bin/manager" "$root/bin/mover" | sha256sum | cut -c1-12)}"
		ociimage -ref "$ref" -o "$dest" -user 65532:65532 \
			-file "/manager=$root/bin/manager" -file "/mover=$root/bin/mover" -dir /tmp=1777 -entrypoint /manager
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
	prometheus)
		make -C "$root" prometheus >/dev/null
		ociimage -ref "okgoes.local/prometheus:$tag" -o "$dest" -user 65534:65534 -file "/bin/prometheus=$root/bin/prometheus" \
			-dir /prometheus=1777 -dir /tmp=1777 -entrypoint /bin/prometheus
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
		need_debs busybox-static
		"$root/hack/tools/olm/build.sh" "$out/olm-bin"
		# The bundle unpack Job runs `/bin/cp -Rv /bin/cpb /util/cpb` in this image (OLM's own
		# image has busybox's cp at /bin/cp too).
		ociimage -ref "okgoes.local/olm:$tag" -o "$dest" -user 65532:65532 -file "/bin/olm=$out/olm-bin/olm" \
			-file "/bin/catalog=$out/olm-bin/catalog" -file "/bin/cpb=$out/olm-bin/cpb" \
			-file /bin/busybox -link /bin/cp=busybox -dir /tmp=1777 -entrypoint /bin/olm
		;;
	scorecard-test)
		"$root/hack/tools/operator-sdk/build.sh" scorecard-test "$root/bin/scorecard-test"
		ociimage -ref "quay.io/operator-framework/scorecard-test:v1.42.3" -o "$dest" -user 1001 \
			-file "/usr/local/bin/scorecard-test=$root/bin/scorecard-test" -dir /tmp=1777 \
			-env PATH=/usr/local/bin:/usr/bin:/bin -env HOME=/tmp -entrypoint /usr/local/bin/scorecard-test
		;;
	scorecard-untar)
		need_debs busybox-static
		# shellcheck disable=SC2046
		ociimage -ref "okgoes.local/scorecard-untar:$tag" -o "$dest" -user 1001 -file /bin/busybox $(busybox_links) \
			-dir /tmp=1777 -env PATH=/bin -env HOME=/tmp
		;;
	opm)
		"$root/hack/tools/opm/build.sh"
		# shellcheck disable=SC2046 # one flag per word
		need_debs busybox-static
		# shellcheck disable=SC2046 # one flag per word
		ociimage -ref "okgoes.local/opm:$tag" -o "$dest" -user 65532:65532 $(closure "$root/bin/opm") \
			-file "/bin/opm=$root/bin/opm" -file /bin/busybox -link /bin/sh=busybox -dir /tmp=1777 -dir /catalogs \
			-dir /configs -label operators.operatorframework.io.index.configs.v1=/configs -entrypoint /bin/opm
		;;
	catalog)
		# The index image of make catalog-build: catalog/ (the file-based catalog make catalog
		# renders from releases/) under /configs, served by opm as upstream's index images are
		# (operator-sdk's catalog-build: FROM opm, ADD catalog /configs, label, serve /configs).
		"$root/hack/tools/opm/build.sh"
		need_debs busybox-static
		local -a files=()
		local f dir=${CATALOG_DIR:-$root/catalog}
		while IFS= read -r f; do
			files+=(-file "/configs/${f#"$dir"/}=$f")
		done < <(find "$dir" -type f | sort)
		[ ${#files[@]} -gt 0 ] || { echo "images: no catalog in $dir (make catalog)" >&2; return 1; }
		# shellcheck disable=SC2046 # one flag per word
		ociimage -ref "${CATALOG_IMG:?CATALOG_IMG names the index image}" -o "$dest" -user 65532:65532 \
			$(closure "$root/bin/opm") -file "/bin/opm=$root/bin/opm" -file /bin/busybox -link /bin/sh=busybox \
			-dir /tmp=1777 "${files[@]}" -label operators.operatorframework.io.index.configs.v1=/configs \
			-entrypoint /bin/opm -entrypoint serve -entrypoint /configs -entrypoint --cache-dir=/tmp/cache
		;;
	run-bundle-init)
		need_debs busybox-static
		# shellcheck disable=SC2046
		ociimage -ref "registry.access.redhat.com/ubi9/ubi:9.8" -o "$dest" -file /bin/busybox $(busybox_links) \
			-link /bin/gzip=busybox -dir /tmp=1777 -env PATH=/bin
		;;
	scorecard)
		scorecard_images
		return 0
		;;
	csi)
		csi_images
		return 0
		;;
	releases)
		release_images
		return 0
		;;
	bundles)
		bundle_images
		return 0
		;;
	digests)
		release_images
		bundle_images
		write_digests
		return 0
		;;
	*) echo "images: unknown image $name" >&2; return 2 ;;
	esac
	echo "images: built $name ($(du -h "$dest" | cut -f1)) in $((SECONDS - start))s" >&2
}

# RELEASE_REFS names the commit each release's manager is built from (add <version>=<commit> when
# cutting a release: make release builds and pins it): the commit whose RBAC
# markers produced that release's CSV (test/upgrade builds 0.1.0 and 0.3.0 from the same commits).
# Running a newer manager under an older release's CSV is not what users get, and it fails as soon
# as the manager needs a permission the old CSV lacks (its caches never sync).
RELEASE_REFS=${RELEASE_REFS:-0.1.0=682e361 0.2.0=bc21237 0.3.0=17c8836 0.4.0=df01528}

# release_build is how a release's manager is built: reproducibly, so that anyone building the
# release commit with the same Go toolchain gets the same bytes and the image the same digest
# (the digest releases/digests pins): no build paths (-trimpath: the sources are in a temporary
# directory), no VCS stamp, no cgo, no GOFLAGS from the environment. The archive itself is
# reproducible (ociimage: fixed mtimes and owners, sorted entries).
release_build() {
	local src=$1 bin=$2 pkg=${3:-.}
	(cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOFLAGS= go build -trimpath -buildvcs=false -o "$bin" "$pkg")
}
release_recipe() { echo "trimpath,buildvcs=false,$(go env GOVERSION)"; }

# release_images writes operator-v<version>.tar for every release the OLM suite installs, each
# built once from its release commit (release_build) and rebuilt only when the commit or the
# recipe changes; operator-v<version>.ref holds the image's reference by digest.
release_images() {
	local start=$SECONDS pair v ref dest src stamp line
	for pair in $RELEASE_REFS; do
		v=${pair%%=*} ref=${pair#*=} dest=$out/operator-v$v.tar
		stamp="$ref $(release_recipe)"
		[ -f "$dest" ] && [ -f "$out/operator-v$v.ref" ] && [ -f "$out/operator-v$v.ref-commit" ] &&
			[ "$(cat "$out/operator-v$v.ref-commit")" = "$stamp" ] && continue
		if ! git -C "$root" cat-file -e "$ref^{commit}" 2>/dev/null; then
			git -C "$root" fetch --quiet --unshallow --tags || git -C "$root" fetch --quiet --tags
		fi
		src=$(mktemp -d)
		git -C "$root" archive "$ref" | tar -x -C "$src"
		release_build "$src" "$out/manager-v$v"
		# From 0.5.0 the mover Jobs run /mover (cmd/mover) of the operator image (RELATED_IMAGE_MOVER),
		# as the Dockerfile lays it out; before, they ran /manager mover, and the images of those
		# releases (and so their digests) hold /manager alone.
		local -a files=(-file "/manager=$out/manager-v$v")
		if [ -d "$src/cmd/mover" ]; then
			release_build "$src" "$out/mover-v$v" ./cmd/mover
			files+=(-file "/mover=$out/mover-v$v")
		fi
		rm -rf "$src"
		line=$(ociimage -ref "$RELEASE_IMAGE_BASE:v$v" -o "$dest" -user 65532:65532 \
			"${files[@]}" -dir /tmp=1777 -entrypoint /manager)
		echo "$line"
		echo "$RELEASE_IMAGE_BASE@${line##* }" >"$out/operator-v$v.ref"
		echo "$stamp" >"$out/operator-v$v.ref-commit"
	done
	echo "images: built the release images in $((SECONDS - start))s" >&2
}

RELEASE_IMAGE_BASE=${RELEASE_IMAGE_BASE:-quay.io/okgoes/okgoes-operator}

# bundle_images writes bundle-v<version>.tar and .ref for every release in releases/: the files
# and labels of bundle.Dockerfile (the labels are the bundle's metadata/annotations.yaml).
bundle_images() {
	local start=$SECONDS dir v f key value line
	for dir in "$root"/releases/*.*.*/; do
		dir=${dir%/}
		v=${dir##*/}
		local -a args=()
		while read -r key value; do
			[ -n "$value" ] && args+=(-label "${key%:}=$value")
		done < <(sed -n 's/^  \([a-z0-9.]*:\) \(.*\)$/\1 \2/p' "$dir/metadata/annotations.yaml")
		[ ${#args[@]} -gt 0 ] || { echo "images: no annotations in $dir/metadata/annotations.yaml" >&2; return 1; }
		while IFS= read -r f; do
			args+=(-file "/${f#"$dir"/}=$f")
		done < <(find "$dir/manifests" "$dir/metadata" "$dir/tests" -type f | sort)
		# ociimage prints "<ref> <manifest digest>". (Not tee /dev/stderr: when stderr is a file,
		# opening /dev/stderr again truncates it.)
		line=$(ociimage -ref "$BUNDLE_IMAGE_BASE:v$v" -o "$out/bundle-v$v.tar" "${args[@]}")
		echo "$line"
		echo "$BUNDLE_IMAGE_BASE@${line##* }" >"$out/bundle-v$v.ref"
	done
	echo "images: built the bundle images in $((SECONDS - start))s" >&2
}

# write_digests writes digests.yaml (make release-digests copies it to releases/digests.yaml) from
# the .ref files of the release and bundle images: every release's images by digest, and the Go
# toolchain the managers were built with.
write_digests() {
	local dir v
	{
		echo "# The images of every release by digest, as hack/images/build.sh builds them: the bundle image"
		echo "# from releases/<version>/, the manager image from the release commit (RELEASE_REFS) with the"
		echo "# toolchain below. make catalog pins them in catalog/; make release-digests rewrites this file."
		echo "toolchain: $(go env GOVERSION)"
		echo "releases:"
		for dir in "$root"/releases/*.*.*/; do
			dir=${dir%/}
			v=${dir##*/}
			[ -f "$out/operator-v$v.ref" ] || { echo "images: no manager image of $v (RELEASE_REFS)" >&2; return 1; }
			echo "  $v:"
			echo "    bundle: $(cat "$out/bundle-v$v.ref")"
			echo "    manager: $(cat "$out/operator-v$v.ref")"
		done
	} >"$out/digests.yaml"
	echo "images: wrote $out/digests.yaml" >&2
}

# csi_images writes the images of the CSI stack (hack/csi) that are missing or older than this script.
csi_images() {
	local start=$SECONDS bin=$root/bin/csi built=0 name ref dest
	"$root/hack/tools/csi/build.sh" "$bin"
	for name in hostpathplugin:v1.18.0 csi-provisioner:v6.3.0 csi-node-driver-registrar:v2.17.0 \
		csi-snapshotter:v8.6.0 snapshot-controller:v8.6.0; do
		ref=registry.k8s.io/sig-storage/$name
		name=${name%:*}
		dest=$out/csi-${name#csi-}.tar
		if [ -f "$dest" ] && [ "$dest" -nt "$0" ] && [ "$dest" -nt "$bin/$name" ]; then continue; fi
		if [ "$name" = hostpathplugin ]; then
			need_debs busybox-static
			# shellcheck disable=SC2046 # one flag per word
			ociimage -ref "$ref" -o "$dest" -file "/$name=$bin/$name" -file /bin/busybox \
				$(busybox_links) -link /bin/gzip=busybox -link /bin/mount=busybox -link /bin/umount=busybox \
				-dir /tmp=1777 -env PATH=/bin -entrypoint "/$name" >/dev/null
		else
			ociimage -ref "$ref" -o "$dest" -file "/$name=$bin/$name" -entrypoint "/$name" >/dev/null
		fi
		built=$((built + 1))
	done
	[ $built -eq 0 ] || echo "images: built $built CSI images in $((SECONDS - start))s" >&2
}

BUNDLE_IMAGE_BASE=${BUNDLE_IMAGE_BASE:-quay.io/okgoes/okgoes-operator-bundle}

# scorecard_images writes scorecard-v<version>.tar for every scorecard test image the scorecard
# configurations of bundle/ and releases/ name (all the same binary, built from scorecard/).
scorecard_images() {
	local start=$SECONDS ref refs
	refs=$(sed -n 's/^ *image: \(.*-scorecard:v.*\)$/\1/p' "$root"/bundle/tests/scorecard/config.yaml \
		"$root"/releases/*/tests/scorecard/config.yaml | sort -u)
	[ -n "$refs" ] || { echo "images: no scorecard test image in the scorecard configurations" >&2; return 1; }
	(cd "$root/scorecard" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/okgoes-scorecard" ./cmd/okgoes-scorecard)
	for ref in $refs; do
		ociimage -ref "$ref" -o "$out/scorecard-${ref##*:}.tar" -user 65532:65532 \
			-file "/usr/local/bin/okgoes-scorecard=$out/okgoes-scorecard" -entrypoint /usr/local/bin/okgoes-scorecard
	done
	echo "images: built the scorecard images in $((SECONDS - start))s" >&2
}

if [ $# -eq 0 ]; then
	set -- pause operator redis minio tools prometheus csi
fi
for name in "$@"; do
	build "$name"
done
