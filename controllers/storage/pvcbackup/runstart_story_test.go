package pvcbackup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// requestLog records the requests of a reconciler: its writes through the client, its uncached
// reads of PVCBackups through the APIReader.
type requestLog struct {
	mu       sync.Mutex
	requests []string
}

func (l *requestLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, fmt.Sprintf(format, args...))
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.requests
	l.requests = nil
	return r
}

// loggedReconciler is the world's reconciler with its requests logged.
func (w *world) loggedReconciler(log *requestLog) *PVCBackupReconciler {
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	w.Must(err)
	c := interceptor.NewClient(live, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				log.add("create Job")
			}
			return c.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			log.add("patch %s", sub)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	reader := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*storagev1.PVCBackup); ok {
				log.add("uncached get PVCBackup")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return &PVCBackupReconciler{Client: c, Deps: w.Deps(reader), SnapshotsAvailable: true}
}

// When a run is due, the reconcile creates its Job from a current copy and writes nothing else:
// one write per run start (issue 13: 1,000 runs due the same minute). The reconcile the Job's
// creation wakes records the run, from the Job's annotations, and creates nothing.
func TestARunIsStartedFirstAndRecordedByTheNextReconcile(t *testing.T) {
	w := newWorld(t)
	log := &requestLog{}
	w.r = w.loggedReconciler(log)
	pb := w.Backup("nightly", "0 * * * *")
	w.Create(pb)
	w.Reconcile(pb)
	log.take()

	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.Clock.Set(tick.Add(time.Second))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); fmt.Sprint(got) != "[create Job]" {
		t.Errorf("requests of the run start: %q, want the Job's create only (the copy is the one the reconciler wrote)", got)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	jobs := w.Jobs()
	if pb.Status.ActiveRun != nil || len(jobs) != 1 {
		t.Fatalf("after the start: active=%+v, %d Jobs; want no status written and one Job", pb.Status.ActiveRun, len(jobs))
	}

	w.Clock.Set(tick.Add(3 * time.Second))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil { // woken by the Job's creation
		t.Fatal(err)
	}
	if got := log.take(); fmt.Sprint(got) != "[patch status]" {
		t.Errorf("requests of the reconcile after the start: %q, want the status patch only", got)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	run := pb.Status.ActiveRun
	if run == nil || run.ID != jobs[0].Labels[storagekit.LabelRun] || !run.ScheduledTime.Time.Equal(tick) ||
		!run.StartTime.Time.Equal(tick.Add(time.Second)) || run.Engine != pb.Status.Engine || run.Engine == "" {
		t.Fatalf("recorded run %+v for Job %s (status.engine %q)", run, jobs[0].Name, pb.Status.Engine)
	}
	if pb.Status.LastScheduleTime == nil || !pb.Status.LastScheduleTime.Time.Equal(tick) || pb.Status.SkippedSchedules != 0 {
		t.Errorf("schedule bookkeeping: last %v, skipped %d", pb.Status.LastScheduleTime, pb.Status.SkippedSchedules)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "no pod yet") {
		t.Errorf("Running = %+v, want WaitingForPod: the Job has no pod yet", c)
	}
	w.Reconcile(pb) // the run is followed: nothing to write, nothing to create
	if got := log.take(); len(got) != 0 || len(w.Jobs()) != 1 {
		t.Errorf("the reconcile after the record: %q, %d Jobs", got, len(w.Jobs()))
	}
}

// A manual run that was started but not recorded (the manager stopped in between, here: a new
// reconciler) is recorded with its trigger handled, and started once only.
func TestAStartedManualRunIsRecordedOnce(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("app", "@daily")
	w.Create(pb)
	w.Reconcile(pb)
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "before-upgrade"}
	w.Must(k8s.Update(testCtx, pb))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	w.r = &PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s), SnapshotsAvailable: true} // a restarted manager
	w.Reconcile(pb)
	w.Reconcile(pb)
	run := pb.Status.ActiveRun
	if run == nil || !run.Manual || pb.Status.LastManualTrigger != "before-upgrade" || len(w.Jobs()) != 1 {
		t.Fatalf("active %+v, last trigger %q, %d Jobs", run, pb.Status.LastManualTrigger, len(w.Jobs()))
	}
}

