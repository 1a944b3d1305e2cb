package pvcrestore

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// backupNow takes one real backup of dir through a PVCBackup and returns it.
func (w *world) backupNow(name, dir string) *storagev1.PVCBackup {
	w.T.Helper()
	pb := w.Backup(name, "@daily")
	w.StartManual(pb, "once")
	job := w.Job(pb)
	if res := w.RunMover(job, dir); res.Result != "Succeeded" {
		w.T.Fatalf("backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		w.T.Fatalf("backup did not succeed: %+v", pb.Status.LastRun)
	}
	return pb
}

func (w *world) restorer() *PVCRestoreReconciler {
	return &PVCRestoreReconciler{Client: k8s, Deps: w.Deps(k8s)}
}

func (w *world) reconcileRestore(pr *storagev1.PVCRestore) ctrl.Result {
	w.T.Helper()
	res, err := w.restorer().Reconcile(testCtx, storagetest.ReqFor(pr))
	if err != nil {
		w.T.Fatalf("reconcile restore: %v", err)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr))
	return res
}

func (w *world) restoreJob(pr *storagev1.PVCRestore) *batchv1.Job {
	w.T.Helper()
	job := &batchv1.Job{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: pr.Namespace, Name: restoreJobName(pr)}, job))
	return job
}

// restoreInto runs the mover Job of pr into dir as the kubelet would, and reports it finished.
func (w *world) restoreInto(pr *storagev1.PVCRestore, dir string) {
	w.T.Helper()
	job := w.restoreJob(pr)
	res := w.RunMover(job, dir)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Result == "Succeeded")
	w.reconcileRestore(pr)
}

func newRestore(ns, name, backup string) *storagev1.PVCRestore {
	return &storagev1.PVCRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: storagev1.PVCRestoreSpec{
			Source: storagev1.RestoreSource{PVCBackup: backup, BackupID: "latest"},
			Target: &storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: name + "-data", Size: resource.MustParse("1Gi")}},
		},
	}
}

func TestRestoreIntoANewPVCIsVerified(t *testing.T) {
	w := newWorld(t)
	src := storagetest.Volume(t)
	pb := w.backupNow("app", src)

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.Phase != storagev1.RestoreRestoring || pr.Status.BackupID != pb.Status.LastRun.ID || pr.Status.TargetPVC != "back-data" {
		t.Fatalf("restore status: %+v", pr.Status)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "back-data"}, pvc))
	if len(pvc.OwnerReferences) != 0 {
		t.Errorf("the restored PVC is owned by the request: %+v", pvc.OwnerReferences)
	}
	job := w.restoreJob(pr)
	if vol := job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; vol.ClaimName != "back-data" || vol.ReadOnly {
		t.Errorf("restore mover mounts %+v", vol)
	}
	// The restore's deadline (default 6 h), never 0: a Job with 0 fails at once (found on real pods).
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != storagev1.DefaultActiveDeadlineSeconds {
		t.Errorf("restore Job activeDeadlineSeconds = %v, want %d", d, storagev1.DefaultActiveDeadlineSeconds)
	}

	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if pr.Status.Phase != storagev1.RestoreSucceeded || pr.Status.VerifiedSHA256 != pb.Status.LastRun.SHA256 || pr.Status.Files != 3 {
		t.Fatalf("restore: %+v", pr.Status)
	}
	if c := condition2(pr); c.Status != metav1.ConditionTrue || c.Reason != ReasonRestored {
		t.Errorf("Complete = %+v", c)
	}
	for _, f := range []string{"db/data.bin", "README", "db/empty"} {
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs after the round trip (%v)", f, err)
		}
	}
	if l, _ := os.Readlink(filepath.Join(dst, "latest")); l != "db/data.bin" {
		t.Errorf("symlink restored as %q", l)
	}

	// One-shot: reconciling a finished restore starts nothing, and its spec cannot change.
	w.reconcileRestore(pr)
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), job); !apierrors.IsNotFound(err) {
		t.Errorf("the finished restore Job is still there or was recreated: %v", err)
	}
	pr.Spec.Source.BackupID = pb.Status.LastRun.ID
	if err := k8s.Update(testCtx, pr); !apierrors.IsInvalid(err) {
		t.Errorf("changing a PVCRestore spec: %v, want Invalid", err)
	}
}

