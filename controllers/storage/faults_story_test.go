package storage

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// The fault stories: what a broken bucket, a failed status write, a hung or killed mover do to
// the PVCBackup and PVCRestore controllers. Each fails without the fix it is named after.

// moverPod writes the pod of a mover Job in phase with the mover container in state, as the
// kubelet reports it, and the Job status that counts it, as the Job controller writes it.
func (w *world) moverPod(job *batchv1.Job, phase corev1.PodPhase, state corev1.ContainerState) {
	w.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-abcde",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	w.must(k8s.Create(testCtx, pod))
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: job.Spec.Template.Spec.Containers[0].Image, State: state}}
	w.must(k8s.Status().Update(testCtx, pod))
	if job.Status.StartTime == nil {
		start := metav1.Now()
		job.Status.StartTime = &start
	}
	switch phase {
	case corev1.PodFailed:
		job.Status.Failed++
	case corev1.PodSucceeded:
		job.Status.Succeeded++
	default:
		job.Status.Active++
	}
	w.must(k8s.Status().Update(testCtx, job))
}

func (w *world) putObject(key string, data []byte) {
	w.t.Helper()
	_, err := w.s3.PutObject(testCtx, bucket, key, bytesReader(data), int64(len(data)), minio.PutObjectOptions{})
	w.must(err)
}

func (w *world) exists(key string) bool {
	_, err := w.s3.StatObject(testCtx, bucket, key, minio.StatObjectOptions{})
	return err == nil
}

// Broken backups (a manifest whose archive is missing, a future-dated manifest that does not
// decode) take no keepLast slot: the good backups are kept, the broken ones reported, not deleted.
func TestRetentionCountsOnlyCompleteBackups(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("kept", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 2}
	w.create(pb)
	w.reconcile(pb)
	src := volume(t)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.scheduledRun(pb, first, 0, src)
	w.scheduledRun(pb, first, 1, src)
	good := []string{pb.Status.History[1].ID, pb.Status.History[0].ID}

	// A manifest with no archive, newer than both, and a future-dated one that does not decode.
	m, err := storagekit.GetManifest(testCtx, mustStore(t, w, pb), storagekit.ManifestKey(pb, good[1]))
	w.must(err)
	noArchive := storagekit.RunID(first.Add(90*time.Minute), false)
	m.ID, m.Archive.Key = noArchive, storagekit.ArchiveKey(pb, noArchive)
	w.putObject(storagekit.ManifestKey(pb, noArchive), mustJSON(t, m))
	w.putObject(storagekit.ManifestKey(pb, "29990101T000000Z"), []byte("{garbage"))

	w.scheduledRun(pb, first, 2, src)
	third := pb.Status.LastRun.ID
	for _, id := range []string{good[1], third} {
		if !w.exists(storagekit.ManifestKey(pb, id)) || !w.exists(storagekit.ArchiveKey(pb, id)) {
			t.Errorf("good backup %s was pruned because broken ones took its slot", id)
		}
	}
	if w.exists(storagekit.ManifestKey(pb, good[0])) {
		t.Errorf("the oldest good backup %s was kept beyond keepLast 2", good[0])
	}
	if !w.exists(storagekit.ManifestKey(pb, noArchive)) || !w.exists(storagekit.ManifestKey(pb, "29990101T000000Z")) {
		t.Error("retention deleted a broken backup; it must only report it")
	}
	var listed []string
	for _, b := range pb.Status.Backups {
		listed = append(listed, b.ID)
	}
	if strings.Join(listed, ",") != third+","+good[1] {
		t.Errorf("status.backups = %v, want [%s %s]", listed, third, good[1])
	}
	if len(pb.Status.BrokenBackups) != 2 {
		t.Errorf("status.brokenBackups = %+v, want the two broken ones", pb.Status.BrokenBackups)
	}
	for _, b := range pb.Status.BrokenBackups {
		t.Logf("broken: %s: %s", b.ID, b.Problem)
	}
}

