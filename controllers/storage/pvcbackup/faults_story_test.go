package pvcbackup

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// The fault stories: what a broken bucket, a failed status write, a hung or killed mover do to
// the PVCBackup and PVCRestore controllers. Each fails without the fix it is named after.

// Broken backups (a manifest whose archive is missing, a future-dated manifest that does not
// decode) take no keepLast slot: the good backups are kept, the broken ones reported, not deleted.
func TestRetentionCountsOnlyCompleteBackups(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("kept", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 2}
	first := w.CreateHourly(pb)
	src := storagetest.Volume(t)
	w.ScheduledRun(pb, first, 0, src)
	w.ScheduledRun(pb, first, 1, src)
	good := []string{pb.Status.History[1].ID, pb.Status.History[0].ID}

	// A manifest with no archive, newer than both, and a future-dated one that does not decode.
	m, err := storagekit.GetManifest(testCtx, storagetest.MustStore(t, w.World, pb), storagekit.ManifestKey(pb, good[1]))
	w.Must(err)
	noArchive := storagekit.RunID(first.Add(90*time.Minute), false)
	m.ID, m.Archive.Key = noArchive, storagekit.ArchiveKey(pb, noArchive)
	w.PutObject(storagekit.ManifestKey(pb, noArchive), storagetest.MustJSON(t, m))
	w.PutObject(storagekit.ManifestKey(pb, "29990101T000000Z"), []byte("{garbage"))

	w.ScheduledRun(pb, first, 2, src)
	third := pb.Status.LastRun.ID
	for _, id := range []string{good[1], third} {
		if !w.Exists(storagekit.ManifestKey(pb, id)) || !w.Exists(storagekit.ArchiveKey(pb, id)) {
			t.Errorf("good backup %s was pruned because broken ones took its slot", id)
		}
	}
	if w.Exists(storagekit.ManifestKey(pb, good[0])) {
		t.Errorf("the oldest good backup %s was kept beyond keepLast 2", good[0])
	}
	if !w.Exists(storagekit.ManifestKey(pb, noArchive)) || !w.Exists(storagekit.ManifestKey(pb, "29990101T000000Z")) {
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

// A backup run's outcome is saved before its Job is deleted.
func TestBackupOutcomeIsSavedBeforeItsJobIsDeleted(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("app", "@daily")
	w.StartManual(pb, "once")
	job := w.Job(pb)
	if res := w.RunMover(job, storagetest.Volume(t)); !res.Succeeded() {
		t.Fatal(res)
	}
	w.FinishJob(job, true)
	flaky, failures := storagetest.FailStatusOnce(pb)
	r := &PVCBackupReconciler{Client: flaky, Deps: w.Deps(k8s), SnapshotsAvailable: true}
	if _, err := r.Reconcile(testCtx, storagetest.ReqFor(pb)); err == nil || failures.Load() != 1 {
		t.Fatalf("reconcile with a failing status write: %v", err)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); err != nil {
		t.Fatalf("the backup Job is gone though the run's outcome was not saved: %v", err)
	}
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded || pb.Status.ActiveRun != nil {
		t.Fatalf("after the retry: last run %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	w.Reconcile(pb)
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("the recorded run's Job is still there: %v", err)
	}
}

// What a failed run or a half-done prune leaves in the bucket (an archive without a manifest,
// an incomplete multipart upload) is removed after the next run, and by the Delete finalizer.
func TestLeftoversInTheBucketAreRemoved(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("tidy", "@hourly")
	pb.Spec.DeletionPolicy = storagev1.DeletionDelete
	first := w.CreateHourly(pb)
	orphan := storagekit.ArchiveKey(pb, "20200101T000000Z")
	w.PutObject(orphan, []byte("an archive whose manifest a prune deleted"))
	core := minio.Core{Client: w.S3}
	abandoned := storagekit.ArchiveKey(pb, "20200102T000000Z")
	uploadID, err := core.NewMultipartUpload(testCtx, storagetest.Bucket, abandoned, minio.PutObjectOptions{})
	w.Must(err)
	part := make([]byte, 5<<20)
	_, err = core.PutObjectPart(testCtx, storagetest.Bucket, abandoned, uploadID, 1, storagetest.BytesReader(part), int64(len(part)), minio.PutObjectPartOptions{})
	w.Must(err)

	w.ScheduledRun(pb, first, 0, storagetest.Volume(t))
	if w.Exists(orphan) {
		t.Error("the archive without a manifest survived the next run")
	}
	if n := w.uploadsOf(abandoned); n != 0 {
		t.Errorf("%d incomplete uploads survived the next run", n)
	}
	if !w.Exists(storagekit.ManifestKey(pb, pb.Status.LastRun.ID)) || !w.Exists(storagekit.ArchiveKey(pb, pb.Status.LastRun.ID)) {
		t.Fatal("the new backup itself was removed")
	}

	// The finalizer removes uploads too.
	uploadID, err = core.NewMultipartUpload(testCtx, storagetest.Bucket, abandoned, minio.PutObjectOptions{})
	w.Must(err)
	_, err = core.PutObjectPart(testCtx, storagetest.Bucket, abandoned, uploadID, 1, storagetest.BytesReader(part), int64(len(part)), minio.PutObjectPartOptions{})
	w.Must(err)
	w.Must(k8s.Delete(testCtx, pb))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	if keys := w.Keys(storagekit.BackupPrefix(pb)); len(keys) != 0 || w.uploadsOf(abandoned) != 0 {
		t.Errorf("after deletion: objects %v, %d incomplete uploads", keys, w.uploadsOf(abandoned))
	}
}

// A prune that deleted a manifest and then failed on its archive is finished by the next one.
func TestAHalfDonePruneIsFinishedLater(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("half", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 1}
	first := w.CreateHourly(pb)
	src := storagetest.Volume(t)
	w.ScheduledRun(pb, first, 0, src)
	old := pb.Status.LastRun.ID

	// The next run's prune deletes old's manifest, then S3 refuses the archive's deletion.
	w.r.Stores = func(cfg objectstore.Config) (storagekit.ObjectStore, error) {
		s, err := storagekit.MinioStores(cfg)
		return &failingDelete{ObjectStore: s, key: storagekit.ArchiveKey(pb, old)}, err
	}
	w.ScheduledRun(pb, first, 1, src)
	w.r.Stores = storagekit.MinioStores
	if w.Exists(storagekit.ManifestKey(pb, old)) || !w.Exists(storagekit.ArchiveKey(pb, old)) {
		t.Fatal("the injected half-done prune did not happen")
	}
	if len(pb.Status.Backups) != 1 || pb.Status.Backups[0].ID != pb.Status.LastRun.ID {
		t.Errorf("status.backups after a half-done prune: %+v", pb.Status.Backups)
	}
	w.ScheduledRun(pb, first, 2, src)
	if w.Exists(storagekit.ArchiveKey(pb, old)) {
		t.Error("the orphaned archive of a half-done prune is still there after the next run")
	}
}

// A run whose Job never ends (a frozen S3, a pod that never starts, no Job controller) ends at
// its deadline as Failed DeadlineExceeded, and Ready says so; meanwhile Running says what the
// pod waits for.
func TestARunEndsAtItsDeadline(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("slow", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	pb.Spec.Mover = &storagev1.MoverOptions{ActiveDeadlineSeconds: ptrTo[int64](600)}
	w.Create(pb)
	w.Reconcile(pb)
	job := w.Job(pb)
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 600 {
		t.Fatalf("Job activeDeadlineSeconds = %v, want 600", d)
	}
	// The pod cannot pull its image.
	w.moverPod(job, corev1.PodPending, corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "x"`}})
	w.Clock.Set(w.Clock.Now().Add(time.Minute))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "ImagePullBackOff") {
		t.Fatalf("Running = %+v, want WaitingForPod naming ImagePullBackOff", c)
	}

	w.Clock.Set(pb.Status.ActiveRun.StartTime.Add(600*time.Second + storagekit.DeadlineGrace + time.Second))
	w.Reconcile(pb)
	run := pb.Status.LastRun
	if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunFailed || run.Reason != storagekit.ReasonDeadlineExceeded {
		t.Fatalf("after the deadline: active %+v, last %+v", pb.Status.ActiveRun, run)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "deadline") {
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
			pb := w.Backup("f", "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
			w.Create(pb)
			w.Reconcile(pb)
			job := w.Job(pb)
			if tt.term != nil {
				w.moverPod(job, corev1.PodFailed, corev1.ContainerState{Terminated: tt.term})
			}
			w.FinishJob(job, false)
			if tt.jobReason != "BackoffLimitExceeded" {
				for i := range job.Status.Conditions {
					job.Status.Conditions[i].Reason = tt.jobReason
				}
				w.Must(k8s.Status().Update(testCtx, job))
			}
			w.Reconcile(pb)
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
	events := newAPIEvents(t, w.NS)
	w.r.Recorder = events
	pb := w.Backup("chain", "@hourly")
	first := w.CreateHourly(pb)
	w.Clock.Set(first.Add(time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	if res := w.RunMover(job, storagetest.Volume(t)); !res.Succeeded() {
		t.Fatal(res)
	}
	w.FinishJob(job, true)
	w.Clock.Set(first.Add(time.Hour + time.Minute)) // the next tick is due when the run is recorded
	w.Reconcile(pb)
	if pb.Status.ActiveRun != nil || pb.Status.LastRun == nil {
		t.Fatalf("want the end recorded first: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	w.Clock.Set(first.Add(time.Hour + time.Minute + time.Second))
	w.Reconcile(pb) // a second later: the next run starts
	if pb.Status.ActiveRun == nil || pb.Status.LastRun == nil {
		t.Fatalf("want a finished and a new run: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
	if got := events.count("BackupStarted", 2); got != 2 {
		t.Errorf("%d BackupStarted events for two runs, want 2", got)
	}
}

// A mover killed in the middle of its upload (archive engine) leaves an incomplete multipart
// upload; it is gone after the next run, on a real MinIO (the housekeeping that records the
// killed run removes it already). The next run listed uploads by the backup's
// prefix, which MinIO answers with nothing: 128 MiB stayed in the bucket after each such run.
func TestAKilledMoversUploadIsRemovedByTheNextRun(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("killed", "@hourly")
	first := w.CreateHourly(pb)
	dir := t.TempDir()
	data := make([]byte, 128<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	w.Must(os.WriteFile(filepath.Join(dir, "disk.img"), data, 0o600))

	w.Clock.Set(first.Add(time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	killed := storagekit.ArchiveKey(pb, pb.Status.ActiveRun.ID)
	w.killBackupMidUpload(job, dir, killed)
	w.moverPod(job, corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
	w.FinishJob(job, false)
	w.Clock.Set(first.Add(2 * time.Minute))
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunFailed {
		t.Fatalf("the killed run was not recorded as failed: %+v", pb.Status.LastRun)
	}

	w.ScheduledRun(pb, first, 1, storagetest.Volume(t))
	if n := w.uploadsOf(killed); n != 0 {
		t.Errorf("the killed mover's upload of %s survived the next run (%d incomplete uploads)", killed, n)
	}
}

// moverPod writes the pod of a mover Job in phase with the mover container in state, as the
// kubelet reports it, and the Job status that counts it, as the Job controller writes it.
func (w *world) moverPod(job *batchv1.Job, phase corev1.PodPhase, state corev1.ContainerState) {
	w.T.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-abcde",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	w.Must(k8s.Create(testCtx, pod))
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: job.Spec.Template.Spec.Containers[0].Image, State: state}}
	w.Must(k8s.Status().Update(testCtx, pod))
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
	w.Must(k8s.Status().Update(testCtx, job))
}

func mustMarshal(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
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

// killBackupMidUpload runs the backup of job on dir in a mover process of its own and kills it
// (SIGKILL: an OOM kill, a lost node) once its upload to key has started.
func (w *world) killBackupMidUpload(job *batchv1.Job, dir, key string) {
	w.T.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	env := w.MoverEnv(job)
	env[storagetest.EnvMoverChild], env[mover.EnvSourceDir] = "1", dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out := &strings.Builder{}
	cmd.Stdout = out
	w.Must(cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	for w.uploadsOf(key) == 0 {
		select {
		case <-exited:
			w.T.Fatalf("the mover ended before it was killed: %s", out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// uploadsOf counts the incomplete multipart uploads of key, asked by key: the one listing every
// S3 server answers (MinIO lists nothing by a shorter prefix).
func (w *world) uploadsOf(key string) int {
	n := 0
	for u := range w.S3.ListIncompleteUploads(testCtx, storagetest.Bucket, key, true) {
		w.Must(u.Err)
		if u.Key == key {
			n++
		}
	}
	return n
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
