#!/usr/bin/env bash
# A real single-node Kubernetes v1.37.2 on this machine, built from source, for the e2e suite
# (`make cluster-up`, `make test-e2e`, `make cluster-down`).
#
#   hack/local-cluster.sh build    build the binaries (bin/k8s) and images (bin/images) that are missing
#   hack/local-cluster.sh up       build, then start etcd, kube-apiserver, kube-controller-manager,
#                                  kube-scheduler, containerd, kubelet and kube-proxy; wait for a Ready node
#   hack/local-cluster.sh down     stop everything and remove all that `up` made
#   hack/local-cluster.sh status   what runs, and the node
#   hack/local-cluster.sh env      the KUBECONFIG (and REGISTRY) line to eval
#   hack/local-cluster.sh push     push the OLM suite's images (bundles, releases, the opm index
#                                  image) from bin/images into the cluster's registry
#   hack/local-cluster.sh e2e      the e2e suite (test/e2e): on the running local cluster (images
#                                  rebuilt and imported again), or on one it brings up and tears
#                                  down afterwards (E2E_KEEP_CLUSTER=1 keeps it); with
#                                  E2E_CLUSTER=existing on the cluster of $KUBECONFIG instead;
#                                  E2E_DR=1 (make test-e2e) runs the disaster-recovery story
#                                  (dr) after a suite that passed, on its cluster, and tears it down;
#                                  E2E_PREBUILD_OLM=1 (make test-e2e) builds the OLM suite's
#                                  images beside the suite, at nice 19
#   hack/local-cluster.sh dr       the disaster-recovery story (TestDisasterRecovery in test/e2e):
#                                  back up into a MinIO outside the cluster, destroy the cluster,
#                                  bring up a new one, discover and restore; on the running cluster
#                                  first, if any; leaves no cluster behind
#   hack/local-cluster.sh olm      the OLM suite (TestOLM in test/e2e): OLM v0.31.0 installs the
#                                  operator from a catalog of releases/ and upgrades it; same
#                                  cluster rules as e2e, on a cluster without the operator;
#                                  bin/operator-sdk builds beside its first steps when missing
#
# Parts: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl from
# the wrapper module hack/tools/k8s, etcd from hack/tools/etcd, all through hack/envtest-assets.sh's
# build rules (same flags, so the Go build cache is shared with the envtest binaries); Debian's
# containerd 1.6, runc and CNI plugins (installed when absent); images imported from the OCI archives
# of hack/images/build.sh (pause, operator, redis, minio, tools, csi); an OCI registry (CNCF
# distribution, hack/tools/registry) at https://$NODE_IP:5000 with a certificate of the cluster CA,
# which containerd trusts (CRI registry config_path, hosts.toml) and pods reach; the OLM suite
# pushes the bundle, release and index images into it (`push`).
#
# Storage: the CSI hostpath driver v1.18.0 with its provisioner, snapshotter and registrar sidecars,
# the snapshot CRDs and snapshot-controller of external-snapshotter v8.6.0, a default StorageClass
# (csi-hostpath-sc), a default VolumeSnapshotClass (csi-hostpath-snapclass) and, with group snapshots
# turned on, a VolumeGroupSnapshotClass (csi-hostpath-groupsnapclass): built from
# ../shared/third_party by hack/tools/csi/build.sh and deployed from upstream's manifests through
# hack/csi (kustomize). Volumes live under $STATE/csi-hostpath-data and go with `down`.
# CLUSTER_CSI=0 leaves the CSI stack out (`olm` does, for a cluster of its own).
#
# Network: nothing listens on the machine's own address. The API server and the kubelet listen on
# $NODE_IP, the address of a veth interface this script creates; etcd, the other components' ports
# and the probes are on 127.0.0.1. Pods live on a bridge this script creates ($POD_CIDR); a filter
# chain drops any forwarded packet between the bridge and another interface, so pods reach each other,
# Services and the API server, and nothing outside. Pods get an empty resolv.conf (no cluster DNS):
# the e2e suite addresses Services by their ClusterIP.
#
# `down` removes, in order: the processes (by pid file), every container and shim of this containerd,
# the mounts under the state directories, the pod network namespaces, the bridge and the veth
# interface, the KUBE-*, CNI-* and OKGOES-* iptables chains, the kubepods cgroups, the sysctls the
# cluster changed (restored to the values recorded by `up`), and the state directories.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_BIN=${K8S_BIN:-$root/bin/k8s}
IMAGES=${IMAGES:-$root/bin/images}
STATE=${CLUSTER_STATE:-/var/lib/okgoes-cluster}
RUN=${CLUSTER_RUN:-/run/okgoes-cluster}
NODE_NAME=okgoes-node
NODE_IP=${NODE_IP:-10.250.250.1}
POD_CIDR=${POD_CIDR:-10.244.77.0/24}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.77.0/24}
API_SERVICE_IP=${API_SERVICE_IP:-10.96.77.1}
NODE_IF=okgoes-api
BRIDGE_IF=okgoes-br0
FILTER_CHAIN=OKGOES-ISOLATE
ETCD_PORT=12379
SOCK=$RUN/containerd.sock
REGISTRY_PORT=5000
REGISTRY=$NODE_IP:$REGISTRY_PORT
PKI=$STATE/pki
CM_PORT=10257
SCHED_PORT=10259
# Sysctls the cluster changes (ip_forward here; the kubelet sets the others); `down` restores them.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom
	kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# The caller's cluster, for `e2e` with E2E_CLUSTER=existing; every other command uses ours.
