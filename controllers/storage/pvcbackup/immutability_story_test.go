package pvcbackup

import (
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

const lockedBucket = "locked"

// immutable is a KopiaStory edit: spec.kopia.immutability, in the world's bucket made with
// object lock when inLockedBucket.
func immutable(mode storagev1.ImmutabilityMode, days int32, inLockedBucket bool) func(*storagev1.PVCBackup) {
	return func(pb *storagev1.PVCBackup) {
		pb.Spec.Kopia = &storagev1.KopiaOptions{Immutability: &storagev1.Immutability{Mode: mode, Days: days}}
		if inLockedBucket {
			pb.Spec.S3Bucket = lockedBucket
		}
	}
}

func makeLockedBucket(w *world) {
	w.T.Helper()
	w.Must(w.S3.MakeBucket(storagetest.Ctx, lockedBucket, minio.MakeBucketOptions{ObjectLocking: true}))
}

// spec.kopia.immutability in a bucket made without object lock: before any run, Ready=False
// BucketNotLockable names the bucket and the two ways out; no Job starts, even when a run is
// due, and the check is polled (RequeueAfter, no error, no backoff storm). Creating a bucket with
// object lock and pointing spec.s3Bucket at it lets the next reconcile start the run.
func TestImmutabilityInABucketWithoutObjectLockStartsNoRun(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app", immutable(storagev1.ImmutabilityCompliance, 7, false))
	res := w.Reconcile(pb)
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	t.Logf("what the user sees: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	for _, want := range []string{`bucket "backups"`, "has no object lock", "Compliance object lock for 7 days",
		"create a bucket with object lock and set spec.s3Bucket to it, or remove spec.kopia.immutability"} {
		if ready.Status != metav1.ConditionFalse || ready.Reason != storagekit.ReasonBucketNotLockable || !strings.Contains(ready.Message, want) {
			t.Errorf("Ready = %s %s %q, want False %s saying %q", ready.Status, ready.Reason, ready.Message, storagekit.ReasonBucketNotLockable, want)
		}
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > w.r.Poll() {
		t.Errorf("requeue %v, want the poll interval %v", res.RequeueAfter, w.r.Poll())
	}
	w.Clock.Set(first.Add(time.Hour + time.Minute))
	w.Reconcile(pb)
	if jobs := w.Jobs(); len(jobs) != 0 || pb.Status.ActiveRun != nil {
		t.Fatalf("a due run started in a bucket without object lock: %d Jobs, active %+v", len(jobs), pb.Status.ActiveRun)
	}

	makeLockedBucket(w)
	w.Must(k8s.Get(storagetest.Ctx, client.ObjectKeyFromObject(pb), pb))
	pb.Spec.S3Bucket = lockedBucket
	w.Must(k8s.Update(storagetest.Ctx, pb))
	if res := w.KopiaRun(pb, first, 2, src); !res.Succeeded() {
		t.Fatalf("the run in the bucket with object lock: %+v", res)
	}
}

// The happy path: the Job asks the mover for the lock, the repository is created with it, its
// blobs and the manifest are locked, and status.repository.immutability shows it.
func TestImmutabilityLocksTheRepositoryAndShowsItsRetention(t *testing.T) {
	w := newWorld(t)
	makeLockedBucket(w)
	pb, src, first := w.KopiaStory("app", immutable(storagev1.ImmutabilityGovernance, 2, true))
	w.Clock.Set(first.Add(time.Hour + time.Minute))
	w.Reconcile(pb)
	env := w.MoverEnv(w.Job(pb))
	if env[mover.EnvKopiaRetentionMode] != mover.RetentionGovernance || env[mover.EnvKopiaRetentionPeriod] != "48h0m0s" {
		t.Errorf("mover Job retention %q %q, want GOVERNANCE 48h0m0s", env[mover.EnvKopiaRetentionMode], env[mover.EnvKopiaRetentionPeriod])
	}
	job := w.Job(pb)
	res := w.RunMover(job, src)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.Clock.Set(first.Add(time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if !res.Succeeded() || pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("run: %+v, last run %+v", res, pb.Status.LastRun)
	}
	im := pb.Status.Repository.Immutability
	if im == nil || im.Mode != string(storagev1.ImmutabilityGovernance) || im.Period.Duration != 48*time.Hour {
		t.Errorf("status.repository.immutability = %+v, want Governance 48h", im)
	}
	if ready := storagetest.Condition(pb, storagev1.ConditionReady); ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %s %s %q", ready.Status, ready.Reason, ready.Message)
	}
	manifest := storagekit.ManifestKey(pb, pb.Status.LastRun.ID)
	if mode, until, err := w.S3.GetObjectRetention(storagetest.Ctx, lockedBucket, manifest, ""); err != nil || mode == nil || *mode != minio.Governance ||
		until.Before(time.Now().Add(47*time.Hour)) {
		t.Errorf("manifest %s: retention %v until %v (%v), want GOVERNANCE for 48h", manifest, mode, until, err)
	}
}

// spec.kopia.immutability changed after the repository was created: the next run fails
// ImmutabilityMismatch, and Ready says what the repository has; the repository keeps its
// retention and gets no snapshot; status.repository.immutability still shows the repository's.
func TestImmutabilityDifferentFromTheRepositoryIsAConditionAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	makeLockedBucket(w)
	pb, src, first := w.KopiaStory("app", immutable(storagev1.ImmutabilityCompliance, 2, true))
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1: %+v", res)
	}
	w.Must(k8s.Get(storagetest.Ctx, client.ObjectKeyFromObject(pb), pb))
	pb.Spec.Kopia.Immutability = &storagev1.Immutability{Mode: storagev1.ImmutabilityGovernance, Days: 30}
	w.Must(k8s.Update(storagetest.Ctx, pb))
	res := w.KopiaRun(pb, first, 2, src)
	if res.Reason != mover.ReasonImmutabilityMismatch {
		t.Fatalf("run 2 asking for Governance 30 days: %+v, want %s", res, mover.ReasonImmutabilityMismatch)
	}
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	t.Logf("what the user sees: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	for _, want := range []string{"was created with COMPLIANCE for 48h0m0s", "asks for GOVERNANCE for 720h0m0s", "the repository was not changed",
		"Set spec.kopia.immutability to what the repository has (status.repository.immutability) or remove it"} {
		if ready.Status != metav1.ConditionFalse || ready.Reason != storagekit.ReasonImmutabilityMismatch || !strings.Contains(ready.Message, want) {
			t.Errorf("Ready = %s %s %q, want False %s saying %q", ready.Status, ready.Reason, ready.Message, storagekit.ReasonImmutabilityMismatch, want)
		}
	}
	if im := pb.Status.Repository.Immutability; im == nil || im.Mode != string(storagev1.ImmutabilityCompliance) || im.Period.Duration != 48*time.Hour {
		t.Errorf("status.repository.immutability = %+v, want the repository's Compliance 48h", im)
	}
	if _, err := w.S3.StatObject(storagetest.Ctx, lockedBucket, storagekit.ManifestKey(pb, pb.Status.LastRun.ID), minio.StatObjectOptions{}); err == nil {
		t.Error("the refused run wrote a manifest")
	}
}