func mustMarshal(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func mustStore(t *testing.T, w *world, pb *storagev1.PVCBackup) storagekit.ObjectStore {
	t.Helper()
	store, _, err := storagekit.OpenStore(testCtx, w.deps(k8s), storagekit.BackupSource(pb))
	w.must(err)
	return store
}

// "latest" resolves to the newest usable backup when a newer manifest has no archive, and says so.
func TestLatestSkipsAnIncompleteBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", volume(t))
	good := pb.Status.LastRun.ID
	m, err := storagekit.GetManifest(testCtx, mustStore(t, w, pb), storagekit.ManifestKey(pb, good))
	w.must(err)
	broken := "29990101T000000Z"
	m.ID, m.Archive.Key = broken, storagekit.ArchiveKey(pb, broken)
	w.putObject(storagekit.ManifestKey(pb, broken), mustJSON(t, m))

	pr := newRestore(w.ns, "latest", "app")
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.BackupID != good || !strings.Contains(c.Message, broken) {
		t.Fatalf("latest resolved to %q (Complete %+v), want %s with a word about %s", pr.Status.BackupID, c, good, broken)
	}
	// Asked for by id, the incomplete backup fails at once, with nothing created.
	byID := newRestore(w.ns, "by-id", "app")
	byID.Spec.Source.BackupID = broken
	w.must(k8s.Create(testCtx, byID))
	w.reconcileRestore(byID)
	if c := condition2(byID); byID.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupBroken {
		t.Fatalf("restore of an incomplete backup by id: phase %s, %+v", byID.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.ns, Name: "by-id-data"}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a target PVC was created for a restore that cannot run: %v", err)
	}
}

