package pvcbackup

import (
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestScheduledBackupLandsInMinIO(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("nightly", "0 * * * *")
	w.Create(pb)

	// Before the first tick: nothing runs, the next backup is announced.
	res := w.Reconcile(pb)
	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	if pb.Status.NextBackup != tick.UTC().Format(time.RFC3339) || pb.Status.ActiveRun != nil || len(w.Jobs()) != 0 {
		t.Fatalf("before the tick: next=%q active=%v jobs=%d", pb.Status.NextBackup, pb.Status.ActiveRun, len(w.Jobs()))
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonWaitingForSchedule {
		t.Errorf("Running = %+v", c)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionTrue || pb.Status.ObservedGeneration != pb.Generation {
		t.Errorf("Ready = %+v, observedGeneration %d", c, pb.Status.ObservedGeneration)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Hour {
		t.Errorf("requeue after %s, want the time to the tick", res.RequeueAfter)
	}

	// The tick comes: one run, one Job, however often the reconciler runs.
	w.Clock.Set(tick.Add(5 * time.Second))
	w.Reconcile(pb)
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || !pb.Status.ActiveRun.ScheduledTime.Time.Equal(tick) || len(w.Jobs()) != 1 {
		t.Fatalf("at the tick: active=%+v jobs=%d", pb.Status.ActiveRun, len(w.Jobs()))
	}
	// The Job has no pod yet (none runs a mover): not Uploading until one does.
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Status != metav1.ConditionTrue || c.Reason != storagekit.ReasonWaitingForPod {
		t.Errorf("Running = %+v", c)
	}
	job := w.Job(pb)
	if vol := job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; vol.ClaimName != "data" || !vol.ReadOnly {
		t.Errorf("mover does not mount the PVC read-only: %+v", vol)
	}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Value == w.MinIO.SecretKey {
			t.Errorf("the secret key is in the Job as a value (%s)", e.Name)
		}
	}

	// The kubelet runs the mover: the real mover code streams the volume to the real MinIO.
	result := w.RunMover(job, storagetest.Volume(t))
	if result.Result != "Succeeded" {
		t.Fatalf("mover: %+v", result)
	}
	w.FinishJob(job, true)
	w.Clock.Set(tick.Add(time.Minute))
	w.Reconcile(pb)

	run := pb.Status.LastRun
	if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunSucceeded {
		t.Fatalf("run not recorded as succeeded: active=%+v last=%+v", pb.Status.ActiveRun, run)
	}
	size, sum := w.ObjectSHA256(run.ObjectKey)
	if run.Bytes != size || run.SHA256 != sum || run.Files != 3 || run.ContentBytes != 3<<20+6 {
		t.Errorf("status says %d bytes sha256 %s files %d content %d; MinIO has %d bytes sha256 %s",
			run.Bytes, run.SHA256, run.Files, run.ContentBytes, size, sum)
	}
	if keys := strings.Join(w.Keys(storagekit.BackupPrefix(pb)), " "); strings.Count(keys, " ") != 1 ||
		!strings.Contains(keys, run.ID+".manifest.json") || !strings.Contains(keys, run.ObjectKey) {
		t.Errorf("objects in MinIO: %v, want the archive and its manifest", keys)
	}
	if pb.Status.LastBackup == "" || pb.Status.NextBackup != tick.Add(time.Hour).UTC().Format(time.RFC3339) || len(pb.Status.History) != 1 {
		t.Errorf("status: last=%q next=%q history=%d", pb.Status.LastBackup, pb.Status.NextBackup, len(pb.Status.History))
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonSucceeded || !strings.Contains(c.Message, run.SHA256) {
		t.Errorf("Running = %+v", c)
	}
	w.Reconcile(pb) // the outcome is saved: the next reconcile removes the run's objects
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), job); !apierrors.IsNotFound(err) {
		t.Errorf("the finished Job was not removed: %v", err)
	}
}

func TestDowntimeCatchesUpOnceAndOverlapIsSkipped(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("hourly", "@hourly")
	first := w.CreateHourly(pb)

	// The operator was down for five ticks: exactly one catch-up run, for the latest tick.
	w.Clock.Set(first.Add(4*time.Hour + 10*time.Minute))
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || !pb.Status.ActiveRun.ScheduledTime.Time.Equal(first.Add(4*time.Hour)) {
		t.Fatalf("catch-up run: %+v", pb.Status.ActiveRun)
	}
	if pb.Status.MissedSchedules != 4 || len(w.Jobs()) != 1 {
		t.Errorf("missed=%d jobs=%d, want 4 missed and one Job", pb.Status.MissedSchedules, len(w.Jobs()))
	}

	// The next tick comes while the run is still going: skipped and counted, no second Job.
	w.Clock.Set(first.Add(5*time.Hour + time.Minute))
	w.Reconcile(pb)
	if pb.Status.SkippedSchedules != 1 || len(w.Jobs()) != 1 || pb.Status.MissedSchedules != 4 {
		t.Errorf("skipped=%d missed=%d jobs=%d, want 1, 4, 1", pb.Status.SkippedSchedules, pb.Status.MissedSchedules, len(w.Jobs()))
	}
	// Reconciling again counts nothing twice.
	w.Reconcile(pb)
	if pb.Status.SkippedSchedules != 1 || pb.Status.MissedSchedules != 4 {
		t.Errorf("recounted: skipped=%d missed=%d", pb.Status.SkippedSchedules, pb.Status.MissedSchedules)
	}
}

func TestFailedMoverIsReportedWithItsMessage(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("fails", "@hourly")
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour))
	w.Reconcile(pb)
	job := w.Job(pb)

	// The volume cannot be read: the real mover fails, and reports why in its termination message.
	result := w.RunMover(job, "/nonexistent/volume")
	if result.Result != "Failed" {
		t.Fatalf("mover on a missing directory: %+v", result)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: job.Name + "-abcde", Labels: map[string]string{"job-name": job.Name}},
		Spec: job.Spec.Template.Spec}
	w.Must(k8s.Create(testCtx, pod))
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: string(storagetest.MustJSON(t, result))}}}}
	w.Must(k8s.Status().Update(testCtx, pod))
	w.FinishJob(job, false)
	w.Reconcile(pb)

	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunFailed || !strings.Contains(pb.Status.LastRun.Message, "/nonexistent/volume") {
		t.Fatalf("last run: %+v", pb.Status.LastRun)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != ReasonBackupFailed {
		t.Errorf("Ready = %+v", c)
	}
	if keys := w.Keys(storagekit.BackupPrefix(pb)); len(keys) != 0 {
		t.Errorf("a failed run left objects that could pass for a backup: %v", keys)
	}
}

