package pvcrestore

import (
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

// A PVCRestore has no spec.s3: its credentials are named by spec.source.s3.location, or by the
// spec.s3 of the PVCBackup that spec.source.pvcBackup names. Its messages say which.
func TestRestoreCredentialMessagesNameTheRestoresFields(t *testing.T) {
	w := newWorld(t)
	w.Secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	elsewhere := w.Backup("elsewhere", "@daily")
	elsewhere.Spec.S3.CredentialsSecretRef.Name = "gone"
	w.Create(elsewhere)

	fromS3 := func(name, secret string) *storagev1.PVCRestore {
		pr := newRestore(w.NS, name, "")
		pr.Spec.Source.S3 = &storagev1.RestoreS3Source{Bucket: storagetest.Bucket, Namespace: "prod", PVCBackup: "app-data",
			Location: storagev1.S3Location{Endpoint: w.MinIO.Endpoint, Insecure: true,
				CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: secret}}}
		return pr
	}
	tests := []struct {
		restore *storagev1.PVCRestore
		message string
	}{
		{fromS3("from-s3-missing", "nope"),
			`Secret "nope" named by spec.source.s3.location.credentialsSecretRef does not exist`},
		{fromS3("from-s3-empty", "empty-access-key"),
			`Secret "empty-access-key" has an empty key "AWS_ACCESS_KEY_ID"`},
		{newRestore(w.NS, "from-backup", "elsewhere"),
			`Secret "gone" named by spec.s3.credentialsSecretRef of PVCBackup "elsewhere" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.restore.Name, func(t *testing.T) {
			pr := tt.restore
			w.Must(k8s.Create(testCtx, pr))
			w.reconcileRestore(pr)
			c := condition2(pr)
			if c.Reason != storagekit.ReasonCredentialsNotFound || c.Message != tt.message {
				t.Fatalf("Complete = %s %q\nwant      %s %q", c.Reason, c.Message, storagekit.ReasonCredentialsNotFound, tt.message)
			}
			if pr.Spec.Source.S3 != nil && strings.Contains(c.Message, "by spec.s3.") {
				t.Errorf("the message names spec.s3, which a PVCRestore does not have: %q", c.Message)
			}
		})
	}
}

func TestAFinishedRestoreIsNotRunAgainFromAStaleCache(t *testing.T) {
	for _, succeeded := range []bool{true, false} {
		w := newWorld(t)
		w.backupNow("app", storagetest.Volume(t))
		pr := newRestore(w.NS, "once", "app")
		w.Must(k8s.Create(testCtx, pr))
		w.reconcileRestore(pr)
		stale := pr.DeepCopy() // Restoring, its Job running
		job := w.restoreJob(pr)
		if succeeded {
			w.restoreInto(pr, t.TempDir())
		} else {
			w.FinishJob(job, false) // BackoffLimitExceeded, no result from the mover
			w.reconcileRestore(pr)
		}
		if pr.Status.Phase == storagev1.RestoreRestoring {
			t.Fatalf("the restore did not finish: %+v", pr.Status)
		}
		w.reconcileRestore(pr) // the outcome is saved: this one deletes the Job
		done := pr.DeepCopy()

		r := &PVCRestoreReconciler{Client: storagetest.LaggingCache(t, stale), Deps: w.Deps(k8s)}
		res, err := r.Reconcile(testCtx, storagetest.ReqFor(pr))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("succeeded=%v: the restore Job was created again (the restore would run twice): %v", succeeded, err)
		}
		w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr))
		if pr.ResourceVersion != done.ResourceVersion {
			t.Errorf("succeeded=%v: a reconcile from a stale cache wrote the status: %+v", succeeded, pr.Status)
		}
	}
}

func TestVerifyCatchesADamagedBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("rotten", "@hourly")
	pb.Spec.Verify = true
	w.BackupAndVerify(pb, func(key string) { w.FlipBits(key, 0x10) })
	run := pb.Status.LastRun
	if run == nil || run.Verified == nil || *run.Verified || run.VerificationMessage == "" {
		t.Fatalf("last run: %+v", run)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != storagekit.ReasonVerificationFailed {
		t.Errorf("Ready = %+v", c)
	}
	t.Logf("VerificationFailed: %s", storagetest.Condition(pb, storagev1.ConditionReady).Message)

	// The damaged backup is reported, not listed as restorable, and never restored as "latest".
	if len(pb.Status.Backups) != 0 || len(pb.Status.BrokenBackups) != 1 || pb.Status.BrokenBackups[0].ID != run.ID {
		t.Errorf("backups %+v, broken %+v: want the damaged one broken only", pb.Status.Backups, pb.Status.BrokenBackups)
	}
	pr := newRestore(w.NS, "latest", pb.Name)
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupNotFound || !strings.Contains(c.Message, run.ID) {
		t.Errorf("restore of latest with only a damaged backup: phase %s, %+v", pr.Status.Phase, c)
	}
}

// A restore's Complete condition always has a message: while its pod is refused it names the
// Job controller's reason, and while the mover runs it names the backup and the target.
func TestARestoreSaysWhatItWaitsForAndWhatItRestores(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", storagetest.Volume(t))
	w.RefuseAllPods()

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Message == "" || c.Reason != storagekit.ReasonWaitingForPod {
		t.Errorf("Complete right after the Job's creation: %+v, want WaitingForPod with a message", c)
	}
	job := w.restoreJob(pr)
	w.TryCreatePod(job)
	w.Clock.Set(w.Clock.Now().Add(storagekit.RunPollInterval))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("Complete with the pod refused: %+v, want WaitingForPod naming the quota", c)
	}

	w.AllowPods()
	w.StartPod(job)
	w.Clock.Set(w.Clock.Now().Add(time.Second))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.Phase != storagev1.RestoreRestoring || c.Reason != ReasonRestoring ||
		!strings.Contains(c.Message, pb.Status.LastRun.ID) || !strings.Contains(c.Message, "back-data") {
		t.Fatalf("restore with its mover running: phase %s, Complete %+v; want Restoring naming the backup and the target", pr.Status.Phase, c)
	}
}