// A run decided from a copy older than the API server's, of which the reconciler knows nothing
// (a restarted manager; here: the user suspended the backup just before the tick, and the cache
// has not seen it) is neither recorded nor started.
func TestARunIsNotStartedFromAStaleCopy(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("nightly", "0 * * * *")
	w.Create(pb)
	w.Reconcile(pb)
	stale := pb.DeepCopy()
	pb.Spec.Suspend = true
	w.Must(k8s.Update(testCtx, pb))
	suspended := pb.ResourceVersion

	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.Clock.Set(tick.Add(time.Second))
	r := &PVCBackupReconciler{Client: storagetest.LaggingCache(t, stale), Deps: w.Deps(k8s), SnapshotsAvailable: true}
	res, err := r.Reconcile(testCtx, storagetest.ReqFor(pb))
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("reconcile from a stale copy: %+v, %v; want a requeue and no error", res, err)
	}
	if jobs := w.Jobs(); len(jobs) != 0 {
		t.Errorf("a Job was created from the stale copy: %s", jobs[0].Name)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.ResourceVersion != suspended || pb.Status.ActiveRun != nil {
		t.Errorf("the stale copy's run was recorded: %+v", pb.Status)
	}
}

// A run that was started is recorded even when the spec changed before the reconcile that
// records it (here: suspended): its Job exists and runs, so the status must follow it.
func TestAStartedRunIsRecordedAfterASpecChange(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("nightly", "0 * * * *")
	w.Create(pb)
	w.Reconcile(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	pb.Spec.Suspend = true
	w.Must(k8s.Update(testCtx, pb))
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || len(w.Jobs()) != 1 || w.Jobs()[0].Labels[storagekit.LabelRun] != pb.Status.ActiveRun.ID {
		t.Fatalf("the started run is not recorded: active %+v, %d Jobs", pb.Status.ActiveRun, len(w.Jobs()))
	}
	job := w.Job(pb)
	w.FinishJob(job, false)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.ID != job.Labels[storagekit.LabelRun] || pb.Status.ActiveRun != nil {
		t.Errorf("the run's end: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
}

// blindToRunObjects is a cache that has not received the run objects yet: no Job or
// VolumeSnapshot is found, by name or by list.
func blindToRunObjects(t *testing.T) client.Client {
	t.Helper()
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			switch obj.(type) {
			case *batchv1.Job, *snapshotv1.VolumeSnapshot:
				return apierrors.NewNotFound(schema.GroupResource{Resource: "runobjects"}, k.Name)
			}
			return c.Get(ctx, k, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch list.(type) {
			case *batchv1.JobList, *snapshotv1.VolumeSnapshotList:
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
}

// One run at a time, even in the instant after a start, when the cache does not show the run's
// Job yet and its start is not recorded: a new manual trigger set then starts no second run.
func TestNoSecondRunStartsBeforeTheFirstIsSeen(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("app", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "first"}
	w.Create(pb)
	w.r.Client = blindToRunObjects(t)
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	pb.Spec.Trigger.Manual = "second"
	w.Must(k8s.Update(testCtx, pb))
	w.Clock.Set(w.Clock.Now().Add(2 * time.Second))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	if jobs := w.Jobs(); len(jobs) != 1 {
		t.Fatalf("%d Jobs: a second run started while the first was not seen yet", len(jobs))
	}
	w.r.Client = k8s // the cache catches up: the first run is recorded, the second waits for it
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || pb.Status.LastManualTrigger != "first" || len(w.Jobs()) != 1 {
		t.Errorf("active %+v, last trigger %q, %d Jobs; want the first run recorded, alone",
			pb.Status.ActiveRun, pb.Status.LastManualTrigger, len(w.Jobs()))
	}
}

func TestAFinishedBackupRunIsNotStartedAgainFromAStaleCache(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("app", "@daily")
	w.StartManual(pb, "once")
	stale := pb.DeepCopy() // the run is active, its Job running
	job := w.Job(pb)
	if res := w.RunMover(job, storagetest.Volume(t)); res.Result != "Succeeded" {
		t.Fatalf("backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.ActiveRun != nil || pb.Status.LastRun == nil {
		t.Fatalf("the run did not finish: %+v", pb.Status)
	}
	w.Reconcile(pb) // the outcome is saved: this one deletes the Job
	done := pb.DeepCopy()

	// The same reconciler, which wrote the end of the run itself, now reads through a cache
	// that has not caught up: its copy is not the one it wrote, so it is proved stale by a read.
	// A restarted manager (a new reconciler) reads as well.
	for _, r := range []*PVCBackupReconciler{w.r, {Deps: w.Deps(k8s), SnapshotsAvailable: true}} {
		r.Client = storagetest.LaggingCache(t, stale)
		res, err := r.Reconcile(testCtx, storagetest.ReqFor(pb))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the finished run's Job was created again (the backup would upload twice): %v", err)
		}
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.ResourceVersion != done.ResourceVersion {
		t.Errorf("a reconcile from a stale cache wrote the status: %+v", pb.Status)
	}
}
