package cache

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcbackup"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcrestore"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The backup stories run the cache controller in the suite's manager, and drive the PVCBackup
// and PVCRestore reconcilers by hand as the storage stories do (storagetest.World: a real MinIO,
// the real mover code in the test process playing the mover pods, a fake clock for them).

// backupWorld is a storagetest.World whose PVCBackups are reconciled by the real reconciler.
func backupWorld(t *testing.T) *storagetest.World {
	t.Helper()
	w := storagetest.NewWorld(t)
	r := &pvcbackup.PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s)}
	w.Backups = func() reconcile.Reconciler { return r }
	w.Clock.Set(time.Now())
	return w
}

// backedUpCache is a persistent cache in w's namespace with spec.backup into w's MinIO.
func backedUpCache(w *storagetest.World, name string, replicas int32) *cachev1beta1.RedisCache {
	rc := persistentCache(w.NS, name, replicas)
	rc.Spec.Backup = &cachev1beta1.Backup{Schedule: "@daily", S3Bucket: storagetest.Bucket,
		S3: storagev1.S3Location{Endpoint: w.MinIO.Endpoint, Insecure: true,
			CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3-creds"}}}
	return rc
}

// playClaims creates the claims data-<name>-<i> as the StatefulSet controller does.
func playClaims(t *testing.T, rc *cachev1beta1.RedisCache) {
	t.Helper()
	for i := range int(*rc.Spec.Replicas) {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: rc.Namespace, Name: dataClaimName(rc, i)},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: rc.Spec.Persistence.Size}}}}
		if err := k8s.Create(testCtx, pvc); err != nil {
			t.Fatal(err)
		}
	}
}