// failStatusOnce is the API server refusing the next status write of kind obj (then healthy).
func failStatusOnce(obj client.Object) (client.Client, *atomic.Int32) {
	var failures atomic.Int32
	ww, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	c := interceptor.NewClient(ww, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if sub == "status" && o.GetName() == obj.GetName() && failures.Add(1) == 1 {
				return apierrors.NewServiceUnavailable("injected: the status write failed")
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
	return c, &failures
}

// A restore's outcome is saved before its Job is deleted: when the status write fails once,
// the next reconcile finds the Job and records the same outcome, never running the restore again.
func TestRestoreOutcomeIsSavedBeforeItsJobIsDeleted(t *testing.T) {
	w := newWorld(t)
	w.backupNow("app", volume(t))
	pr := newRestore(w.ns, "once", "app")
	pr.Spec.Target.Overwrite = storagev1.OverwriteRefuse
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	job := w.restoreJob(pr)
	dst := t.TempDir()
	res := w.runMover(job, dst)
	w.finishPod(job, res)
	w.finishJob(job, res.Succeeded())

	flaky, failures := failStatusOnce(pr)
	r := &PVCRestoreReconciler{Client: flaky, Deps: w.deps(k8s)}
	if _, err := r.Reconcile(testCtx, reqFor(pr)); err == nil || failures.Load() != 1 {
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

// A backup run's outcome is saved before its Job is deleted.
func TestBackupOutcomeIsSavedBeforeItsJobIsDeleted(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("app", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	w.create(pb)
	w.reconcile(pb)
	job := w.job(pb)
	if res := w.runMover(job, volume(t)); !res.Succeeded() {
		t.Fatal(res)
	}
	w.finishJob(job, true)
	flaky, failures := failStatusOnce(pb)
	r := &PVCBackupReconciler{Client: flaky, Deps: w.deps(k8s), SnapshotsAvailable: true}
	if _, err := r.Reconcile(testCtx, reqFor(pb)); err == nil || failures.Load() != 1 {
		t.Fatalf("reconcile with a failing status write: %v", err)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); err != nil {
		t.Fatalf("the backup Job is gone though the run's outcome was not saved: %v", err)
	}
	w.reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded || pb.Status.ActiveRun != nil {
		t.Fatalf("after the retry: last run %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	w.reconcile(pb)
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("the recorded run's Job is still there: %v", err)
	}
}

// What a failed run or a half-done prune leaves in the bucket (an archive without a manifest,
// an incomplete multipart upload) is removed after the next run, and by the Delete finalizer.
func TestLeftoversInTheBucketAreRemoved(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("tidy", "@hourly")
	pb.Spec.DeletionPolicy = storagev1.DeletionDelete
	w.create(pb)
	w.reconcile(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	orphan := storagekit.ArchiveKey(pb, "20200101T000000Z")
	w.putObject(orphan, []byte("an archive whose manifest a prune deleted"))
	core := minio.Core{Client: w.s3}
	abandoned := storagekit.ArchiveKey(pb, "20200102T000000Z")
	uploadID, err := core.NewMultipartUpload(testCtx, bucket, abandoned, minio.PutObjectOptions{})
	w.must(err)
	part := make([]byte, 5<<20)
	_, err = core.PutObjectPart(testCtx, bucket, abandoned, uploadID, 1, bytesReader(part), int64(len(part)), minio.PutObjectPartOptions{})
	w.must(err)

	w.scheduledRun(pb, first, 0, volume(t))
	if w.exists(orphan) {
		t.Error("the archive without a manifest survived the next run")
	}
	if n := w.uploadsOf(abandoned); n != 0 {
		t.Errorf("%d incomplete uploads survived the next run", n)
	}
	if !w.exists(storagekit.ManifestKey(pb, pb.Status.LastRun.ID)) || !w.exists(storagekit.ArchiveKey(pb, pb.Status.LastRun.ID)) {
		t.Fatal("the new backup itself was removed")
	}

	// The finalizer removes uploads too.
	uploadID, err = core.NewMultipartUpload(testCtx, bucket, abandoned, minio.PutObjectOptions{})
	w.must(err)
	_, err = core.PutObjectPart(testCtx, bucket, abandoned, uploadID, 1, bytesReader(part), int64(len(part)), minio.PutObjectPartOptions{})
	w.must(err)
	w.must(k8s.Delete(testCtx, pb))
	if _, err := w.r.Reconcile(testCtx, reqFor(pb)); err != nil {
		t.Fatal(err)
	}
	if keys := w.keys(storagekit.BackupPrefix(pb)); len(keys) != 0 || w.uploadsOf(abandoned) != 0 {
		t.Errorf("after deletion: objects %v, %d incomplete uploads", keys, w.uploadsOf(abandoned))
	}
}

// A prune that deleted a manifest and then failed on its archive is finished by the next one.
func TestAHalfDonePruneIsFinishedLater(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("half", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 1}
	w.create(pb)
	w.reconcile(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	src := volume(t)
	w.scheduledRun(pb, first, 0, src)
	old := pb.Status.LastRun.ID

	// The next run's prune deletes old's manifest, then S3 refuses the archive's deletion.
	w.r.Stores = func(cfg objectstore.Config) (storagekit.ObjectStore, error) {
		s, err := storagekit.MinioStores(cfg)
		return &failingDelete{ObjectStore: s, key: storagekit.ArchiveKey(pb, old)}, err
	}
	w.scheduledRun(pb, first, 1, src)
	w.r.Stores = storagekit.MinioStores
	if w.exists(storagekit.ManifestKey(pb, old)) || !w.exists(storagekit.ArchiveKey(pb, old)) {
		t.Fatal("the injected half-done prune did not happen")
	}
	if len(pb.Status.Backups) != 1 || pb.Status.Backups[0].ID != pb.Status.LastRun.ID {
		t.Errorf("status.backups after a half-done prune: %+v", pb.Status.Backups)
	}
	w.scheduledRun(pb, first, 2, src)
	if w.exists(storagekit.ArchiveKey(pb, old)) {
		t.Error("the orphaned archive of a half-done prune is still there after the next run")
	}
}

type failingDelete struct {
	storagekit.ObjectStore
	key string
}

func (f *failingDelete) Delete(ctx context.Context, key string) error {
	if key == f.key {
		return errors.New("injected: S3 refused the delete")
	}
	return f.ObjectStore.Delete(ctx, key)
}

// A run whose Job never ends (a frozen S3, a pod that never starts, no Job controller) ends at
// its deadline as Failed DeadlineExceeded, and Ready says so; meanwhile Running says what the
// pod waits for.
func TestARunEndsAtItsDeadline(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("slow", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	pb.Spec.Mover = &storagev1.MoverOptions{ActiveDeadlineSeconds: ptrTo[int64](600)}
	w.create(pb)
	w.reconcile(pb)
	job := w.job(pb)
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 600 {
		t.Fatalf("Job activeDeadlineSeconds = %v, want 600", d)
	}
	// The pod cannot pull its image.
	w.moverPod(job, corev1.PodPending, corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "x"`}})
	w.clock.Set(w.clock.Now().Add(time.Minute))
	w.reconcile(pb)
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "ImagePullBackOff") {
		t.Fatalf("Running = %+v, want WaitingForPod naming ImagePullBackOff", c)
	}

	w.clock.Set(pb.Status.ActiveRun.StartTime.Add(600*time.Second + storagekit.DeadlineGrace + time.Second))
	w.reconcile(pb)
	run := pb.Status.LastRun
	if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunFailed || run.Reason != storagekit.ReasonDeadlineExceeded {
		t.Fatalf("after the deadline: active %+v, last %+v", pb.Status.ActiveRun, run)
	}
	if c := condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "deadline") {
		t.Errorf("Ready = %+v, want False naming the deadline", c)
	}
}

// The Job controller's own DeadlineExceeded, and a mover killed without a report (OOMKilled),
// are told apart and named precisely.
func TestFailedJobsAreNamedPrecisely(t *testing.T) {
	for _, tt := range []struct {
		name      string
		jobReason string
		term      *corev1.ContainerStateTerminated
		reason    string
		words     []string
	}{
		{"deadline", batchv1.JobReasonDeadlineExceeded, nil, storagekit.ReasonDeadlineExceeded, []string{"deadline"}},
		{"oom", "BackoffLimitExceeded", &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, storagekit.ReasonMoverKilled, []string{"137", "OOMKilled"}},
		{"s3", "BackoffLimitExceeded", &corev1.ContainerStateTerminated{ExitCode: 1, Message: mustMarshal(mover.Result{
			Result: mover.Failed, Reason: mover.ReasonStorageFailed, Message: "upload x: connection refused"})}, string(mover.ReasonStorageFailed), []string{"upload x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			pb := w.backup("f", "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
			w.create(pb)
			w.reconcile(pb)
			job := w.job(pb)
			if tt.term != nil {
				w.moverPod(job, corev1.PodFailed, corev1.ContainerState{Terminated: tt.term})
			}
			w.finishJob(job, false)
			if tt.jobReason != "BackoffLimitExceeded" {
				for i := range job.Status.Conditions {
					job.Status.Conditions[i].Reason = tt.jobReason
				}
				w.must(k8s.Status().Update(testCtx, job))
			}
			w.reconcile(pb)
			run := pb.Status.LastRun
			if run == nil || run.Reason != tt.reason {
				t.Fatalf("last run %+v, want reason %s", run, tt.reason)
			}
			for _, word := range tt.words {
				if !strings.Contains(run.Message, word) {
					t.Errorf("message %q does not mention %q", run.Message, word)
				}
			}
		})
	}
}

// When one run ends with the next already due, the end is recorded and the next run starts a
// second later: both events are emitted.
func TestBackupStartedIsEmittedWhenRunsFollowEachOther(t *testing.T) {
	w := newWorld(t)
	events := newAPIEvents(t, w.ns)
	w.r.Recorder = events
	pb := w.backup("chain", "@hourly")
	w.create(pb)
	w.reconcile(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.clock.Set(first.Add(time.Minute))
	w.reconcile(pb)
	job := w.job(pb)
	if res := w.runMover(job, volume(t)); !res.Succeeded() {
		t.Fatal(res)
	}
	w.finishJob(job, true)
	w.clock.Set(first.Add(time.Hour + time.Minute)) // the next tick is due when the run is recorded
	w.reconcile(pb)
	if pb.Status.ActiveRun != nil || pb.Status.LastRun == nil {
		t.Fatalf("want the end recorded first: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	w.clock.Set(first.Add(time.Hour + time.Minute + time.Second))
	w.reconcile(pb) // a second later: the next run starts
	if pb.Status.ActiveRun == nil || pb.Status.LastRun == nil {
		t.Fatalf("want a finished and a new run: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	if got := events.count("BackupStarted", 2); got != 2 {
		t.Errorf("%d BackupStarted events for two runs, want 2", got)
	}
}

// A target.newPVC that is smaller than the backup's content, or that names a PVC the restore did
// not create, is refused with nothing created or overwritten.
func TestNewPVCTargetsAreChecked(t *testing.T) {
	w := newWorld(t)
	w.backupNow("app", volume(t)) // about 3 MiB of file data
	small := newRestore(w.ns, "small", "app")
	small.Spec.Target.NewPVC.Size = resource.MustParse("1Mi")
	w.must(k8s.Create(testCtx, small))
	w.reconcileRestore(small)
	if c := condition2(small); small.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonTargetTooSmall {
		t.Errorf("restore into a 1Mi newPVC: phase %s, %+v", small.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.ns, Name: "small-data"}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a too small PVC was created: %v", err)
	}

	// newPVC.name is "data", the application's existing PVC.
	taken := newRestore(w.ns, "taken", "app")
	taken.Spec.Target.NewPVC.Name = "data"
	w.must(k8s.Create(testCtx, taken))
	w.reconcileRestore(taken)
	if c := condition2(taken); taken.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonTargetExists {
		t.Errorf("restore into someone else's PVC through newPVC: phase %s, %+v", taken.Status.Phase, c)
	}
	if err := k8s.Get(testCtx, client.ObjectKey{Namespace: w.ns, Name: restoreJobName(taken)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restore Job was started: %v", err)
	}
}

// apiEvents records events to the API server, as the manager's recorder does, and reads them back.
type apiEvents struct {
	record.EventRecorder
	t  *testing.T
	ns string
}

func newAPIEvents(t *testing.T, ns string) *apiEvents {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	t.Cleanup(b.Shutdown)
	return &apiEvents{EventRecorder: b.NewRecorder(scheme, corev1.EventSource{Component: "okgoes-operator"}), t: t, ns: ns}
}

// count waits until want events with reason are stored (or 10 s pass) and returns how many are.
func (e *apiEvents) count(reason string, want int) int {
	n := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		list := &corev1.EventList{}
		if err := k8s.List(testCtx, list, client.InNamespace(e.ns)); err != nil {
			e.t.Fatal(err)
		}
		n = 0
		for _, ev := range list.Items {
			if ev.Reason == reason {
				n += int(max(ev.Count, 1))
			}
		}
		if n >= want {
			break
		}
	}
	return n
}

// envMoverChild makes this test binary the backup mover (TestMain), for a story that kills it.
const envMoverChild = "STORAGE_TEST_MOVER_CHILD"

// killBackupMidUpload runs the backup of job on dir in a mover process of its own and kills it
// (SIGKILL: an OOM kill, a lost node) once its upload to key has started.
func (w *world) killBackupMidUpload(job *batchv1.Job, dir, key string) {
	w.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	env := w.moverEnv(job)
	env[envMoverChild], env[mover.EnvSourceDir] = "1", dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out := &strings.Builder{}
	cmd.Stdout = out
	w.must(cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	for w.uploadsOf(key) == 0 {
		select {
		case <-exited:
			w.t.Fatalf("the mover ended before it was killed: %s", out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// uploadsOf counts the incomplete multipart uploads of key, asked by key: the one listing every
// S3 server answers (MinIO lists nothing by a shorter prefix).
func (w *world) uploadsOf(key string) int {
	n := 0
	for u := range w.s3.ListIncompleteUploads(testCtx, bucket, key, true) {
		w.must(u.Err)
		if u.Key == key {
			n++
		}
	}
	return n
}

// A mover killed in the middle of its upload (archive engine) leaves an incomplete multipart
// upload; it is gone after the next run, on a real MinIO (the housekeeping that records the
// killed run removes it already). The next run listed uploads by the backup's
// prefix, which MinIO answers with nothing: 128 MiB stayed in the bucket after each such run.
func TestAKilledMoversUploadIsRemovedByTheNextRun(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("killed", "@hourly")
	w.create(pb)
	w.reconcile(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	dir := t.TempDir()
	data := make([]byte, 128<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	w.must(os.WriteFile(filepath.Join(dir, "disk.img"), data, 0o600))

	w.clock.Set(first.Add(time.Minute))
	w.reconcile(pb)
	job := w.job(pb)
	killed := storagekit.ArchiveKey(pb, pb.Status.ActiveRun.ID)
	w.killBackupMidUpload(job, dir, killed)
	w.moverPod(job, corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
	w.finishJob(job, false)
	w.clock.Set(first.Add(2 * time.Minute))
	w.reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunFailed {
		t.Fatalf("the killed run was not recorded as failed: %+v", pb.Status.LastRun)
	}

	w.scheduledRun(pb, first, 1, volume(t))
	if n := w.uploadsOf(killed); n != 0 {
		t.Errorf("the killed mover's upload of %s survived the next run (%d incomplete uploads)", killed, n)
	}
}