func TestRestoreOfADamagedBackupFailsVerification(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", storagetest.Volume(t))
	key := pb.Status.LastRun.ObjectKey
	w.FlipBits(key, 0x20)

	pr := newRestore(w.NS, "bad", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	w.restoreInto(pr, t.TempDir())
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreFailed || c.Reason != storagekit.ReasonVerificationFailed {
		t.Fatalf("phase %s, Complete = %+v", pr.Status.Phase, c)
	}
	t.Logf("VerificationFailed: %s", condition2(pr).Message)
}

func TestRestoreRefusesMissingBackupsAndBusyTargets(t *testing.T) {
	w := newWorld(t)
	w.backupNow("app", storagetest.Volume(t))

	missing := newRestore(w.NS, "missing", "app")
	missing.Spec.Source.BackupID = "20200101T000000Z"
	w.Must(k8s.Create(testCtx, missing))
	w.reconcileRestore(missing)
	if c := condition2(missing); missing.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupNotFound {
		t.Errorf("phase %s, Complete = %+v", missing.Status.Phase, c)
	}
	// The failure is on the metrics endpoint (alert OkgoesRestoreFailed) until the PVCRestore is deleted.
	if got := failedSeries(t, w.NS, "missing"); !slices.Equal(got, []string{"BackupNotFound=1"}) {
		t.Errorf("okgoes_restore_failed of the failed restore: %v", got)
	}
	w.Must(k8s.Delete(testCtx, missing))
	if _, err := w.restorer().Reconcile(testCtx, storagetest.ReqFor(missing)); err != nil {
		t.Fatal(err)
	}
	if got := failedSeries(t, w.NS, "missing"); len(got) != 0 {
		t.Errorf("okgoes_restore_failed of the deleted restore: %v", got)
	}

	// The existing PVC "data" is mounted read-write by a running application pod.
	app := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "app-0"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: "app"}},
		Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	w.Must(k8s.Create(testCtx, app))
	app.Status.Phase = corev1.PodRunning
	w.Must(k8s.Status().Update(testCtx, app))
	busy := newRestore(w.NS, "busy", "app")
	busy.Spec.Target = &storagev1.RestoreTarget{PVCName: "data", Overwrite: storagev1.OverwriteClean}
	w.Must(k8s.Create(testCtx, busy))
	res := w.reconcileRestore(busy)
	if c := condition2(busy); busy.Status.Phase != storagev1.RestorePending || c.Reason != ReasonTargetInUse || res.RequeueAfter == 0 {
		t.Errorf("phase %s, Complete = %+v, requeue %s", busy.Status.Phase, c, res.RequeueAfter)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: restoreJobName(busy)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restore Job was started into a volume in use: %v", err)
	}

	// The application stops: the restore goes ahead.
	w.Must(k8s.Delete(testCtx, app, client.GracePeriodSeconds(0)))
	w.reconcileRestore(busy)
	if busy.Status.Phase != storagev1.RestoreRestoring {
		t.Errorf("after the pod stopped: %+v", busy.Status)
	}
}

func condition2(pr *storagev1.PVCRestore) metav1.Condition {
	for _, c := range pr.Status.Conditions {
		if c.Type == storagev1.ConditionComplete {
			return c
		}
	}
	return metav1.Condition{}
}

func TestRestoreFromAnExplicitS3LocationInAnotherNamespace(t *testing.T) {
	w := newWorld(t)
	src := storagetest.Volume(t)
	pb := w.backupNow("app", src)

	// Another namespace (standing for another cluster) with its own copy of the credentials.
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "elsewhere-"}}
	w.Must(k8s.Create(testCtx, other))
	w.Must(k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other.Name, Name: "s3"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey}}))
	pr := newRestore(other.Name, "import", "")
	pr.Spec.Source = storagev1.RestoreSource{BackupID: "latest", S3: &storagev1.RestoreS3Source{
		Bucket: storagetest.Bucket, Namespace: w.NS, PVCBackup: "app",
		Location: storagev1.S3Location{Endpoint: w.MinIO.Endpoint, Insecure: true,
			CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3"}},
	}}
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != pb.Status.LastRun.ID || pr.Status.ObjectKey != pb.Status.LastRun.ObjectKey {
		t.Fatalf("resolved %s / %s, want %s / %s", pr.Status.BackupID, pr.Status.ObjectKey, pb.Status.LastRun.ID, pb.Status.LastRun.ObjectKey)
	}
	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if pr.Status.Phase != storagev1.RestoreSucceeded || pr.Status.VerifiedSHA256 != pb.Status.LastRun.SHA256 {
		t.Fatalf("restore: %+v", pr.Status)
	}
	a, _ := os.ReadFile(filepath.Join(src, "db/data.bin"))
	b, _ := os.ReadFile(filepath.Join(dst, "db/data.bin"))
	if string(a) != string(b) {
		t.Error("content differs after restoring in another namespace")
	}
	// Exactly one of pvcBackup and s3.
	both := newRestore(other.Name, "both", "app")
	both.Spec.Source.S3 = pr.Spec.Source.S3
	if err := k8s.Create(testCtx, both); !apierrors.IsInvalid(err) {
		t.Errorf("a source with both pvcBackup and s3: %v, want Invalid", err)
	}
}