// writeKeys writes n keys prefix-<i> on the primary; each SET returned OK (acknowledged).
func writeKeys(t *testing.T, p *redisProc, prefix string, n int) {
	t.Helper()
	c := p.client()
	defer func() { _ = c.Close() }()
	for i := range n {
		if err := c.Set(testCtx, prefix+"-"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForSavedBackupRun waits until the cache controller has saved and started the copy: the
// PVCBackup's trigger is set and no save is under way.
func waitForSavedBackupRun(t *testing.T, rc *cachev1beta1.RedisCache, trigger string) *storagev1.PVCBackup {
	t.Helper()
	pb := &storagev1.PVCBackup{}
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(testCtx, types.NamespacedName{Namespace: rc.Namespace, Name: backupName(rc)}, pb); err != nil {
			return err
		}
		got := getCache(t, rc)
		if pb.Spec.Trigger == nil || pb.Spec.Trigger.Manual != trigger || got.Status.Backup == nil || got.Status.Backup.Save != nil {
			return fmt.Errorf("PVCBackup trigger %+v, cache backup status %+v", pb.Spec.Trigger, got.Status.Backup)
		}
		return nil
	})
	return pb
}

// runBackupCopy plays the copy the PVCBackup's trigger starts: its reconciler starts the run,
// the real mover copies dir (the claim's volume), the Job ends.
func runBackupCopy(t *testing.T, w *storagetest.World, pb *storagev1.PVCBackup, dir string) {
	t.Helper()
	w.Clock.Set(time.Now())
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil {
		t.Fatalf("the trigger started no run: %+v", pb.Status)
	}
	job := w.Job(pb)
	if res := w.RunMover(job, dir); !res.Succeeded() {
		t.Fatalf("backup mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Clock.Set(time.Now())
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("backup run: %+v", pb.Status.LastRun)
	}
}

// restoreJob is the mover Job of the PVCRestore pr.
func restoreJob(t *testing.T, w *storagetest.World, pr *storagev1.PVCRestore) *batchv1.Job {
	t.Helper()
	for _, j := range w.Jobs() {
		if strings.HasPrefix(j.Name, pr.Name) {
			return &j
		}
	}
	t.Fatalf("no Job of PVCRestore %s", pr.Name)
	return nil
}

// reconcileRestore reconciles the PVCRestore of rc once, as its controller would.
func reconcileRestore(t *testing.T, w *storagetest.World, rc *cachev1beta1.RedisCache) *storagev1.PVCRestore {
	t.Helper()
	pr := &storagev1.PVCRestore{ObjectMeta: metav1.ObjectMeta{Namespace: rc.Namespace, Name: restoreName(rc)}}
	r := &pvcrestore.PVCRestoreReconciler{Client: k8s, Deps: w.Deps(k8s)}
	if _, err := r.Reconcile(testCtx, storagetest.ReqFor(pr)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

// runInitContainers runs the init containers of the StatefulSet's pod template on dir, the pod's
// /data, as the kubelet would before Redis starts.
func runInitContainers(t *testing.T, sts *appsv1.StatefulSet, dir string) {
	t.Helper()
	for _, c := range sts.Spec.Template.Spec.InitContainers {
		args := append([]string{}, c.Command[1:]...)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "/data", dir)
		}
		if out, err := exec.Command(c.Command[0], args...).CombinedOutput(); err != nil {
			t.Fatalf("init container %s: %v\n%s", c.Name, err, out)
		}
	}
}

// TestBackedUpCacheRestoresEveryAcknowledgedKey: a persistent cache of two pods takes 500
// acknowledged writes; a backup is asked for (spec.backup.trigger.manual). The operator saves on
// the replica (in sync: the fork stays off the primary) once it has applied the primary's
// offset, waits for the BGSAVE, and only then points its PVCBackup at the replica's claim and
// starts the copy; 100 writes after the save are not promised. The real mover copies the
// replica's data directory into MinIO. A new RedisCache with spec.restoreFrom gets no StatefulSet
// until its PVCRestore has written data-<name>-0 (Restoring, not Degraded); then its pod 0, a real
// redis-server with the append-only file on, starts from the restored volume after the
// StatefulSet's init container, and holds all 500 keys. Without the init container the same
// Redis starts empty: Redis 7 with appendonly yes and no append-only directory ignores dump.rdb.
func TestBackedUpCacheRestoresEveryAcknowledgedKey(t *testing.T) {
	w := backupWorld(t)
	src := backedUpCache(w, "src", 2)
	procs, _ := startReplicationCache(t, src)
	playClaims(t, src)
	waitForPrimary(t, src, "src-0")

	const acknowledged = 500
	writeKeys(t, procs[0], "before", acknowledged)
	patchSpec(t, src, func(s *cachev1beta1.RedisCacheSpec) { s.Backup.Trigger = &cachev1beta1.BackupTrigger{Manual: "1"} })
	pb := waitForSavedBackupRun(t, src, "manual-1")
	writeKeys(t, procs[0], "after", 100)
	if pb.Spec.PVCName != "data-src-1" || !pb.Spec.Suspend {
		t.Fatalf("PVCBackup copies %s (suspended %v), want the replica's claim data-src-1 and its own schedule suspended", pb.Spec.PVCName, pb.Spec.Suspend)
	}
	if !metav1.IsControlledBy(pb, getCache(t, src)) || pb.Spec.DeletionPolicy != storagev1.DeletionRetain {
		t.Errorf("PVCBackup owners %+v, deletionPolicy %q: want owned by the cache, Retain", pb.OwnerReferences, pb.Spec.DeletionPolicy)
	}
	if st := getCache(t, src).Status.Backup; st.Pod != "src-1" || st.PVCName != "data-src-1" {
		t.Errorf("status.backup source %s/%s, want src-1/data-src-1", st.Pod, st.PVCName)
	}
	runBackupCopy(t, w, pb, procs[1].dir)
	var backupID string
	eventually(t, 30*time.Second, func() error {
		st := getCache(t, src).Status.Backup
		if st == nil || st.LastResult != string(storagev1.RunSucceeded) || st.LastBackup != pb.Status.LastRun.ID || st.LastBackupTime == nil {
			return fmt.Errorf("status.backup %+v, want the run %s succeeded", st, pb.Status.LastRun.ID)
		}
		backupID = st.LastBackup
		return nil
	})

	// The restore, into a new cache of one pod.
	dst := persistentCache(w.NS, "dst", 1)
	dst.Spec.RestoreFrom = &cachev1beta1.RestoreFrom{Source: storagev1.RestoreSource{PVCBackup: backupName(src), BackupID: "latest"}}
	if err := k8s.Create(testCtx, dst); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := getCache(t, dst)
		c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionRestoring)
		if c == nil || c.Status != metav1.ConditionTrue || got.Status.Phase != cachev1beta1.PhaseProgressing ||
			meta.IsStatusConditionTrue(got.Status.Conditions, cachev1beta1.ConditionDegraded) {
			return fmt.Errorf("phase %s, conditions %+v", got.Status.Phase, got.Status.Conditions)
		}
		return nil
	})
	assertNoStatefulSet(t, dst)
	pr := reconcileRestore(t, w, dst)
	if pr.Spec.Target.NewPVC == nil || pr.Spec.Target.NewPVC.Name != "data-dst-0" || len(pr.Spec.Paths) != 1 || pr.Spec.Paths[0] != rdbFile {
		t.Fatalf("PVCRestore spec %+v, want dump.rdb into a new data-dst-0", pr.Spec)
	}
	assertNoStatefulSet(t, dst)
	volume := t.TempDir() // data-dst-0
	job := restoreJob(t, w, pr)
	res := w.RunMover(job, volume)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Result == "Succeeded")
	pr = reconcileRestore(t, w, dst)
	if pr.Status.Phase != storagev1.RestoreSucceeded || pr.Status.BackupID != backupID {
		t.Fatalf("PVCRestore status %+v, want backup %s restored", pr.Status, backupID)
	}

	sts := &appsv1.StatefulSet{}
	eventually(t, 30*time.Second, func() error { return k8s.Get(testCtx, client.ObjectKeyFromObject(dst), sts) })
	eventually(t, 30*time.Second, func() error { // the status is written at the end of the reconcile that made it
		got := getCache(t, dst)
		if r := got.Status.Restore; r == nil || r.Phase != storagev1.RestoreSucceeded || r.BackupID != backupID {
			return fmt.Errorf("status.restore %+v", r)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionRestoring); c == nil || c.Reason != ReasonRestored {
			return fmt.Errorf("Restoring condition %+v, want Restored", c)
		}
		return nil
	})

	cm := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, types.NamespacedName{Namespace: w.NS, Name: configMapName(dst)}, cm); err != nil {
		t.Fatal(err)
	}
	// Without the init container, Redis 7 ignores the restored snapshot.
	bare := t.TempDir()
	copyFile(t, filepath.Join(volume, rdbFile), filepath.Join(bare, rdbFile))
	if n, err := startRedisIn(t, bare, cm.Data[redisConfKey]).client().DBSize(testCtx).Result(); err != nil || n != 0 {
		t.Errorf("Redis without the init container loaded %d keys (%v); this story expects Redis 7 to ignore dump.rdb with appendonly yes", n, err)
	}
	runInitContainers(t, sts, volume)
	pod0 := startRedisIn(t, volume, cm.Data[redisConfKey])
	c := pod0.client()
	defer func() { _ = c.Close() }()
	for i := range acknowledged {
		if err := c.Get(testCtx, "before-"+strconv.Itoa(i)).Err(); err != nil {
			t.Fatalf("key before-%d, acknowledged before the backup, is not in the restored cache: %v", i, err)
		}
	}
	n, err := c.DBSize(testCtx).Result()
	if err != nil || n < acknowledged {
		t.Fatalf("restored DBSIZE %d (%v), want at least %d", n, err, acknowledged)
	}
	t.Logf("restored %d keys (%d acknowledged before the save)", n, acknowledged)
}

