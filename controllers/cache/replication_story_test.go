package cache

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// The replication stories run the real redis-server of the machine (Debian's redis-server),
// one process per pod, started with the redis.conf the operator rendered into the ConfigMap.
// The tests play the StatefulSet controller and the kubelet: they create the pods, mark them
// running and ready, and freeze (SIGSTOP) or kill the Redis behind a pod.

// redisProc is a redis-server playing the container of one pod.
type redisProc struct {
	port     int32
	password string
	cmd      *exec.Cmd
	dir      string
}

func startRedis(t *testing.T, conf string, args ...string) *redisProc {
	t.Helper()
	return startRedisIn(t, t.TempDir(), conf, args...)
}

// startRedisIn is startRedis with dir as the pod's /data: a directory a previous process left
// its snapshot or append-only file in plays a persistent volume.
func startRedisIn(t *testing.T, dir, conf string, args ...string) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed for the replication stories (apt-get install redis-server): %v", err)
	}
	confPath := filepath.Join(dir, "redis.conf")
	// /data is the pod's emptyDir; redis-server checks the directory while it reads the file.
	conf = strings.Replace(conf, "\ndir /data\n", "\ndir "+dir+"\n", 1)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	// The pod's configuration, with the port, address and directory of this machine.
	cmd := exec.Command(bin, confPath, "--port", strconv.Itoa(int(port)), "--bind", "127.0.0.1",
		"--logfile", filepath.Join(dir, "redis.log"))
	cmd.Args = append(cmd.Args, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &redisProc{port: port, cmd: cmd, dir: dir}
	for i := range args {
		if args[i] == "--requirepass" && i+1 < len(args) {
			p.password = args[i+1]
		}
	}
	t.Cleanup(p.kill)
	eventually(t, 10*time.Second, func() error { return p.client().Ping(testCtx).Err() })
	return p
}

func (p *redisProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p.port))) }
func (p *redisProc) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.addr(), Password: p.password, DisableIdentity: true, Protocol: 2, MaxRetries: -1})
}
func (p *redisProc) freeze() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *redisProc) thaw()   { _ = p.cmd.Process.Signal(syscall.SIGCONT) }
func (p *redisProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		p.cmd.ProcessState = &os.ProcessState{}
	}
}

func (p *redisProc) info(t *testing.T) redisadmin.Info {
	t.Helper()
	in, err := p.tryInfo()
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// tryInfo is info for a poll: the server may drop the question's connection (a demotion's
// CLIENT KILL) and answer the next one.
func (p *redisProc) tryInfo() (redisadmin.Info, error) {
	return redisadmin.Client{}.Replication(testCtx, p.addr(), p.password)
}

// keepFinalizer keeps a deleted test pod terminating, as the kubelet does during the grace period.
const keepFinalizer = "test.okgoes.com/terminating"

// playPod creates pod <name>-<i> of the cache's StatefulSet, played by proc, running and ready.
func playPod(t *testing.T, rc *cachev1beta1.RedisCache, i int, proc *redisProc) *corev1.Pod {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), sts); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: rc.Namespace, Name: fmt.Sprintf("%s-%d", rc.Name, i),
		Labels: sts.Spec.Template.Labels, Annotations: sts.Spec.Template.Annotations, Finalizers: []string{keepFinalizer},
	}, Spec: *sts.Spec.Template.Spec.DeepCopy()}
	for _, vct := range sts.Spec.VolumeClaimTemplates { // as the StatefulSet controller adds them
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vct.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vct.Name + "-" + pod.Name}}})
	}
	if err := controllerutil.SetControllerReference(sts, pod, scheme); err != nil {
		t.Fatal(err)
	}
	redisPorts.Store(rc.Namespace+"/"+pod.Name, proc.port)
	if err := k8s.Create(testCtx, pod); err != nil {
		t.Fatal(err)
	}
	setPodReady(t, pod, true)
	return pod
}

// setPodReady plays the kubelet's readiness probe.
func setPodReady(t *testing.T, pod *corev1.Pod, ready bool) {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = "127.0.0.1"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
		return k8s.Status().Update(testCtx, pod)
	})
}

