package pvcrestore

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The fault stories: what a broken bucket, a failed status write, a hung or killed mover do to
// the PVCBackup and PVCRestore controllers. Each fails without the fix it is named after.

// "latest" resolves to the newest usable backup when a newer manifest has no archive, and says so.
func TestLatestSkipsAnIncompleteBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", storagetest.Volume(t))
	good := pb.Status.LastRun.ID
	m, err := storagekit.GetManifest(testCtx, storagetest.MustStore(t, w.World, pb), storagekit.ManifestKey(pb, good))
	w.Must(err)
	broken := "29990101T000000Z"
	m.ID, m.Archive.Key = broken, storagekit.ArchiveKey(pb, broken)
	w.PutObject(storagekit.ManifestKey(pb, broken), storagetest.MustJSON(t, m))

	pr := newRestore(w.NS, "latest", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.BackupID != good || !strings.Contains(c.Message, broken) {
		t.Fatalf("latest resolved to %q (Complete %+v), want %s with a word about %s", pr.Status.BackupID, c, good, broken)
	}
	// Asked for by id, the incomplete backup fails at once, with nothing created.
	byID := newRestore(w.NS, "by-id", "app")
	byID.Spec.Source.BackupID = broken
	w.Must(k8s.Create(testCtx, byID))
	w.reconcileRestore(byID)
	if c := condition2(byID); byID.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupBroken {
		t.Fatalf("restore of an incomplete backup by id: phase %s, %+v", byID.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "by-id-data"}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a target PVC was created for a restore that cannot run: %v", err)
	}
}

// A restore's outcome is saved before its Job is deleted: when the status write fails once,
// the next reconcile finds the Job and records the same outcome, never running the restore again.
func TestRestoreOutcomeIsSavedBeforeItsJobIsDeleted(t *testing.T) {
	w := newWorld(t)
	w.backupNow("app", storagetest.Volume(t))
	pr := newRestore(w.NS, "once", "app")
	pr.Spec.Target.Overwrite = storagev1.OverwriteRefuse
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	job := w.restoreJob(pr)
	dst := t.TempDir()
	res := w.RunMover(job, dst)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())

	flaky, failures := storagetest.FailStatusOnce(pr)
	r := &PVCRestoreReconciler{Client: flaky, Deps: w.Deps(k8s)}
	if _, err := r.Reconcile(testCtx, storagetest.ReqFor(pr)); err == nil || failures.Load() != 1 {
		t.Fatalf("reconcile with a failing status write: %v (%d writes)", err, failures.Load())
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); err != nil {
		t.Fatalf("the restore Job is gone though its outcome was not saved: %v", err)
	}
	w.reconcileRestore(pr)
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreSucceeded || c.Reason != ReasonRestored {
		t.Fatalf("after the retry: phase %s, %+v (a second run into the restored volume fails TargetNotEmpty)", pr.Status.Phase, c)
	}
	w.reconcileRestore(pr) // the outcome is saved: now the Job goes
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("the finished restore's Job is still there: %v", err)
	}
}

// A target.newPVC that is smaller than the backup's content, or that names a PVC the restore did
// not create, is refused with nothing created or overwritten.
func TestNewPVCTargetsAreChecked(t *testing.T) {
	w := newWorld(t)
	w.backupNow("app", storagetest.Volume(t)) // about 3 MiB of file data
	small := newRestore(w.NS, "small", "app")
	small.Spec.Target.NewPVC.Size = resource.MustParse("1Mi")
	w.Must(k8s.Create(testCtx, small))
	w.reconcileRestore(small)
	if c := condition2(small); small.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonTargetTooSmall {
		t.Errorf("restore into a 1Mi newPVC: phase %s, %+v", small.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "small-data"}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a too small PVC was created: %v", err)
	}

	// newPVC.name is "data", the application's existing PVC.
	taken := newRestore(w.NS, "taken", "app")
	taken.Spec.Target.NewPVC.Name = "data"
	w.Must(k8s.Create(testCtx, taken))
	w.reconcileRestore(taken)
	if c := condition2(taken); taken.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonTargetExists {
		t.Errorf("restore into someone else's PVC through newPVC: phase %s, %+v", taken.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: restoreJobName(taken)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restore Job was started: %v", err)
	}
}