// spec.kopia.immutability on a PVCBackup whose empty spec.engine resolves to Archive (its prefix
// holds archive backups): Ready=False InvalidSpec saying so and what to do, not retried.
func TestImmutabilityOfAnArchivePVCBackupIsInvalid(t *testing.T) {
	w := newWorld(t)
	pb := w.KopiaBackup("app", "0 * * * *")
	immutable(storagev1.ImmutabilityGovernance, 7, false)(pb)
	w.PutObject(storagekit.BackupPrefix(pb)+"20261201T020000Z"+storagekit.ArchiveSuffix, []byte("an archive of an older operator"))
	w.Create(pb)
	res := w.Reconcile(pb)
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	if ready.Reason != storagekit.ReasonInvalidSpec || !strings.Contains(ready.Message, "holds archive backups") ||
		!strings.Contains(ready.Message, "remove spec.kopia.immutability") {
		t.Errorf("Ready = %s %s %q, want False InvalidSpec naming the archives", ready.Status, ready.Reason, ready.Message)
	}
	if len(w.Jobs()) != 0 {
		t.Error("a run started")
	}
	t.Logf("requeue %v; Ready=%s %s: %s", res.RequeueAfter, ready.Status, ready.Reason, ready.Message)
}

// A weekly schedule cannot keep a 7-day lock on the blobs backups still use (each backup's
// maintenance extends it): Ready=False InvalidSpec says so and what to change; no run starts.
func TestImmutabilityLongerThanTheScheduleCanKeepIsInvalid(t *testing.T) {
	w := newWorld(t)
	makeLockedBucket(w)
	pb, _, first := w.KopiaStory("app", immutable(storagev1.ImmutabilityGovernance, 7, true),
		func(pb *storagev1.PVCBackup) { pb.Spec.Schedule = "0 2 * * 0" })
	w.Reconcile(pb)
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	t.Logf("what the user sees: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	for _, want := range []string{`spec.schedule "0 2 * * 0" has runs 168h0m0s apart`, "at most 6 days apart",
		"run backups more often or set immutability.days to at least 8"} {
		if ready.Status != metav1.ConditionFalse || ready.Reason != storagekit.ReasonInvalidSpec || !strings.Contains(ready.Message, want) {
			t.Errorf("Ready = %s %s %q, want False InvalidSpec saying %q", ready.Status, ready.Reason, ready.Message, want)
		}
	}
	w.Clock.Set(first.Add(8 * 24 * time.Hour))
	w.Reconcile(pb)
	if len(w.Jobs()) != 0 {
		t.Error("a run started")
	}
}