// deletePod deletes a played pod and lets it go after a moment, as the kubelet would.
func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := k8s.Delete(testCtx, pod); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		p := &corev1.Pod{}
		if k8s.Get(testCtx, client.ObjectKeyFromObject(pod), p) == nil {
			p.Finalizers = nil
			_ = k8s.Update(testCtx, p)
		}
	}()
}

// playStatefulSet writes the StatefulSet status for n ready pods of the current template.
func playStatefulSet(t *testing.T, key types.NamespacedName, n int32) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8s.Get(testCtx, key, sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n,
			CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
		return k8s.Status().Update(testCtx, sts)
	})
}

func replicationCache(ns, name string, replicas, failoverAfter int32) *cachev1beta1.RedisCache {
	rc := sampleCache(ns, name, replicas)
	rc.Spec.Mode = cachev1beta1.ModeReplication
	rc.Spec.Replication = &cachev1beta1.Replication{FailoverAfterSeconds: ptr.To(failoverAfter)}
	return rc
}

// startReplicationCache creates rc, starts one redis-server per replica with the ConfigMap's
// redis.conf, plays the pods and waits until the cache is Ready.
func startReplicationCache(t *testing.T, rc *cachev1beta1.RedisCache) ([]*redisProc, []*corev1.Pod) {
	t.Helper()
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	n := *rc.Spec.Replicas
	key := client.ObjectKeyFromObject(rc)
	cm := &corev1.ConfigMap{}
	eventually(t, 30*time.Second, func() error {
		return k8s.Get(testCtx, types.NamespacedName{Namespace: rc.Namespace, Name: configMapName(rc)}, cm)
	})
	var procs []*redisProc
	var pods []*corev1.Pod
	sts := &appsv1.StatefulSet{}
	eventually(t, 30*time.Second, func() error { return k8s.Get(testCtx, key, sts) })
	var args []string
	if a := rc.Spec.Redis.Auth; a != nil {
		// The pod's arguments with the Secret's value, as the kubelet expands $(REDIS_PASSWORD).
		secret := &corev1.Secret{}
		if err := k8s.Get(testCtx, types.NamespacedName{Namespace: rc.Namespace, Name: a.SecretRef.Name}, secret); err != nil {
			t.Fatal(err)
		}
		for _, arg := range sts.Spec.Template.Spec.Containers[0].Args[1:] {
			args = append(args, strings.ReplaceAll(arg, "$("+passwordEnv+")", string(secret.Data[secretKey(a)])))
		}
	}
	for i := range int(n) {
		procs = append(procs, startRedis(t, cm.Data[redisConfKey], args...))
		pods = append(pods, playPod(t, rc, i, procs[i]))
	}
	playStatefulSet(t, key, n)
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	return procs, pods
}

// primaries lists the pods of the cache labelled primary.
func primaries(t *testing.T, rc *cachev1beta1.RedisCache) []string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(testCtx, pods, client.InNamespace(rc.Namespace),
		client.MatchingLabels(mergeInto(selectorLabels(rc), map[string]string{roleLabel: rolePrimary}))); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// watchPrimaries samples the primary label and the Redis roles until stop, and reports any moment
// with two pods labelled primary or two writable primaries among the labelled ones.
func watchPrimaries(t *testing.T, rc *cachev1beta1.RedisCache) (stop func()) {
	var twice atomic.Value
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods := &corev1.PodList{}
			if k8s.List(ctx, pods, client.InNamespace(rc.Namespace),
				client.MatchingLabels(mergeInto(selectorLabels(rc), map[string]string{roleLabel: rolePrimary}))) == nil && len(pods.Items) > 1 {
				twice.Store(fmt.Sprintf("%d pods labelled primary at once", len(pods.Items)))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		<-done
		if v := twice.Load(); v != nil {
			t.Errorf("never two primaries: %v", v)
		}
	}
}

func waitForPrimary(t *testing.T, rc *cachev1beta1.RedisCache, pod string) *cachev1beta1.RedisCache {
	t.Helper()
	var got *cachev1beta1.RedisCache
	eventually(t, 30*time.Second, func() error {
		got = getCache(t, rc)
		r := got.Status.Replication
		if r == nil || r.Primary != pod || !meta.IsStatusConditionTrue(got.Status.Conditions, cachev1beta1.ConditionPrimaryAvailable) {
			return fmt.Errorf("replication status %+v, conditions %+v", r, got.Status.Conditions)
		}
		return nil
	})
	return got
}

