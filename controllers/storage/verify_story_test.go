package storage

import (
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// backupAndVerify runs one scheduled backup with spec.verify, calling damage (if any) between the
// upload and the verification.
func (w *world) backupAndVerify(pb *storagev1.PVCBackup, damage func(key string)) {
	w.t.Helper()
	w.create(pb)
	w.clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour))
	w.reconcile(pb)
	job := w.job(pb)
	if res := w.runMover(job, volume(w.t)); res.Result != "Succeeded" {
		w.t.Fatalf("backup: %+v", res)
	}
	w.finishJob(job, true)
	w.reconcile(pb)
	// The verify Job has no pod yet: the run waits for it, it does not claim to be verifying.
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "verification") || pb.Status.ActiveRun == nil {
		w.t.Fatalf("after the upload: Running = %+v", c)
	}
	verify := &batchv1.Job{}
	w.must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.ns, Name: storagekit.VerifyJobName(pb, pb.Status.ActiveRun)}, verify))
	if len(verify.Spec.Template.Spec.Volumes) != 0 {
		w.t.Errorf("the verify Job mounts %+v; it must write nowhere", verify.Spec.Template.Spec.Volumes)
	}
	if damage != nil {
		damage(storagekit.ArchiveKey(pb, pb.Status.ActiveRun.ID))
	}
	res := w.runMover(verify, "")
	w.finishPod(verify, res)
	w.finishJob(verify, res.Result == "Succeeded")
	w.reconcile(pb)
}

func TestVerifyConfirmsEachBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("checked", "@hourly")
	pb.Spec.Verify = true
	w.backupAndVerify(pb, nil)
	run := pb.Status.LastRun
	if run == nil || run.Verified == nil || !*run.Verified || pb.Status.ActiveRun != nil {
		t.Fatalf("last run: %+v", run)
	}
	if c := condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
}

func TestVerifyCatchesADamagedBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("rotten", "@hourly")
	pb.Spec.Verify = true
	w.backupAndVerify(pb, func(key string) {
		obj, err := w.s3.GetObject(testCtx, bucket, key, minio.GetObjectOptions{})
		w.must(err)
		data, err := readAll(obj)
		w.must(err)
		data[len(data)/2] ^= 0x10
		_, err = w.s3.PutObject(testCtx, bucket, key, bytesReader(data), int64(len(data)), minio.PutObjectOptions{})
		w.must(err)
	})
	run := pb.Status.LastRun
	if run == nil || run.Verified == nil || *run.Verified || run.VerificationMessage == "" {
		t.Fatalf("last run: %+v", run)
	}
	if c := condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != storagekit.ReasonVerificationFailed {
		t.Errorf("Ready = %+v", c)
	}
	t.Logf("VerificationFailed: %s", condition(pb, storagev1.ConditionReady).Message)

	// The damaged backup is reported, not listed as restorable, and never restored as "latest".
	if len(pb.Status.Backups) != 0 || len(pb.Status.BrokenBackups) != 1 || pb.Status.BrokenBackups[0].ID != run.ID {
		t.Errorf("backups %+v, broken %+v: want the damaged one broken only", pb.Status.Backups, pb.Status.BrokenBackups)
	}
	pr := newRestore(w.ns, "latest", pb.Name)
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupNotFound || !strings.Contains(c.Message, run.ID) {
		t.Errorf("restore of latest with only a damaged backup: phase %s, %+v", pr.Status.Phase, c)
	}
}
