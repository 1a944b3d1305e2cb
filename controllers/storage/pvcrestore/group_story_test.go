package pvcrestore

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The group stories: a group backup (PVCBackup spec.group) made by the real mover into MinIO is
// restored by one PVCRestore with spec.targets, one target per member.

// claim creates PVC name.
func (w *world) claim(name string) {
	w.T.Helper()
	w.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
}

// groupBackupNow takes one real backup of the group db and wal, whose content is in src/db and
// src/wal (the mover Job's /data/db and /data/wal).
func (w *world) groupBackupNow(name string) (pb *storagev1.PVCBackup, src string) {
	w.T.Helper()
	w.claim("db")
	w.claim("wal")
	src = w.T.TempDir()
	for member, files := range map[string]map[string]string{"db": {"base/1": "rows\n", "PG_VERSION": "17\n"}, "wal": {"000001": "log\n"}} {
		for f, content := range files {
			p := filepath.Join(src, member, f)
			w.Must(os.MkdirAll(filepath.Dir(p), 0o755))
			w.Must(os.WriteFile(p, []byte(content), 0o640))
		}
	}
	pb = w.Backup(name, "@daily")
	pb.Spec.PVCName, pb.Spec.Group = "", &storagev1.PVCGroup{PVCNames: []string{"db", "wal"}}
	w.StartManual(pb, "once")
	job := w.Job(pb)
	if res := w.RunMover(job, src); !res.Succeeded() {
		w.T.Fatalf("group backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		w.T.Fatalf("group backup did not succeed: %+v", pb.Status.LastRun)
	}
	return pb, src
}

// groupRestore is a PVCRestore of the latest backup of backup with targets.
func groupRestore(ns, name, backup string, targets ...storagev1.GroupRestoreTarget) *storagev1.PVCRestore {
	return &storagev1.PVCRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       storagev1.PVCRestoreSpec{Source: storagev1.RestoreSource{PVCBackup: backup, BackupID: "latest"}, Targets: targets},
	}
}

func newPVCTarget(member, pvc string) storagev1.GroupRestoreTarget {
	return storagev1.GroupRestoreTarget{SourcePVC: member,
		RestoreTarget: storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: pvc, Size: resource.MustParse("1Gi")}}}
}

// A group backup is restored by one PVCRestore: one Job mounts each target at /data/<member>
// (a new PVC for db, the existing PVC wal-old, cleaned, for wal) and restores each member into
// its own; the status names each target with its member.
func TestGroupBackupIsRestoredIntoEachTarget(t *testing.T) {
	w := newWorld(t)
	pb, src := w.groupBackupNow("app")
	w.claim("wal-old")
	wal := storagev1.GroupRestoreTarget{SourcePVC: "wal", RestoreTarget: storagev1.RestoreTarget{PVCName: "wal-old", Overwrite: storagev1.OverwriteClean}}
	pr := groupRestore(w.NS, "back", "app", newPVCTarget("db", "db-new"), wal)
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	want := []storagev1.RestoredTarget{{SourcePVC: "db", PVC: "db-new"}, {SourcePVC: "wal", PVC: "wal-old"}}
	if pr.Status.Phase != storagev1.RestoreRestoring || pr.Status.BackupID != pb.Status.LastRun.ID || !reflect.DeepEqual(pr.Status.Targets, want) {
		t.Fatalf("restore status: %+v", pr.Status)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "db-new"}, &corev1.PersistentVolumeClaim{}))
	job := w.restoreJob(pr)
	if m, want := storagetest.ClaimMounts(job), map[string]string{"/data/db": "db-new", "/data/wal": "wal-old"}; !reflect.DeepEqual(m, want) {
		t.Fatalf("restore mounts %v, want %v (writable)", m, want)
	}
	env := w.MoverEnv(job)
	if env[mover.EnvRestoreMembers] != "db=Refuse,wal=Clean" || env[mover.EnvTargetDir] != "/data" {
		t.Errorf("restore env %s=%q %s=%q", mover.EnvRestoreMembers, env[mover.EnvRestoreMembers], mover.EnvTargetDir, env[mover.EnvTargetDir])
	}

	// The kubelet's mounts: an empty new volume for db, wal-old with an old file.
	dst := t.TempDir()
	w.Must(os.Mkdir(filepath.Join(dst, "db"), 0o755))
	w.Must(os.Mkdir(filepath.Join(dst, "wal"), 0o755))
	w.Must(os.WriteFile(filepath.Join(dst, "wal", "stale"), []byte("old"), 0o600))
	w.restoreInto(pr, dst)
	c := condition2(pr)
	if pr.Status.Phase != storagev1.RestoreSucceeded || c.Reason != ReasonRestored || !strings.Contains(c.Message, "db-new (member db), wal-old (member wal)") {
		t.Fatalf("restore: %+v, Complete %+v", pr.Status, c)
	}
	for _, f := range []string{"db/base/1", "db/PG_VERSION", "wal/000001"} {
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs after the round trip (%v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "wal", "stale")); !os.IsNotExist(err) {
		t.Errorf("wal-old (overwrite Clean) kept its old file: %v", err)
	}
}