// TestReplicationElectsAPrimaryAndRoutesTheServices: a new cache in Replication mode gets a
// StatefulSet, the Service <name> selecting the primary only and <name>-replicas the replicas;
// the pods boot fenced (replicas of nothing) and the operator makes the lowest ordinal the
// primary and the others its replicas; the status names the primary and the replicas in sync.
func TestReplicationElectsAPrimaryAndRoutesTheServices(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "repl", 3, 10)
	procs, _ := startReplicationCache(t, rc)
	got := waitForPrimary(t, rc, "repl-0")

	if r := got.Status.Replication; len(r.Replicas) != 2 || !r.Replicas[0].InSync || !r.Replicas[1].InSync || r.LastFailover == nil ||
		r.LastFailover.Reason != ReasonNoPrimary || r.LastFailover.To != "repl-0" {
		t.Errorf("status.replication = %+v", r)
	}
	if in := procs[0].info(t); in.Role != redisadmin.RolePrimary {
		t.Errorf("repl-0 is %s, want the primary", in.Role)
	}
	for _, p := range procs[1:] {
		if in := p.info(t); in.Role != redisadmin.RoleReplica || in.MasterPort != procs[0].port || !in.MasterLinkUp {
			t.Errorf("replica %d: %+v, want a linked replica of port %d", p.port, in, procs[0].port)
		}
	}
	if d := (&appsv1.Deployment{}); k8s.Get(testCtx, client.ObjectKeyFromObject(rc), d) == nil {
		t.Error("a cache in Replication mode has a Deployment")
	}
	for name, role := range map[string]string{"repl": rolePrimary, "repl-replicas": roleReplica} {
		svc := &corev1.Service{}
		if err := k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Selector[roleLabel] != role || svc.Spec.Selector["app.kubernetes.io/instance"] != "repl" {
			t.Errorf("Service %s selects %v, want the %s pods of repl", name, svc.Spec.Selector, role)
		}
	}
	if p := primaries(t, rc); len(p) != 1 || p[0] != "repl-0" {
		t.Errorf("pods labelled primary: %v", p)
	}
	if got := lagSeries(ns, "repl"); fmt.Sprint(got) != "[repl-1 repl-2]" {
		t.Errorf("okgoes_rediscache_replication_lag_bytes series for pods %v, want repl-1 and repl-2", got)
	}
	// Writes through the primary reach the replicas; a replica refuses writes.
	if err := procs[0].client().Set(testCtx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error { return procs[2].client().Get(testCtx, "k").Err() })
	if err := procs[1].client().Set(testCtx, "k", "x", 0).Err(); err == nil {
		t.Error("a replica accepted a write")
	}
}