// TestRestoreFromAMissingBackupStartsNothing: spec.restoreFrom names a backup id the PVCBackup
// never made. The PVCRestore fails BackupNotFound; the cache says so (Ready=False and
// Degraded=True, RestoreFailed, with the PVCRestore's reason and what to do), creates no
// StatefulSet, and is not retried.
func TestRestoreFromAMissingBackupStartsNothing(t *testing.T) {
	w := backupWorld(t)
	w.Create(w.Backup("empty", "@daily"))
	rc := persistentCache(w.NS, "ghost", 1)
	rc.Spec.RestoreFrom = &cachev1beta1.RestoreFrom{Source: storagev1.RestoreSource{PVCBackup: "empty", BackupID: "20200101T000000Z"}}
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		return k8s.Get(testCtx, types.NamespacedName{Namespace: w.NS, Name: restoreName(rc)}, &storagev1.PVCRestore{})
	})
	if pr := reconcileRestore(t, w, rc); pr.Status.Phase != storagev1.RestoreFailed {
		t.Fatalf("PVCRestore of a missing backup: %+v", pr.Status)
	}
	got := waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonRestoreFailed)
	ready := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
	if !strings.Contains(ready.Message, "BackupNotFound") || !strings.Contains(ready.Message, "create it again") {
		t.Errorf("Ready message %q: want the PVCRestore's reason and what to do", ready.Message)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionRestoring); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonRestoreFailed {
		t.Errorf("Restoring condition %+v", c)
	}
	assertNoStatefulSet(t, rc)

	// spec.restoreFrom cannot change afterwards.
	got.Spec.RestoreFrom.Source.BackupID = "latest"
	if err := k8s.Update(testCtx, got); err == nil || !strings.Contains(err.Error(), "spec.restoreFrom cannot be changed") {
		t.Errorf("changing spec.restoreFrom: %v", err)
	}
}