func TestSnapshotIsTakenAndMountedWhenReady(t *testing.T) {
	w := newWorld(t)
	w.Must(k8s.Create(testCtx, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-snap-" + w.NS},
		Driver: "hostpath.csi.k8s.io", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}))
	pb := w.Backup("snap", "@hourly")
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: "csi-snap-" + w.NS}
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour))
	w.Reconcile(pb)

	name := storagekit.RunObjectName(pb, pb.Status.ActiveRun)
	vs := &snapshotv1.VolumeSnapshot{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: name}, vs))
	if ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") != "data" || len(w.Jobs()) != 0 {
		t.Fatalf("snapshot source %v, jobs %d", vs.Spec.Source.PersistentVolumeClaimName, len(w.Jobs()))
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonSnapshotPending {
		t.Errorf("Running = %+v", c)
	}

	// The snapshot controller reports the snapshot ready: a PVC is restored from it for the mover.
	vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	w.Must(k8s.Status().Update(testCtx, vs))
	w.Reconcile(pb)
	tmp := &corev1.PersistentVolumeClaim{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: name}, tmp))
	if tmp.Spec.DataSource == nil || tmp.Spec.DataSource.Kind != "VolumeSnapshot" || tmp.Spec.DataSource.Name != name {
		t.Errorf("temporary PVC data source: %+v", tmp.Spec.DataSource)
	}
	job := w.Job(pb)
	if claim := job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName; claim != name {
		t.Errorf("mover mounts %q, want the PVC restored from the snapshot %q", claim, name)
	}
	w.RunMover(job, storagetest.Volume(t))
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("last run: %+v", pb.Status.LastRun)
	}
	w.Reconcile(pb) // the outcome is saved: the next reconcile removes the run's objects
	for _, o := range []client.Object{&snapshotv1.VolumeSnapshot{}, &corev1.PersistentVolumeClaim{}} {
		if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: name}, o); !apierrors.IsNotFound(err) {
			if o.GetDeletionTimestamp().IsZero() {
				t.Errorf("temporary %T left behind: %v", o, err)
			}
		}
	}
}