// TestReplicationFailsOverToTheMostUpToDateReplica: the primary's pod is deleted while one
// replica lags behind; the operator promotes the replica with the highest offset (not the lowest
// ordinal), re-points the other at it, which then catches up on the writes it had missed.
func TestReplicationFailsOverToTheMostUpToDateReplica(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "fo", 3, 3600) // only the deletion may trigger the failover
	// The story drops the primary's replication links while it writes: without the write guard
	// (see TestReplicationPrimaryCutOffFromItsReplicasRefusesWrites) it takes the writes alone.
	rc.Spec.Replication.MinReplicasToWrite = ptr.To[int32](0)
	procs, pods := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "fo-0")
	stop := watchPrimaries(t, rc)
	defer stop()

	// fo-1 freezes and falls behind; fo-2 gets every write. The primary drops its replication
	// links, so that nothing of what follows waits in fo-1's socket buffer: fo-2 reconnects, the
	// frozen fo-1 cannot.
	procs[1].freeze()
	if err := procs[0].client().Do(testCtx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := procs[0].client().Set(testCtx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if p, r := procs[0].info(t).Offset, procs[2].info(t).Offset; p != r {
			return fmt.Errorf("fo-2 at offset %d, primary at %d", r, p)
		}
		return nil
	})
	behind := procs[0].info(t).Offset
	procs[0].kill()
	procs[1].thaw()
	if in := procs[1].info(t); in.Offset >= behind {
		t.Fatalf("fo-1 is not behind (offset %d, primary %d): nothing to prove", in.Offset, behind)
	}
	start := time.Now()
	deletePod(t, pods[0])

	got := waitForPrimary(t, rc, "fo-2")
	t.Logf("fo-2 promoted %v after the primary's pod was deleted", time.Since(start).Round(time.Millisecond))
	if f := got.Status.Replication.LastFailover; f == nil || f.From != "fo-0" || f.To != "fo-2" || f.Reason != ReasonPrimaryDeleted {
		t.Errorf("lastFailover = %+v", f)
	}
	// The promotion is counted (alert OkgoesRedisFailover), and the new primary's memory is
	// exported from the INFO the operator read (alert OkgoesRedisMemoryNearMaxmemory).
	if n := testutil.ToFloat64(failoversCounter.WithLabelValues(ns, "fo", ReasonPrimaryDeleted)); n != 1 {
		t.Errorf("okgoes_rediscache_failovers_total{reason=%q} = %v, want 1", ReasonPrimaryDeleted, n)
	}
	if used := testutil.ToFloat64(usedMemoryGauge.WithLabelValues(ns, "fo", "fo-2")); used <= 0 {
		t.Errorf("okgoes_rediscache_used_memory_bytes of fo-2 = %v", used)
	}
	if in := procs[2].info(t); in.Role != redisadmin.RolePrimary {
		t.Errorf("fo-2 is %s", in.Role)
	}
	// fo-1 follows fo-2 and gets the writes it missed.
	eventually(t, 20*time.Second, func() error {
		in, err := procs[1].tryInfo()
		if err != nil {
			return err
		}
		if in.Role != redisadmin.RoleReplica || in.MasterPort != procs[2].port || !in.MasterLinkUp {
			return fmt.Errorf("fo-1: %+v", in)
		}
		return procs[1].client().Get(testCtx, "key-199").Err()
	})
	if n, err := procs[1].client().DBSize(testCtx).Result(); err != nil || n != 200 {
		t.Errorf("fo-1 has %d keys (%v), want the 200 the primary acknowledged", n, err)
	}
	if p := primaries(t, rc); len(p) != 1 || p[0] != "fo-2" {
		t.Errorf("pods labelled primary: %v", p)
	}
}

// TestReplicationFencesAReturningPrimary: the primary stops answering (frozen: a partition) and
// its pod turns unready; after failoverAfterSeconds the replica is promoted. When the old
// primary comes back it still believes it is a primary; the operator makes it a replica of the new
// one before it gets the primary label back (it never does), and it drops what it had alone.
func TestReplicationFencesAReturningPrimary(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "fence", 2, 1)
	// The new primary takes a write while its only replica (the old primary) is frozen: without
	// the write guard, which would refuse it (NOREPLICAS, the price of the guard on 2 pods).
	rc.Spec.Replication.MinReplicasToWrite = ptr.To[int32](0)
	procs, pods := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "fence-0")
	stop := watchPrimaries(t, rc)
	defer stop()

	procs[0].freeze()
	start := time.Now()
	setPodReady(t, pods[0], false)
	got := waitForPrimary(t, rc, "fence-1")
	t.Logf("fence-1 promoted %v after the primary turned unready (failoverAfterSeconds 1)", time.Since(start).Round(time.Millisecond))
	if f := got.Status.Replication.LastFailover; f == nil || f.Reason != ReasonPrimaryUnavailable || f.From != "fence-0" {
		t.Errorf("lastFailover = %+v", f)
	}
	if err := procs[1].client().Set(testCtx, "after", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// The old primary returns with its role and data of before, and the kubelet finds it ready.
	procs[0].thaw()
	if in := procs[0].info(t); in.Role != redisadmin.RolePrimary {
		t.Fatalf("the frozen primary came back as %s: nothing to fence", in.Role)
	}
	setPodReady(t, pods[0], true)
	eventually(t, 20*time.Second, func() error {
		in, err := procs[0].tryInfo()
		if err != nil {
			return err
		}
		if in.Role != redisadmin.RoleReplica || in.MasterPort != procs[1].port || !in.MasterLinkUp {
			return fmt.Errorf("fence-0: %+v", in)
		}
		return procs[0].client().Get(testCtx, "after").Err()
	})
	if p := primaries(t, rc); len(p) != 1 || p[0] != "fence-1" {
		t.Errorf("pods labelled primary: %v", p)
	}
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
}