// TestBackupAndRestoreAreCheckedAtAdmission: both need persistence; restoreFrom cannot be added.
func TestBackupAndRestoreAreCheckedAtAdmission(t *testing.T) {
	ns := newNamespace(t)
	plain := replicationCache(ns, "plain", 1, 10)
	plain.Spec.Backup = &cachev1beta1.Backup{Schedule: "@daily", S3Bucket: "backups",
		S3: storagev1.S3Location{Endpoint: "minio:9000", CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3"}}}
	if err := k8s.Create(testCtx, plain); err == nil || !strings.Contains(err.Error(), "spec.backup needs spec.persistence") {
		t.Errorf("backup without persistence: %v", err)
	}
	plain.Spec.Backup = nil
	plain.Spec.RestoreFrom = &cachev1beta1.RestoreFrom{Source: storagev1.RestoreSource{PVCBackup: "x"}}
	if err := k8s.Create(testCtx, plain); err == nil || !strings.Contains(err.Error(), "spec.restoreFrom needs spec.persistence") {
		t.Errorf("restoreFrom without persistence: %v", err)
	}
	rc := persistentCache(ns, "later", 1)
	rc.Spec.Persistence.Size = resource.MustParse("1Gi")
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	got := getCache(t, rc)
	got.Spec.RestoreFrom = &cachev1beta1.RestoreFrom{Source: storagev1.RestoreSource{PVCBackup: "x"}}
	if err := k8s.Update(testCtx, got); err == nil || !strings.Contains(err.Error(), "spec.restoreFrom cannot be added or removed") {
		t.Errorf("restoreFrom added after creation: %v", err)
	}
}

func assertNoStatefulSet(t *testing.T, rc *cachev1beta1.RedisCache) {
	t.Helper()
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("StatefulSet of %s: %v, want none before the restore succeeded", rc.Name, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAFailedSaveStartsNoCopy: the replica chosen for the save cannot write its snapshot (its
// data directory is gone: the BGSAVE child cannot create its temporary file). The backup fails
// SaveFailed, naming the pod and where to look; the PVCBackup is not triggered, so no copy of a
// stale dump.rdb is ever made and called a backup.
func TestAFailedSaveStartsNoCopy(t *testing.T) {
	w := backupWorld(t)
	rc := backedUpCache(w, "broken", 2)
	procs, _ := startReplicationCache(t, rc)
	playClaims(t, rc)
	waitForPrimary(t, rc, "broken-0")
	writeKeys(t, procs[0], "k", 10)
	if err := os.RemoveAll(procs[1].dir); err != nil {
		t.Fatal(err)
	}
	patchSpec(t, rc, func(s *cachev1beta1.RedisCacheSpec) { s.Backup.Trigger = &cachev1beta1.BackupTrigger{Manual: "1"} })
	eventually(t, 30*time.Second, func() error {
		st := getCache(t, rc).Status.Backup
		if st == nil || st.LastResult != string(storagev1.RunFailed) || st.LastReason != ReasonSaveFailed || st.Save != nil {
			return fmt.Errorf("status.backup %+v, want the save failed", st)
		}
		if !strings.Contains(st.LastMessage, "broken-1") || !strings.Contains(st.LastMessage, "log") {
			return fmt.Errorf("message %q: want the pod and where to look", st.LastMessage)
		}
		return nil
	})
	pb := &storagev1.PVCBackup{}
	if err := k8s.Get(testCtx, types.NamespacedName{Namespace: w.NS, Name: backupName(rc)}, pb); err != nil {
		t.Fatal(err)
	}
	if pb.Spec.Trigger != nil {
		t.Fatalf("the PVCBackup was triggered (%+v) after a failed save", pb.Spec.Trigger)
	}
}
