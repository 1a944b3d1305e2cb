#!/usr/bin/env bash
# Installs the named Debian packages that are not installed yet (apt-get; this project's machines
# reach Debian's mirror), with sudo when not root. Used by make test (hack/envtest-assets.sh:
# redis-server), the local cluster (containerd, runc, ...) and the e2e images (redis, busybox).
#
#   hack/debs.sh PACKAGE...
#
# apt starts no service it installs: where the machine has no policy-rc.d, one that says no is put
# in place for the install only (the tests and the local cluster run their own redis-server and
# containerd).
set -euo pipefail

missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "debs: installing Debian packages: ${missing[*]}" >&2
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update -qq
policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
	$sudo chmod +x $policy
fi
rc=0
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
[ -z "$policy" ] || $sudo rm -f "$policy"
exit $rc