// TestConvergedReplicationCacheMakesNoWrites: a cache in Replication mode (with a password: the
// operator authenticates, the replicas use masterauth) that is Ready makes no write in 50 forced
// reconciles: no child, no pod label, no status (offsets move, the status does not).
func TestConvergedReplicationCacheMakesNoWrites(t *testing.T) {
	ns := newNamespace(t)
	if err := k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth"},
		StringData: map[string]string{"password": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	rc := replicationCache(ns, "steady", 3, 10)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "auth", Key: "password"}}
	procs, _ := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "steady-0")
	if err := procs[0].client().Set(testCtx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let the running manager finish what the last status write queued

	wrapped, writes := writeCountingClient(t)
	r := &RedisCacheReconciler{Client: wrapped, APIReader: mgr.GetAPIReader(), PodAddress: testPodAddress}
	key := client.ObjectKeyFromObject(rc)
	for i := range 50 {
		res, err := r.Reconcile(testCtx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		if res.RequeueAfter != replicationResync {
			t.Fatalf("reconcile %d: requeue after %v, want the resync %v", i, res.RequeueAfter, replicationResync)
		}
	}
	if n, written := writes(); n != 0 {
		t.Errorf("50 reconciles of a converged replication cache made %d writes: %v", n, written)
	}
	for _, p := range procs[1:] {
		if in := p.info(t); in.Role != redisadmin.RoleReplica || in.MasterPort != procs[0].port || !in.MasterLinkUp {
			t.Errorf("replica on port %d: %+v", p.port, in)
		}
	}
}

// lagSeries names the pods with an okgoes_rediscache_replication_lag_bytes series of a cache.
func lagSeries(ns, name string) []string {
	ch := make(chan prometheus.Metric, 100)
	go func() { replicationLagGauge.Collect(ch); close(ch) }()
	var pods []string
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		l := map[string]string{}
		for _, p := range d.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["namespace"] == ns && l["name"] == name {
			pods = append(pods, l["pod"])
		}
	}
	slices.Sort(pods)
	return pods
}

