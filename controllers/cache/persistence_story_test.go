package cache

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

func persistentCache(ns, name string, replicas int32) *cachev1beta1.RedisCache {
	rc := replicationCache(ns, name, replicas, 10)
	rc.Spec.Persistence = &cachev1beta1.Persistence{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("fast"), AppendOnly: true}
	return rc
}

// TestPersistentCacheGetsAClaimPerPod: spec.persistence gives the StatefulSet a claim template
// "data" (the size and class asked for) in place of the emptyDir, claims retained on deletion
// (the default) and on scale-down, and a redis.conf that snapshots and appends.
func TestPersistentCacheGetsAClaimPerPod(t *testing.T) {
	ns := newNamespace(t)
	rc := persistentCache(ns, "disk", 1)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	if got := getCache(t, rc).Spec.Persistence.ReclaimPolicy; got != cachev1beta1.ReclaimRetain {
		t.Errorf("reclaimPolicy defaults to %q, want Retain", got)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, 30*time.Second, func() error { return k8s.Get(testCtx, client.ObjectKeyFromObject(rc), sts) })
	if n := len(sts.Spec.VolumeClaimTemplates); n != 1 {
		t.Fatalf("%d volume claim templates, want 1", n)
	}
	vct := sts.Spec.VolumeClaimTemplates[0]
	if vct.Name != dataVolume || vct.Spec.Resources.Requests.Storage().String() != "1Gi" || ptr.Deref(vct.Spec.StorageClassName, "") != "fast" {
		t.Errorf("claim template %s: %v of class %v", vct.Name, vct.Spec.Resources.Requests, vct.Spec.StorageClassName)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("claim retention %+v, want Retain on deletion and on scale-down", p)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == dataVolume {
			t.Errorf("the pod template still has a %q volume (%+v): it would hide the claim", dataVolume, v.VolumeSource)
		}
	}
	cm := &corev1.ConfigMap{}
	eventually(t, 30*time.Second, func() error {
		return k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: configMapName(rc)}, cm)
	})
	for _, want := range []string{"\nsave 3600 1 300 100 60 10000\n", "\nappendonly yes\n", "\nappendfsync everysec\n"} {
		if !strings.Contains(cm.Data[redisConfKey], want) {
			t.Errorf("redis.conf lacks %q:\n%s", want, cm.Data[redisConfKey])
		}
	}

	// ReclaimPolicy Delete: the claims go with the cache; nothing else of the spec may change.
	del := persistentCache(ns, "scratch", 1)
	del.Spec.Persistence.ReclaimPolicy = cachev1beta1.ReclaimDelete
	if err := k8s.Create(testCtx, del); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := &appsv1.StatefulSet{}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(del), got); err != nil {
			return err
		}
		if p := got.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType ||
			p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			return fmt.Errorf("claim retention %+v, want Delete on deletion, Retain on scale-down", p)
		}
		return nil
	})
}

// TestPersistenceIsCheckedAtAdmission: persistence needs Replication mode and is fixed at creation.
func TestPersistenceIsCheckedAtAdmission(t *testing.T) {
	ns := newNamespace(t)
	standalone := persistentCache(ns, "standalone", 1)
	standalone.Spec.Mode = cachev1beta1.ModeStandalone
	if err := k8s.Create(testCtx, standalone); err == nil || !strings.Contains(err.Error(), "spec.persistence needs mode Replication") {
		t.Errorf("persistence in Standalone mode: %v", err)
	}

	rc := persistentCache(ns, "fixed", 1)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*cachev1beta1.RedisCache){
		"size":    func(c *cachev1beta1.RedisCache) { c.Spec.Persistence.Size = resource.MustParse("2Gi") },
		"removed": func(c *cachev1beta1.RedisCache) { c.Spec.Persistence = nil },
	} {
		got := getCache(t, rc)
		change(got)
		if err := k8s.Update(testCtx, got); err == nil || !strings.Contains(err.Error(), "cannot be") {
			t.Errorf("persistence %s after creation: %v", name, err)
		}
	}
	plain := replicationCache(ns, "plain", 1, 10)
	if err := k8s.Create(testCtx, plain); err != nil {
		t.Fatal(err)
	}
	got := getCache(t, plain)
	got.Spec.Persistence = &cachev1beta1.Persistence{Size: resource.MustParse("1Gi")}
	if err := k8s.Update(testCtx, got); err == nil || !strings.Contains(err.Error(), "cannot be added or removed") {
		t.Errorf("persistence added after creation: %v", err)
	}
}