func TestDeletionPolicyDeleteRemovesBackupsEvenWithoutBucket(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("ephemeral", "@hourly")
	pb.Spec.DeletionPolicy = storagev1.DeletionDelete
	w.StartManual(pb, "first")
	if !storagetest.ControllerutilContains(pb, finalizer) || pb.Status.ActiveRun == nil || !pb.Status.ActiveRun.Manual {
		t.Fatalf("finalizer %v, manual run %+v", pb.Finalizers, pb.Status.ActiveRun)
	}
	job := w.Job(pb)
	w.RunMover(job, storagetest.Volume(t))
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if n := len(w.Keys(storagekit.BackupPrefix(pb))); n != 2 {
		t.Fatalf("%d objects after the manual backup, want 2", n)
	}
	// The same token does not run again.
	w.Reconcile(pb)
	if pb.Status.ActiveRun != nil {
		t.Errorf("the manual trigger ran twice")
	}

	w.Must(k8s.Delete(testCtx, pb))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatalf("finalizer: %v", err)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb); !apierrors.IsNotFound(err) {
		t.Fatalf("PVCBackup still there after its finalizer ran: %v %v", err, pb.Finalizers)
	}
	if keys := w.Keys(storagekit.BackupPrefix(pb)); len(keys) != 0 {
		t.Errorf("objects left in S3: %v", keys)
	}

	// A PVCBackup whose bucket is gone is not stuck forever.
	gone := w.Backup("orphan", "@hourly")
	gone.Spec.DeletionPolicy = storagev1.DeletionDelete
	w.Create(gone)
	w.Reconcile(gone)
	w.Must(w.S3.RemoveBucket(testCtx, storagetest.Bucket))
	w.Must(k8s.Delete(testCtx, gone))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(gone)); err != nil {
		t.Fatalf("finalizer with the bucket gone: %v", err)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(gone), gone); !apierrors.IsNotFound(err) {
		t.Errorf("PVCBackup stuck without its bucket: %v", err)
	}
}

func TestMissingDependenciesShowBeforeTheFirstRun(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("early", "@daily")
	pb.Spec.S3Bucket = "not-there"
	w.Create(pb)
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason != storagekit.ReasonBucketNotFound {
		t.Fatalf("Ready = %+v, want BucketNotFound at creation, not at the first tick", c)
	}
	// Polling again (same generation) keeps asking S3: the condition does not flip to Scheduled.
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason != storagekit.ReasonBucketNotFound {
		t.Errorf("second poll: Ready = %+v", c)
	}
	// Fixing the bucket clears it on the next poll.
	w.Must(w.S3.MakeBucket(testCtx, "not-there", storagetest.MinioMakeBucketOptions()))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionTrue || c.Reason != ReasonScheduled {
		t.Errorf("after the bucket appeared: Ready = %+v", c)
	}
	// A PVC going away shows without any run being due (here it stays terminating: envtest runs
	// no controller to remove its pvc-protection finalizer).
	w.Must(k8s.Delete(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "data"}}))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason != ReasonPVCNotFound {
		t.Errorf("after the PVC went away: Ready = %+v", c)
	}
}

func TestTenRunsWithKeepLastThreeLeaveThree(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("rotating", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 3}
	first := w.CreateHourly(pb)
	src := storagetest.Volume(t)
	for i := range 10 {
		w.ScheduledRun(pb, first, i, src)
	}
	keys := w.Keys(storagekit.BackupPrefix(pb))
	if len(keys) != 6 {
		t.Fatalf("%d objects after 10 runs with keepLast 3, want 3 archives + 3 manifests: %v", len(keys), keys)
	}
	if len(pb.Status.Backups) != 3 {
		t.Fatalf("status.backups: %+v", pb.Status.Backups)
	}
	for i, b := range pb.Status.Backups { // the newest three, newest first
		want := first.Add(time.Duration(9-i) * time.Hour).UTC().Format("20060102T150405Z")
		if b.ID != want || !strings.Contains(strings.Join(keys, " "), b.ID+".manifest.json") {
			t.Errorf("backups[%d] = %s, want %s (in %v)", i, b.ID, want, keys)
		}
	}
	if len(pb.Status.History) != 10 || pb.Status.MissedSchedules != 0 {
		t.Errorf("history %d, missed %d", len(pb.Status.History), pb.Status.MissedSchedules)
	}
}