// The form of a restore must match its backup, checked once the backup is resolved, before any
// PVC is created or any Job runs: a group backup needs targets, one per member; the backup of
// one PVC needs target. Each mismatch is its own reason, and a one-shot failure (no retry loop).
func TestRestoreFormMustMatchTheBackup(t *testing.T) {
	w := newWorld(t)
	w.groupBackupNow("group")
	single := w.Backup("single", "@daily")
	w.StartManual(single, "once")
	job := w.Job(single)
	if res := w.RunMover(job, storagetest.Volume(t)); !res.Succeeded() {
		t.Fatalf("backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(single)

	tests := []struct {
		name   string
		pr     *storagev1.PVCRestore
		reason string
		says   string
	}{
		{"a group backup into one target", newRestore(w.NS, "one", "group"), ReasonGroupBackup,
			"is a group backup of PVCs db, wal (PVCBackup spec.group): restore it with spec.targets"},
		{"one PVC's backup into targets", groupRestore(w.NS, "many", "single", newPVCTarget("data", "data-a"), newPVCTarget("db", "db-a")),
			ReasonNotAGroupBackup, "is the backup of one PVC (data), not of a group: restore it with spec.target"},
		{"a member without target", groupRestore(w.NS, "short", "group", newPVCTarget("db", "db-b")), ReasonTargetsMismatch,
			"spec.targets has no target for wal"},
		{"a target of no member", groupRestore(w.NS, "long", "group", newPVCTarget("db", "db-c"), newPVCTarget("wal", "wal-c"), newPVCTarget("logs", "logs-c")),
			ReasonTargetsMismatch, "targets for logs, which the backup does not hold"},
		{"two members into one PVC", groupRestore(w.NS, "same", "group", newPVCTarget("db", "both"), newPVCTarget("wal", "both")),
			storagekit.ReasonInvalidSpec, `targets[sourcePVC=db] and targets[sourcePVC=wal] both restore into PersistentVolumeClaim "both"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.Must(k8s.Create(testCtx, tt.pr))
			res := w.reconcileRestore(tt.pr)
			c := condition2(tt.pr)
			if tt.pr.Status.Phase != storagev1.RestoreFailed || c.Status != metav1.ConditionTrue || c.Reason != tt.reason ||
				!strings.Contains(c.Message, tt.says) || !strings.Contains(c.Message, "nothing was restored") {
				t.Fatalf("status %+v, Complete %+v: want Failed %s saying %q", tt.pr.Status, c, tt.reason, tt.says)
			}
			if res.RequeueAfter > 0 && res.RequeueAfter != time.Millisecond { // only the prompt look that removes the Job
				t.Errorf("a failed restore is polled: %+v", res)
			}
			w.reconcileRestore(tt.pr)
			if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: restoreJobName(tt.pr)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("a restore Job exists: %v", err)
			}
			for _, target := range targetsOf(tt.pr) {
				if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: target.pvcName()}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
					t.Errorf("target PVC %s was created: %v", target.pvcName(), err)
				}
			}
		})
	}
}

// A group target's new PVC smaller than its member's file data (known from an archive backup's
// top level) fails the restore TargetTooSmall, naming the member, before any target PVC is
// created, the others included.
func TestGroupNewPVCTooSmallForItsMemberCreatesNothing(t *testing.T) {
	w := newWorld(t)
	w.groupBackupNow("app") // archive: db holds 8 bytes of file data
	small := newPVCTarget("db", "db-small")
	small.NewPVC.Size = resource.MustParse("4")
	pr := groupRestore(w.NS, "back", "app", newPVCTarget("wal", "wal-new"), small)
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonTargetTooSmall ||
		!strings.Contains(c.Message, "targets[sourcePVC=db].newPVC.size 4 is smaller than the 8 bytes of file data of member db") {
		t.Fatalf("status %+v, Complete %+v", pr.Status, c)
	}
	for _, name := range []string{"wal-new", "db-small"} {
		if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: name}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
			t.Errorf("PVC %s was created for a restore that failed: %v", name, err)
		}
	}
}