// TestPersistentCacheRestartsWarm: every pod of a persistent cache goes at once (a node reboot,
// a kubectl delete of all pods), and the volume of pod 0 is lost. The pods come back fenced,
// each with what its volume held, all at replication offset 0. The operator must elect pod 1,
// which reloaded the data, and not pod 0 (the lowest ordinal, empty): pod 0 then resyncs from
// it and no acknowledged write is lost. With the lowest ordinal elected, pod 1 would resync to
// an empty dataset.
func TestPersistentCacheRestartsWarm(t *testing.T) {
	ns := newNamespace(t)
	rc := persistentCache(ns, "warm", 2)
	procs, pods := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "warm-0")

	// The replica's append-only file is written once its first sync is done.
	waitForPersistence(t, procs[1], 20*time.Second, "aof_enabled:1", "aof_rewrite_in_progress:0",
		"aof_rewrite_scheduled:0", "loading:0", "aof_last_write_status:ok")
	for i := range 100 {
		if err := procs[0].client().Set(testCtx, "key-"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if n, err := procs[1].client().DBSize(testCtx).Result(); err != nil || n != 100 {
			return fmt.Errorf("replica has %d keys (%v)", n, err)
		}
		return nil
	})
	// ... and in its append-only file: with appendfsync everysec Redis may hold the write back
	// for up to 2 s while a background fsync runs (a loaded machine), and kill -9 loses what was
	// not written yet.
	waitForPersistence(t, procs[1], 10*time.Second, "aof_buffer_length:0", "aof_pending_bio_fsync:0")

	// Every Redis dies (kill -9: no final save), then every pod goes.
	for _, p := range procs {
		p.kill()
	}
	for _, pod := range pods {
		deletePod(t, pod)
	}
	for _, pod := range pods {
		eventually(t, 10*time.Second, func() error {
			if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", pod.Name, err)
			}
			return nil
		})
	}

	cm := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: configMapName(rc)}, cm); err != nil {
		t.Fatal(err)
	}
	lost := startRedisIn(t, t.TempDir(), cm.Data[redisConfKey])  // pod 0: a new, empty volume
	kept := startRedisIn(t, procs[1].dir, cm.Data[redisConfKey]) // pod 1: its own volume
	eventually(t, 10*time.Second, func() error {
		if n, err := kept.client().DBSize(testCtx).Result(); err != nil || n != 100 {
			return fmt.Errorf("pod 1 reloaded %d keys (%v), want 100", n, err)
		}
		return nil
	})
	t.Logf("after the restart: pod 0 %+v, pod 1 %+v", lost.info(t), kept.info(t))
	playPod(t, rc, 0, lost)
	playPod(t, rc, 1, kept)

	waitForPrimary(t, rc, "warm-1")
	eventually(t, 20*time.Second, func() error {
		if n, err := lost.client().DBSize(testCtx).Result(); err != nil || n != 100 {
			return fmt.Errorf("pod 0 has %d keys (%v), want the 100 of pod 1", n, err)
		}
		return nil
	})
	if n, err := kept.client().DBSize(testCtx).Result(); err != nil || n != 100 {
		t.Errorf("the primary has %d keys (%v) after the election, want 100", n, err)
	}
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
}

// waitForPersistence waits until INFO persistence of the Redis p shows every line of want.
func waitForPersistence(t *testing.T, p *redisProc, timeout time.Duration, want ...string) {
	t.Helper()
	eventually(t, timeout, func() error {
		text, err := p.client().Info(testCtx, "persistence").Result()
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				return fmt.Errorf("redis persistence: want %s", w)
			}
		}
		return nil
	})
}