// TestReplicationScaleDownHandsOverFirst: scaling 3 -> 1 while the primary is the pod with the
// highest ordinal. The StatefulSet keeps the primary's pod until the operator has paused writes on
// it, let pod 0 catch up and promoted pod 0; only then does it shrink. Every write survives.
func TestReplicationScaleDownHandsOverFirst(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "shrink", 3, 10)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(rc)
	cm := &corev1.ConfigMap{}
	eventually(t, 30*time.Second, func() error {
		return k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: configMapName(rc)}, cm)
	})
	procs := make([]*redisProc, 3)
	for i := range procs {
		procs[i] = startRedis(t, cm.Data[redisConfKey])
	}
	// shrink-2 comes up first and is elected; then the others join.
	playPod(t, rc, 2, procs[2])
	waitForPrimary(t, rc, "shrink-2")
	playPod(t, rc, 0, procs[0])
	playPod(t, rc, 1, procs[1])
	playStatefulSet(t, key, 3)
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	for i := range 500 {
		if err := procs[2].client().Set(testCtx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Watch the invariant: the StatefulSet never asks for fewer than 3 pods while shrink-2 is the primary.
	var broken atomic.Value
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			sts := &appsv1.StatefulSet{}
			pod := &corev1.Pod{}
			if k8s.Get(ctx, key, sts) == nil && k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shrink-2"}, pod) == nil &&
				pod.Labels[roleLabel] == rolePrimary && *sts.Spec.Replicas < 3 {
				broken.Store(fmt.Sprintf("StatefulSet at %d replicas while shrink-2 is the primary", *sts.Spec.Replicas))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	patchSpec(t, getCache(t, rc), func(s *cachev1beta1.RedisCacheSpec) { s.Replicas = ptr.To[int32](1) })
	got := waitForPrimary(t, rc, "shrink-0")
	eventually(t, 30*time.Second, func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8s.Get(testCtx, key, sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 1 {
			return fmt.Errorf("StatefulSet asks for %d pods", *sts.Spec.Replicas)
		}
		return nil
	})
	cancel()
	<-done
	if v := broken.Load(); v != nil {
		t.Error(v)
	}
	if f := got.Status.Replication.LastFailover; f == nil || f.Reason != ReasonScaleDown || f.From != "shrink-2" || f.To != "shrink-0" {
		t.Errorf("lastFailover = %+v", f)
	}
	if n, err := procs[0].client().DBSize(testCtx).Result(); err != nil || n != 500 {
		t.Errorf("shrink-0 has %d keys (%v), want the 500 written to shrink-2", n, err)
	}
	if in := procs[0].info(t); in.Role != redisadmin.RolePrimary {
		t.Errorf("shrink-0 is %s", in.Role)
	}
}

// TestReplicationRotatesThePasswordWithoutRestart: the Secret gets a new password and keeps the
// old one under "<key>.previous"; the operator makes every pod accept the new one (the old one
// still works for the clients that have not moved) and the replicas authenticate to the primary
// with it, with no restart; once "<key>.previous" is removed the old password is refused.
func TestReplicationRotatesThePasswordWithoutRestart(t *testing.T) {
	ns := newNamespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth"}, StringData: map[string]string{"pw": "one"}}
	if err := k8s.Create(testCtx, secret); err != nil {
		t.Fatal(err)
	}
	rc := replicationCache(ns, "rot", 2, 10)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "auth", Key: "pw"}}
	procs, _ := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "rot-0")
	sts := &appsv1.StatefulSet{}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), sts); err != nil {
		t.Fatal(err)
	}
	if probe := sts.Spec.Template.Spec.Containers[0].ReadinessProbe.Exec.Command[2]; !strings.Contains(probe, "$(cat /etc/redis-auth/password)") {
		t.Errorf("the readiness probe does not read the mounted password (it would fail after a rotation): %s", probe)
	}
	pids := []int{procs[0].cmd.Process.Pid, procs[1].cmd.Process.Pid}

	accepts := func(p *redisProc, password string) bool {
		c := redis.NewClient(&redis.Options{Addr: p.addr(), Password: password, DisableIdentity: true, Protocol: 2, MaxRetries: -1})
		defer c.Close()
		return c.Ping(testCtx).Err() == nil
	}
	r := &RedisCacheReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), PodAddress: testPodAddress}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(testCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rc)}); err != nil {
			t.Fatal(err)
		}
	}
	setSecret := func(data map[string]string) {
		t.Helper()
		s := &corev1.Secret{}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(secret), s); err != nil {
			t.Fatal(err)
		}
		s.Data, s.StringData = nil, data
		if err := k8s.Update(testCtx, s); err != nil {
			t.Fatal(err)
		}
	}

	// The manager's own reconciler runs beside this one: one of its reconciles that read the
	// Secret just before it changed may still apply the older password once, which the next
	// reconcile mends. So each step reconciles until every server takes what the Secret says.
	rotated := func(step string, newOK, oldOK bool) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			reconcile()
			for i, p := range procs {
				if n, o := accepts(p, "two"), accepts(p, "one"); n != newOK || o != oldOK {
					return fmt.Errorf("rot-%d %s: new password accepted %v, old %v; want %v and %v", i, step, n, o, newOK, oldOK)
				}
			}
			return nil
		})
	}
	setSecret(map[string]string{"pw": "two", "pw.previous": "one"})
	rotated("during the rotation", true, true)
	for _, p := range procs {
		p.password = "two"
	}

	setSecret(map[string]string{"pw": "two"})
	rotated("after the rotation", true, false)
	for i, p := range procs {
		if p.cmd.Process.Pid != pids[i] || p.cmd.ProcessState != nil {
			t.Errorf("rot-%d was restarted", i)
		}
	}
	// The replica logs in to the primary again: with masterauth, which must be the new password.
	if err := procs[1].client().Do(testCtx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if in := procs[1].info(t); in.Role != redisadmin.RoleReplica || !in.MasterLinkUp {
			return fmt.Errorf("rot-1 after the rotation: %+v", in)
		}
		return nil
	})
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
}