CALLER_KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}
export KUBECONFIG=$STATE/admin.kubeconfig

log() { echo "local-cluster: $*" >&2; }
die() {
	log "$*"
	exit 1
}
kubectl() { "$K8S_BIN/kubectl" "$@"; }

# ---------------------------------------------------------------------------------------- build

# need_debs installs the Debian packages missing (hack/debs.sh: apt starts no containerd service;
# we run our own).
need_debs() { "$root/hack/debs.sh" "$@"; }

# build_k8s builds the cluster binaries into bin/k8s: the same rules and ldflags as the envtest
# binaries (hack/envtest-assets.sh), so one Go build cache serves both.
build_k8s() {
	local missing=() name
	for name in etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy; do
		[ -x "$K8S_BIN/$name" ] || missing+=("$name")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	# envtest-assets.sh builds etcd, kube-apiserver, kubectl, kube-controller-manager and
	# kube-scheduler; kubelet and kube-proxy get the same version ldflags here.
	local via=() own=()
	for name in "${missing[@]}"; do
		case $name in
		kubelet | kube-proxy) own+=("$name") ;;
		*) via+=("$name") ;;
		esac
	done
	[ ${#via[@]} -eq 0 ] || K8S_ASSETS_DIR=$K8S_BIN "$root/hack/envtest-assets.sh" "${via[@]}"
	for name in "${own[@]}"; do
		local start=$SECONDS
		log "building $name into $K8S_BIN (first time only; about a minute warm, several cold)"
		(cd "$root/hack/tools/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$(version_ldflags v1.37.2)" \
			-o "$K8S_BIN/$name.tmp" "k8s.io/kubernetes/cmd/$name")
		mv "$K8S_BIN/$name.tmp" "$K8S_BIN/$name"
		log "built $name in $((SECONDS - start))s"
	done
}

# version_ldflags must stay identical to hack/envtest-assets.sh's.
version_ldflags() {
	local v=$1 major minor
	major=$(echo "${v#v}" | cut -d. -f1)
	minor=$(echo "${v#v}" | cut -d. -f2)
	local flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

cmd_build() {
	need_debs containerd runc containernetworking-plugins iptables openssl curl
	build_k8s
	"$root/hack/tools/registry/build.sh"
	if [ "${CLUSTER_CSI:-1}" = 1 ]; then
		"$root/hack/images/build.sh"
	else
		# No CSI stack: its five images (and their binaries, 18 min cold) are not needed.
		"$root/hack/images/build.sh" pause operator redis minio tools prometheus
	fi
	[ -x "$root/bin/kustomize" ] || make -C "$root" kustomize >/dev/null # deploy_csi renders hack/csi with it
}

# ------------------------------------------------------------------------------------------ pki

# cert NAME CN O [SANS]: a key and a certificate signed by the cluster CA.
cert() {
	local name=$1 cn=$2 org=$3 sans=${4:-}
	local subj="/CN=$cn"
	[ -z "$org" ] || subj="/O=$org$subj"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[ -z "$sans" ] || echo "subjectAltName=$sans"
	} >"$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 30 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig NAME CERT: a kubeconfig for the client certificate CERT.
kubeconfig() {
	local name=$1 crt=$2
	cat >"$STATE/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: okgoes-local
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $crt
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$crt.crt")
    client-key-data: $(base64 -w0 <"$PKI/$crt.key")
contexts:
- name: okgoes-local
  context: {cluster: okgoes-local, user: $crt}
current-context: okgoes-local
EOF
}

make_pki() {
	mkdir -p "$PKI"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=okgoes-local-ca" -days 30 -out "$PKI/ca.crt" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin okgoes-admin system:masters
	cert controller-manager system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kubelet "system:node:$NODE_NAME" system:nodes
	cert kubelet-serving "$NODE_NAME" "" "IP:$NODE_IP,DNS:$NODE_NAME"
	cert kube-proxy system:kube-proxy ""
	cert registry okgoes-registry "" "IP:$NODE_IP"
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
	openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	chmod 600 "$PKI"/*.key
	kubeconfig admin admin
	kubeconfig controller-manager controller-manager
	kubeconfig scheduler scheduler
	kubeconfig kubelet kubelet
	kubeconfig kube-proxy kube-proxy
}

# -------------------------------------------------------------------------------------- processes

# start NAME CMD...: run CMD in its own session, log to logs/NAME.log, pid in pids/NAME.pid. CMD
# inherits no descriptor but its standard three: run as `flock LOCK hack/local-cluster.sh up`, the
# daemons would otherwise hold LOCK (flock(1) passes its descriptor on) until `down`, and every
# other `flock LOCK ...` would wait for the cluster to stop.
start() {
	local name=$1
	shift
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
		done
		exec setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null
	) &
	echo $! >"$STATE/pids/$name.pid"
	# Until the subshell has exec'd, pid_of does not know it as NAME: a wait_for right after
	# would take it for exited (seen on the loaded machine: "registry exited", empty log).
	local i=0
	while [ $i -lt 100 ] && ! pid_of "$name" >/dev/null; do
		sleep 0.05
		i=$((i + 1))
	done
}

# pid_of NAME prints the pid recorded for NAME if that process is still ours: alive and running
# NAME (argv[0], or argv[1] of the setsid it starts as). After a restart of the machine the state
# directory survives but its pids may belong to other processes, which must never be signalled.
pid_of() {
	local pid arg i=0
	pid=$(cat "$STATE/pids/$1.pid" 2>/dev/null) || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	while IFS= read -r -d '' arg && [ $i -lt 2 ]; do
		if [ "${arg##*/}" = "$1" ]; then
			echo "$pid"
			return 0
		fi
		i=$((i + 1))
	done <"/proc/$pid/cmdline"
	return 1
}

running() {
	pid_of "$1" >/dev/null
}

# COMPONENTS are the processes of the cluster, in start order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler registry containerd kubelet kube-proxy)

# any_running: is any process of the cluster recorded in the state directory still running?
any_running() {
	local name
	for name in "${COMPONENTS[@]}"; do
		running "$name" && return 0
	done
	return 1
}

# wait_for WHAT SECONDS PROCESS CMD...: poll CMD until it succeeds; fail with PROCESS's log tail when
# it does not within SECONDS or PROCESS exits.
wait_for() {
	local what=$1 limit=$2 proc=$3 deadline=$((SECONDS + $2))
	shift 3
	until "$@" >/dev/null 2>&1; do
		if [ -n "$proc" ] && ! running "$proc"; then
			tail -n 30 "$STATE/logs/$proc.log" >&2 || true
			die "$proc exited while waiting for $what (log: $STATE/logs/$proc.log)"
		fi
		if [ $SECONDS -ge $deadline ]; then
			[ -z "$proc" ] || tail -n 30 "$STATE/logs/$proc.log" >&2 || true
			die "$what not there after ${limit}s"
		fi
		sleep 0.5
	done
}

node_ready() {
	[ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# ------------------------------------------------------------------------------------------- up

setup_network() {
	# A veth pair whose two ends stay here: this kernel has no dummy interfaces, and an address on
	# a link that is up is all the API server and the kubelet need.
	ip link add "$NODE_IF" type veth peer name "$NODE_IF-peer"
	ip addr add "$NODE_IP/32" dev "$NODE_IF"
	ip link set "$NODE_IF-peer" up
	ip link set "$NODE_IF" up
	local s
	for s in "${SYSCTLS[@]}"; do
		echo "$s=$(sysctl -n "$s")"
	done >"$STATE/sysctl.orig"
	sysctl -qw net.ipv4.ip_forward=1
	# Bridged pod-to-pod traffic must pass iptables for Service DNAT replies (kube-proxy).
	sysctl -qw net.bridge.bridge-nf-call-iptables=1
	# Pods reach each other, Services and the node; nothing is forwarded to or from any other interface.
	iptables -N "$FILTER_CHAIN"
	iptables -A "$FILTER_CHAIN" -i "$BRIDGE_IF" -o "$BRIDGE_IF" -j RETURN
	iptables -A "$FILTER_CHAIN" -i "$BRIDGE_IF" -j DROP
	iptables -A "$FILTER_CHAIN" -o "$BRIDGE_IF" -j DROP
	iptables -I FORWARD 1 -j "$FILTER_CHAIN"
	mkdir -p "$STATE/cni/net.d"
	cat >"$STATE/cni/net.d/10-okgoes.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "okgoes",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE_IF",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

start_control_plane() {
	start etcd "$K8S_BIN/etcd" --name okgoes --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
		--initial-cluster okgoes=http://127.0.0.1:12380 --listen-metrics-urls "" --unsafe-no-fsync
	wait_for "etcd" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

	start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
		--service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP,Hostname \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--profiling=false
	wait_for "kube-apiserver /readyz" 90 kube-apiserver kubectl get --raw /readyz

	start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
		--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--use-service-account-credentials --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false
	start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" \
		--authentication-kubeconfig "$STATE/scheduler.kubeconfig" --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false
}

# start_registry runs the OCI registry (CNCF distribution) on $REGISTRY, the address of our veth
# interface: the node's containerd and the pods (whose traffic to the node never leaves the
# machine) reach it, nothing outside does. TLS with a certificate of the cluster CA: operator-sdk
# asks a registry for the index image over HTTPS whatever --use-http says (docs/testing.md).
start_registry() {
	mkdir -p "$STATE/registry"
	cat >"$STATE/registry.yml" <<EOF
version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: $STATE/registry}
  delete: {enabled: true}
http:
  addr: $REGISTRY
  secret: okgoes-local-registry
  tls: {certificate: $PKI/registry.crt, key: $PKI/registry.key}
EOF
	OTEL_TRACES_EXPORTER=none start registry "$root/bin/registry" serve "$STATE/registry.yml"
	wait_for "the registry" 30 registry curl -sf --cacert "$PKI/ca.crt" "https://$REGISTRY/v2/"
}

start_containerd() {
	mkdir -p "$RUN"
	# restrict_oom_score_adj: this VM's capability bounding set lacks CAP_SYS_RESOURCE, and without
	# it runc fails every sandbox ("can't get final child's PID from pipe: EOF").
	cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "okgoes.local/pause:e2e"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/certs.d"
EOF
	# Pulls from our registry trust the cluster CA (hosts.toml of containerd's CRI); okgoes.local,
	# the name of the locally built images, is served by it too: a pod that pulls one Always (OLM's
	# bundle unpack Job of a bundle named by tag runs opm that way) gets it from there.
	local host
	for host in "$REGISTRY" okgoes.local; do
		mkdir -p "$STATE/certs.d/$host"
		cat >"$STATE/certs.d/$host/hosts.toml" <<EOF
server = "https://$REGISTRY"
[host."https://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$PKI/ca.crt"
EOF
	done
	start containerd containerd --config "$STATE/containerd.toml"
	wait_for "containerd" 30 containerd ctr -a "$SOCK" version
	load_images
}

# load_images imports the image archives into the k8s.io namespace of our containerd, where the
# kubelet finds them (pods use imagePullPolicy IfNotPresent or Never: there is no registry). Each
# is also named by its digest (repo@sha256:...), as a pull by digest names it: OLM's bundle unpack
# Jobs pull bundles pinned by digest with IfNotPresent (by tag they would always pull).
load_images() {
	local img name
	for img in "$IMAGES"/*.tar; do
		# ctr names digest images <base-name>@sha256:...: the base name is the image's repository.
		name=$(tar -xOf "$img" index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
		ctr -a "$SOCK" -n k8s.io images import --base-name "${name%:*}" --digests "$img" >>"$STATE/logs/images.log" 2>&1 ||
			die "import $img failed: $(tail -n 5 "$STATE/logs/images.log")"
	done
}

start_node() {
	: >"$STATE/resolv.conf" # no cluster DNS, and no use of the machine's resolver from pods
	cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$SOCK
# cgroup v1 on this machine: allowed explicitly, with the cgroupfs driver (no systemd).
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# The images are imported, not pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# No eviction for disk, as kind configures its nodes: the node is a test fixture on a developer's
# or CI's disk, where 1 % of a large, thinly provisioned disk (the default thresholds) can be more
# than is free while the builds' caches grow, and a disk-pressure taint keeps every new pod off
# the node (no scheduler fits it, the tests just time out).
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
resolvConf: $STATE/resolv.conf
serializeImagePulls: false
rotateCertificates: false
EOF
	# CSI plugins mount volumes into pods through the kubelet's directory with Bidirectional
	# propagation, which needs a shared mount: this machine's / is private.
	mkdir -p "$STATE/kubelet"
	mount --bind "$STATE/kubelet" "$STATE/kubelet"
	mount --make-rshared "$STATE/kubelet"
	start kubelet "$K8S_BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
		--root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"

	cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0}
EOF
	start kube-proxy "$K8S_BIN/kube-proxy" --config "$STATE/kube-proxy.yaml"
	wait_for "node $NODE_NAME Ready" 120 kubelet node_ready
	wait_for "kube-proxy healthz" 60 kube-proxy curl -sf http://127.0.0.1:10256/healthz
	# Pods need their namespace's default ServiceAccount (made by kube-controller-manager).
	wait_for "the default ServiceAccount" 60 kube-controller-manager kubectl -n default get serviceaccount default
}

# deploy_csi installs the CSI stack (hack/csi): upstream's manifests with the kubelet's root
# directory and the driver's data directory moved into $STATE, then waits until the driver is
# registered on the node and the snapshot controller runs.
deploy_csi() {
	local start_time=$SECONDS
	"$root/bin/kustomize" build --load-restrictor LoadRestrictionsNone "$root/hack/csi" |
		sed -e "s#/var/lib/kubelet/#$STATE/kubelet/#g" -e "s#/var/lib/csi-hostpath-data/#$STATE/csi-hostpath-data/#g" \
			>"$STATE/csi.yaml"
	# CRDs first: the VolumeSnapshotClass in the same file needs them established.
	kubectl apply --server-side -k "$root/bin/csi/manifests/external-snapshotter/client/config/crd" >"$STATE/logs/csi-apply.log"
	wait_for "the snapshot CRDs" 60 kube-apiserver kubectl wait --for condition=established --timeout 5s \
		crd/volumesnapshotclasses.snapshot.storage.k8s.io crd/volumesnapshots.snapshot.storage.k8s.io \
		crd/volumesnapshotcontents.snapshot.storage.k8s.io crd/volumegroupsnapshotclasses.groupsnapshot.storage.k8s.io \
		crd/volumegroupsnapshots.groupsnapshot.storage.k8s.io crd/volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io
	kubectl apply --server-side -f "$STATE/csi.yaml" >>"$STATE/logs/csi-apply.log"
	wait_for "the hostpath CSI driver registered on the node" 120 kubelet csi_registered
	kubectl -n kube-system rollout status deployment/snapshot-controller --timeout 120s >/dev/null
	log "CSI stack (hostpath driver, snapshot-controller) ready in $((SECONDS - start_time))s"
}

csi_registered() {
	kubectl get csinode "$NODE_NAME" -o jsonpath='{.spec.drivers[*].name}' | grep -qw hostpath.csi.k8s.io
}

# push_images pushes the images the OLM suite's operator-sdk story pulls through the registry: every
# release's bundle image and manager image under $REGISTRY/okgoes/, the opm image as the index
# image (`operator-sdk run bundle --index-image`), and okgoes.local/{opm,olm}:e2e as $REGISTRY/{opm,olm}:e2e,
# where containerd looks for okgoes.local images it has to pull.
push_images() {
	running registry || die "the registry is not running (hack/local-cluster.sh up)"
	"$root/hack/tools/registry/build.sh" ocipush
	local start_time=$SECONDS img v
	local -a pairs=("$IMAGES/opm.tar=$REGISTRY/okgoes/opm:e2e" "$IMAGES/opm.tar=$REGISTRY/opm:e2e" "$IMAGES/olm.tar=$REGISTRY/olm:e2e")
	for img in "$IMAGES"/bundle-v*.tar; do
		v=${img##*/bundle-}
		pairs+=("$img=$REGISTRY/okgoes/okgoes-operator-bundle:${v%.tar}")
	done
	for img in "$IMAGES"/operator-v*.tar; do
		v=${img##*/operator-}
		pairs+=("$img=$REGISTRY/okgoes/okgoes-operator:${v%.tar}")
	done
	"$root/bin/ocipush" -ca "$PKI/ca.crt" "${pairs[@]}" >&2
	log "pushed ${#pairs[@]} images to $REGISTRY in $((SECONDS - start_time))s"
}

up_failed() {
	local logs=/tmp/okgoes-cluster-logs
	log "bring-up failed; tearing down (component logs kept in $logs)"
	rm -rf "$logs"
	cp -r "$STATE/logs" "$logs" 2>/dev/null || true
	cmd_down
}

cmd_up() {
	[ "$(id -u)" = 0 ] || die "up needs root (network, mounts, containerd)"
	if [ -e "$STATE" ]; then
		any_running && die "$STATE exists and its cluster is running (use it, or run: $0 down)"
		# A run that was killed, or a machine restarted, left the state of a cluster none of
		# whose processes runs: clear it (mounts, network, cgroups) and start afresh.
		log "$STATE holds a cluster that is not running (left by a killed run or a restart): tearing it down first"
		cmd_down
	fi
	cmd_build
	local start_time=$SECONDS
	mkdir -p "$STATE/logs" "$STATE/pids" "$RUN"
	ls /var/run/netns 2>/dev/null >"$STATE/netns.before" || touch "$STATE/remove-netns-dir"
	[ -e /var/lib/cni ] || touch "$STATE/remove-var-lib-cni"
	# A failed bring-up leaves nothing behind but its logs.
	trap up_failed EXIT
	setup_network
	make_pki
	start_control_plane
	start_registry
	start_containerd
	start_node
	if [ "${CLUSTER_CSI:-1}" = 1 ]; then
		deploy_csi
	else
		log "CLUSTER_CSI=0: no CSI driver, snapshot CRDs or snapshot-controller"
	fi
	trap - EXIT
	log "up in $((SECONDS - start_time))s: node $NODE_NAME Ready; export KUBECONFIG=$KUBECONFIG"
}

# ----------------------------------------------------------------------------------------- down

stop_process() {
	local name=$1 pid
	if pid=$(pid_of "$name"); then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$STATE/pids/$name.pid"
}

# remove_containers kills every task of our containerd and deletes the containers; the shims of our
# containerd (found by its socket in their command line) are killed by pid.
remove_containers() {
	if [ -S "$SOCK" ] && running containerd; then
		local id
		for id in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		sleep 1
		for id in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
			ctr -a "$SOCK" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
		done
	fi
	stop_process containerd
	local p
	for p in /proc/[0-9]*; do
		if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $SOCK "; then
			kill -KILL "${p#/proc/}" 2>/dev/null || true
		fi
	done
	# Container processes that outlived their shim (none expected) are in the kubepods cgroups.
	find /sys/fs/cgroup/*/kubepods -name cgroup.procs -print0 2>/dev/null | while IFS= read -r -d '' f; do
		xargs -r kill -KILL <"$f" 2>/dev/null || true
	done
}

unmount_under() {
	local dir
	for dir in "$@"; do
		# Deepest first; lazily, as a last resort for a busy mount.
		awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
		done
	done
}

remove_netns() {
	local p ns
	for p in /var/run/netns/cni-*; do
		[ -e "$p" ] || continue
		ns=${p##*/}
		if [ -f "$STATE/netns.before" ] && grep -qx "$ns" "$STATE/netns.before"; then
			continue
		fi
		umount "/var/run/netns/$ns" 2>/dev/null || true
		rm -f "/var/run/netns/$ns"
	done
}

# remove_chains deletes the chains named like ours (KUBE-*, CNI-*, OKGOES-*) from every table,
# first the jumps to them from the built-in chains.
remove_chains() {
	local cmd table chain rule
	for cmd in iptables ip6tables; do
		command -v "$cmd" >/dev/null || continue
		for table in filter nat mangle raw; do
			"$cmd" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-|OKGOES-)' |
				grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ' | while read -r rule; do
				# The saved rule is shell-quoted (comments with spaces): eval reads it back.
				eval "$cmd -t $table ${rule/-A/-D}" 2>/dev/null || true
			done
			for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-|OKGOES-)/ {print $2}'); do
				"$cmd" -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-|OKGOES-)/ {print $2}'); do
				"$cmd" -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
}

remove_cgroups() {
	local d
	for d in /sys/fs/cgroup/*/kubepods; do
		[ -d "$d" ] || continue
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove all of $d"
	done
}

restore_sysctls() {
	[ -f "$STATE/sysctl.orig" ] || return 0
	local line
	while read -r line; do
		sysctl -qw "$line" 2>/dev/null || log "could not restore $line"
	done <"$STATE/sysctl.orig"
}

cmd_down() {
	trap - EXIT
	set +e
	local start_time=$SECONDS name
	if [ ! -e "$STATE" ] && [ ! -e "$RUN" ]; then
		log "nothing to tear down"
		return 0
	fi
	for name in kube-proxy kubelet kube-scheduler kube-controller-manager; do
		stop_process "$name"
	done
	remove_containers
	stop_process kube-apiserver
	stop_process etcd
	stop_process registry
	stop_process minio # the disaster-recovery bucket (cmd_dr), when a run of it was cut short
	unmount_under "$STATE" "$RUN"
	remove_netns
	ip link del "$BRIDGE_IF" 2>/dev/null
	ip link del "$NODE_IF" 2>/dev/null
	remove_chains
	remove_cgroups
	restore_sysctls
	[ -f "$STATE/remove-var-lib-cni" ] && rm -rf /var/lib/cni
	[ -f "$STATE/remove-netns-dir" ] && rmdir /var/run/netns 2>/dev/null
	rm -rf "$STATE" "$RUN"
	set -e
	log "down in $((SECONDS - start_time))s"
}

cmd_status() {
	local name
	for name in "${COMPONENTS[@]}"; do
		if running "$name"; then echo "$name: running (pid $(pid_of "$name"))"; else echo "$name: not running"; fi
	done
	[ -f "$KUBECONFIG" ] && kubectl get nodes -o wide
}

# olm_suite_builds builds the images the OLM suite needs beyond the cluster: OLM and opm, the
# release, bundle and scorecard images (each only when missing or changed). operator-sdk is built
# beside the suite (sdk_build_beside).
olm_suite_builds() {
	"$root/hack/images/build.sh" olm opm releases bundles scorecard scorecard-test scorecard-untar redis-sample run-bundle-init
}

# sdk_build_beside builds bin/operator-sdk (only when missing or of another version) in the
# background at the lowest priority, while the OLM suite's first steps install OLM and upgrade the
# operator through its releases, which mostly wait (the CPU was about 55 % idle there). Its exit
# status goes to $E2E_OPERATOR_SDK_BUILD; the suite's first operator-sdk step waits for it
# (test/e2e/olm_sdk_test.go, sdkBinary). Cold, the build takes 4-5 minutes of the two cores.
sdk_build_beside() {
	export E2E_OPERATOR_SDK_BUILD=$root/bin/operator-sdk-build.status
	rm -f "$E2E_OPERATOR_SDK_BUILD"
	(
		renice -n 19 -p $BASHPID >/dev/null
		rc=0
		"$root/hack/tools/operator-sdk/build.sh" operator-sdk >"$root/bin/operator-sdk-build.log" 2>&1 || rc=$?
		echo $rc >"$E2E_OPERATOR_SDK_BUILD"
	) &
	sdk_build_pid=$!
}

# cmd_e2e runs a suite of test/e2e: "e2e" (the operator deployed with make deploy) or "olm" (the
# operator installed and upgraded by OLM, TestOLM). On the local cluster the images are the ones
# just built; E2E_IMG is the content-addressed operator tag (hack/images/build.sh), which `make
# deploy` puts in the manifests. The OLM suite needs a cluster without the operator: with no local
# cluster running it brings up its own, like the e2e suite.
cmd_e2e() {
	local suite=${1:-e2e} brought_up=0 rc=0 prebuild_pid= sdk_build_pid=
	local -a go_test=(go test -trimpath -tags e2e ./test/e2e/ -count=1 -v -timeout "${E2E_TIMEOUT:-30m}")
	if [ "$suite" = olm ]; then
		olm_suite_builds
		sdk_build_beside
		export E2E_OLM=1
		# The OLM suite takes no snapshot: its own cluster skips the CSI stack (45 s).
		export CLUSTER_CSI=${CLUSTER_CSI:-0}
		go_test+=(-run '^TestOLM$')
	else
		go_test+=(-skip '^TestOLM$')
		if [ -n "${E2E_RUN:-}" ]; then
			go_test+=(-run "$E2E_RUN")
		fi
	fi
	if [ "${E2E_CLUSTER:-local}" = local ]; then
		if running kube-apiserver && running kubelet; then
			log "using the running local cluster"
			cmd_build
			load_images
		else
			cmd_up
			brought_up=1
			if [ "${E2E_KEEP_CLUSTER:-0}" != 1 ]; then
				trap cmd_down EXIT
			fi
		fi
		E2E_IMG=$(cat "$IMAGES/operator.ref")
		export E2E_IMG
		if [ "$suite" = olm ]; then
			push_images
			export E2E_REGISTRY=$REGISTRY E2E_REGISTRY_CA=$PKI/ca.crt
		fi
	else
		export KUBECONFIG=$CALLER_KUBECONFIG
		log "using the cluster of KUBECONFIG=${KUBECONFIG} (images must be there already: see docs/testing.md)"
	fi
	if [ "$suite" = e2e ] && [ "${E2E_PREBUILD_OLM:-0}" = 1 ]; then
		# The e2e suite mostly waits (the CPU was 86-88 % idle during its sequential stories):
		# the OLM suite's builds run beside it, at the lowest priority, instead of after it.
		log "building the OLM suite's images beside the e2e suite (nice 19, log in bin/olm-prebuild.log)"
		(renice -n 19 -p $BASHPID >/dev/null && olm_suite_builds) >"$root/bin/olm-prebuild.log" 2>&1 &
		prebuild_pid=$!
	fi
	local start_time=$SECONDS
	(cd "$root" && CGO_ENABLED=0 "${go_test[@]}") || rc=$? # cgo off and -trimpath as in make test (GO_ENV): one build cache
	log "$suite suite: $((SECONDS - start_time))s (exit $rc)"
	if [ -n "$prebuild_pid" ]; then
		if wait "$prebuild_pid"; then
			log "the OLM suite's images were built beside the suite ($((SECONDS - start_time))s after it started)"
		else
			log "building the OLM suite's images beside the suite failed (bin/olm-prebuild.log): the OLM suite builds them again"
		fi
	fi
	if [ -n "$sdk_build_pid" ]; then
		wait "$sdk_build_pid" || true # its status is in $E2E_OPERATOR_SDK_BUILD, its log beside it
		local built
		built=$(tail -n 1 "$root/bin/operator-sdk-build.log" 2>/dev/null || true)
		log "operator-sdk beside the suite: ${built:-up to date} (exit $(cat "$E2E_OPERATOR_SDK_BUILD"))"
	fi
	if [ "$suite" = e2e ] && [ "${E2E_DR:-0}" = 1 ] && [ $rc = 0 ] && [ "${E2E_CLUSTER:-local}" = local ]; then
		# The disaster-recovery story backs up on this cluster, then destroys it (make test-e2e).
		trap - EXIT
		cmd_dr || rc=$?
		return $rc
	fi
	if [ $brought_up = 1 ] && [ "${E2E_KEEP_CLUSTER:-0}" != 1 ]; then
		trap - EXIT
		cmd_down
	fi
	return $rc
}

# ------------------------------------------------------------------------------ disaster recovery

# The bucket of the disaster-recovery story lives outside every cluster, as a real one does: a MinIO
# process (bin/minio) on the node's address, which pods reach like the API server; its data in
# DR_DIR, which `down` does not touch.
DR_PORT=${DR_PORT:-9100}

start_dr_minio() {
	MINIO_ROOT_USER=$E2E_DR_ACCESS_KEY MINIO_ROOT_PASSWORD=$E2E_DR_SECRET_KEY MINIO_BROWSER=off MINIO_UPDATE=off \
		start minio "$root/bin/minio" server "$DR_DIR/bucket" --quiet --address "$NODE_IP:$DR_PORT" --console-address 127.0.0.1:0
	wait_for "the disaster-recovery MinIO" 60 minio curl -sf "http://$NODE_IP:$DR_PORT/minio/health/ready"
}

# dr_phase PHASE runs one phase of TestDisasterRecovery (test/e2e/dr_test.go) on the running cluster.
dr_phase() {
	local start_time=$SECONDS rc=0
	(cd "$root" && CGO_ENABLED=0 E2E_DR_PHASE=$1 E2E_IMG=$(cat "$IMAGES/operator.ref") \
		go test -trimpath -tags e2e ./test/e2e/ -count=1 -v -timeout 20m -run '^TestDisasterRecovery$') || rc=$?
	log "disaster recovery, phase $1: $((SECONDS - start_time))s (exit $rc)"
	return $rc
}

# cmd_dr is the disaster-recovery story of issue 34: back up on one cluster, destroy it completely
# (`down`: every process, container, volume and the state directory), bring up a new one, then
# discover the backups in the bucket and restore one. It uses the running cluster for the first
# phase when there is one (make test-e2e: the e2e suite's), else brings one up; it leaves no
# cluster behind.
cmd_dr() {
	[ "$(id -u)" = 0 ] || die "dr needs root (it brings clusters up and down)"
	"$root/hack/envtest-assets.sh" minio # built when missing
	DR_DIR=$(mktemp -d /var/tmp/okgoes-dr.XXXXXX)
	export E2E_DR_STATE=$DR_DIR E2E_DR_S3=$NODE_IP:$DR_PORT
	E2E_DR_ACCESS_KEY=dr-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
	E2E_DR_SECRET_KEY=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export E2E_DR_ACCESS_KEY E2E_DR_SECRET_KEY
	trap 'stop_process minio; cmd_down; rm -rf "$DR_DIR"' EXIT
	if running kube-apiserver && running kubelet; then
		log "disaster recovery: phase backup on the running cluster"
	else
		cmd_up
	fi
	start_dr_minio
	dr_phase backup
	stop_process minio
	log "disaster recovery: destroying the cluster"
	cmd_down
	# The new cluster needs no CSI stack: the restore goes to a static volume.
	CLUSTER_CSI=0 cmd_up
	trap 'stop_process minio; cmd_down; rm -rf "$DR_DIR"' EXIT
	start_dr_minio
	dr_phase restore
	trap - EXIT
	stop_process minio
	cmd_down
	rm -rf "$DR_DIR"
}

case ${1:-} in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) printf 'export KUBECONFIG=%s REGISTRY=%s\n' "$KUBECONFIG" "$REGISTRY" ;;
push) push_images ;;
e2e) cmd_e2e e2e ;;
olm) cmd_e2e olm ;;
dr) cmd_dr ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
