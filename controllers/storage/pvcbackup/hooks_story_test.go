package pvcbackup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The hook stories: the application is a running pod (storagetest.AppPod); its commands run as
// real processes of the test (storagetest.LocalKubelet, the kubelet's side of pods/exec), in a
// directory that stands for the pod's filesystem. Each hook appends a line to the file "log"
// there, and the story appends "mover" when it runs the mover and "snapshot cut" when it plays
// the CSI driver: the log is the order things happened in.

// hookWorld is a world whose reconciler execs through a LocalKubelet, with a running app pod.
type hookWorld struct {
	*world
	kubelet *storagetest.LocalKubelet
	events  *record.FakeRecorder
}

func newHookWorld(t *testing.T) *hookWorld {
	t.Helper()
	w := &hookWorld{world: newWorld(t), kubelet: &storagetest.LocalKubelet{Dir: t.TempDir()}, events: record.NewFakeRecorder(100)}
	w.r.PodExec, w.r.Recorder = w.kubelet, w.events
	w.AppPod("db-0", map[string]string{"app": "db"})
	w.allowHooks(true)
	return w
}

// allowHooks plays the cluster administrator who labels the namespace (LabelAllowHooks).
func (w *hookWorld) allowHooks(allow bool) {
	w.T.Helper()
	ns := &corev1.Namespace{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Name: w.NS}, ns))
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	if allow {
		ns.Labels[LabelAllowHooks] = "true"
	} else {
		delete(ns.Labels, LabelAllowHooks)
	}
	w.Must(k8s.Update(testCtx, ns))
}

// restartManager replaces the reconciler by a new one, as a restarted manager process: a new
// session, nothing in memory.
func (w *hookWorld) restartManager() {
	w.r = &PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s), SnapshotsAvailable: true, PodExec: w.kubelet}
	w.r.Recorder = w.events
	w.Backups = func() reconcile.Reconciler { return w.r }
}

// logHook is a hook of the app pods that appends line to the log.
func logHook(line string) storagev1.BackupHook {
	return storagev1.BackupHook{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Command: []string{"sh", "-c", "echo '" + line + "' >> log"}}
}

// shHook is a hook of the app pods that runs script in sh.
func shHook(script string) storagev1.BackupHook {
	return storagev1.BackupHook{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Command: []string{"sh", "-c", script}}
}

func (w *hookWorld) note(line string) {
	w.T.Helper()
	f, err := os.OpenFile(filepath.Join(w.kubelet.Dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	w.Must(err)
	_, err = f.WriteString(line + "\n")
	w.Must(err)
	w.Must(f.Close())
}

func (w *hookWorld) log() string {
	data, err := os.ReadFile(filepath.Join(w.kubelet.Dir, "log"))
	if os.IsNotExist(err) {
		return ""
	}
	w.Must(err)
	return strings.Join(strings.Split(strings.TrimSpace(string(data)), "\n"), ", ")
}

// startRun creates pb, moves the clock to its first tick and reconciles twice: the start
// records the run, the next reconcile runs the before-hooks and goes on.
func (w *hookWorld) startRun(pb *storagev1.PVCBackup) {
	w.T.Helper()
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || pb.Status.ActiveRun.Hooks == nil || pb.Status.ActiveRun.Hooks.BeforeDone {
		w.T.Fatalf("the run with hooks is not recorded before its hooks: %+v", pb.Status.ActiveRun)
	}
	if w.log() != "" || len(w.Jobs()) != 0 {
		w.T.Fatalf("something ran before the run was recorded: log %q, %d Jobs", w.log(), len(w.Jobs()))
	}
	w.Reconcile(pb)
}

// upload runs the mover of the active run and lets the reconciler see its end.
func (w *hookWorld) upload(pb *storagev1.PVCBackup) {
	w.T.Helper()
	job := w.Job(pb)
	w.note("mover")
	if res := w.RunMover(job, storagetest.Volume(w.T)); !res.Succeeded() {
		w.T.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
}

// Without a snapshot, the before-hooks run before the mover Job exists and the after-hooks once
// the upload is over; their results are in the run's record and events.
func TestHooksRunAroundTheUpload(t *testing.T) {
	w := newHookWorld(t)
	w.AppPod("db-1", map[string]string{"app": "db"})
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze $POD_NAME")}, After: []storagev1.BackupHook{logHook("thaw $POD_NAME")}}
	pb.Spec.Hooks.Before[0].Command = []string{"sh", "-c", "echo freeze $POD_NAME >> log; echo frozen"}
	pb.Spec.Hooks.After[0].Command = []string{"sh", "-c", "echo thaw $POD_NAME >> log"}
	w.startRun(pb)
	if got := w.log(); got != "freeze db-0, freeze db-1" || len(w.Jobs()) != 1 {
		t.Fatalf("after the start: log %q, %d Jobs; want both pods frozen, then the Job", got, len(w.Jobs()))
	}
	w.Reconcile(pb) // the Job runs: nothing more happens
	w.upload(pb)
	if got := w.log(); got != "freeze db-0, freeze db-1, mover, thaw db-0, thaw db-1" {
		t.Fatalf("log %q: want the freezes, the mover, then the thaws", got)
	}
	run := pb.Status.LastRun
	if run == nil || run.Result != storagev1.RunSucceeded || len(run.Hooks) != 4 {
		t.Fatalf("last run: %+v", run)
	}
	first := run.Hooks[0]
	if first.Phase != storagev1.HookBefore || first.Pod != "db-0" || first.Container != "app" || ptr.Deref(first.ExitCode, -1) != 0 ||
		first.Output != "frozen\n" || first.Duration == "" || first.Reason != "" {
		t.Errorf("before-hook result: %+v", first)
	}
	if e := eventsWith(w.events, "Normal HookSucceeded"); len(e) != 4 || !strings.Contains(e[0], "hook before[0] in pod db-0 container app exited 0") {
		t.Errorf("events: %q", e)
	}
	w.Reconcile(pb)
	if got := w.log(); strings.Count(got, "thaw") != 2 || strings.Count(got, "freeze") != 2 {
		t.Errorf("hooks ran again after the run was recorded: %q", got)
	}
}

// With a snapshot, the after-hooks run as soon as the snapshot is cut, before its PVC is
// restored and the mover runs: the application is frozen only while the snapshot is taken.
func TestAfterHooksRunOnceTheSnapshotIsCut(t *testing.T) {
	w := newHookWorld(t)
	w.Must(k8s.Create(testCtx, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-snap-" + w.NS},
		Driver: "hostpath.csi.k8s.io", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}))
	pb := w.Backup("snap", "@hourly")
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: "csi-snap-" + w.NS}
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	vs := &snapshotv1.VolumeSnapshot{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: storagekit.RunObjectName(pb, pb.Status.ActiveRun)}, vs))
	w.Reconcile(pb)
	if got := w.log(); got != "freeze" {
		t.Fatalf("log %q before the snapshot is cut: want only the freeze", got)
	}

	// The CSI driver cuts the snapshot; it is not ready to use yet.
	w.note("snapshot cut")
	vs.Status = &snapshotv1.VolumeSnapshotStatus{CreationTime: ptr.To(metav1.Now()), ReadyToUse: ptr.To(false),
		BoundVolumeSnapshotContentName: ptr.To("snapcontent-x")}
	w.Must(k8s.Status().Update(testCtx, vs))
	w.Reconcile(pb)
	if got := w.log(); got != "freeze, snapshot cut, thaw" || len(w.Jobs()) != 0 {
		t.Fatalf("log %q, %d Jobs: want the thaw right after the cut, before any upload", got, len(w.Jobs()))
	}
	if h := pb.Status.ActiveRun.Hooks; h == nil || !h.AfterDone || len(h.Results) != 2 {
		t.Fatalf("the thaw is not recorded: %+v", h)
	}
	vs.Status.ReadyToUse = ptr.To(true)
	w.Must(k8s.Status().Update(testCtx, vs))
	w.Reconcile(pb)
	w.upload(pb)
	if got := w.log(); got != "freeze, snapshot cut, thaw, mover" || pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("log %q, last run %+v", got, pb.Status.LastRun)
	}
}

// Each way a before-hook fails ends the run with its own reason and a message that says what
// happened: no backup is made, and the after-hooks run all the same.
func TestBeforeHookFailuresEndTheRunAndThaw(t *testing.T) {
	tests := []struct {
		name   string
		hook   func(storagev1.BackupHook) storagev1.BackupHook
		reason string
		says   []string
	}{
		{"non-zero exit", func(h storagev1.BackupHook) storagev1.BackupHook {
			h.Command = []string{"sh", "-c", "echo 'cannot freeze: device busy' >&2; exit 3"}
			return h
		}, ReasonHookFailed, []string{"hook before[0] in pod db-0 container app exited with code 3", "cannot freeze: device busy"}},
		{"no pod matches", func(h storagev1.BackupHook) storagev1.BackupHook {
			h.Selector.MatchLabels = map[string]string{"app": "web"}
			return h
		}, ReasonHookPodNotFound, []string{`no running pod in namespace`, `matches the selector "app=web"`}},
		{"no such container", func(h storagev1.BackupHook) storagev1.BackupHook {
			h.Container = "postgres"
			return h
		}, ReasonHookPodNotFound, []string{`pod db-0 has no container "postgres"`}},
		{"hangs", func(h storagev1.BackupHook) storagev1.BackupHook {
			h.Command = []string{"sh", "-c", "echo waiting; sleep 600"}
			h.Timeout = &metav1.Duration{Duration: 2 * time.Second}
			return h
		}, ReasonHookTimedOut, []string{"did not end within its timeout of 2s and was cancelled", "waiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newHookWorld(t)
			pb := w.Backup("app", "@hourly")
			pb.Spec.Hooks = &storagev1.BackupHooks{
				Before: []storagev1.BackupHook{tt.hook(logHook("freeze")), logHook("second freeze")},
				After:  []storagev1.BackupHook{logHook("thaw")},
			}
			if tt.reason != ReasonHookPodNotFound {
				pb.Spec.Hooks.Before[0].Command[2] = "echo freeze >> log; " + pb.Spec.Hooks.Before[0].Command[2]
			}
			start := time.Now()
			w.startRun(pb)
			took := time.Since(start)
			want := "freeze, thaw"
			if tt.reason == ReasonHookPodNotFound {
				want = "thaw"
			}
			if got := w.log(); got != want {
				t.Errorf("log %q, want %q: the failed hook stops the before-hooks, the after-hooks run", got, want)
			}
			run := pb.Status.LastRun
			if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunFailed || run.Reason != tt.reason {
				t.Fatalf("want the run failed with %s: active %+v, last %+v", tt.reason, pb.Status.ActiveRun, run)
			}
			for _, s := range append(tt.says, "no backup was made") {
				if !strings.Contains(run.Message, s) {
					t.Errorf("the message does not say %q: %s", s, run.Message)
				}
			}
			if len(w.Jobs()) != 0 || len(w.Keys(storagekit.BackupPrefix(pb))) != 0 {
				t.Errorf("a failed before-hook let the backup run: %d Jobs, objects %v", len(w.Jobs()), w.Keys(storagekit.BackupPrefix(pb)))
			}
			if len(run.Hooks) != 2 || run.Hooks[0].Reason != tt.reason || run.Hooks[1].Phase != storagev1.HookAfter || run.Hooks[1].Reason != "" {
				t.Errorf("hook results: %+v", run.Hooks)
			}
			if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason != ReasonBackupFailed || !strings.Contains(c.Message, tt.reason) {
				t.Errorf("Ready = %+v", c)
			}
			if e := eventsWith(w.events, "Warning "+tt.reason); len(e) != 1 {
				t.Errorf("want one %s event: %q", tt.reason, e)
			}
			if tt.reason == ReasonHookTimedOut && took > time.Minute {
				t.Errorf("the hung hook was not cancelled at its timeout: the run took %s", took)
			}
		})
	}
}

// A hook with onError Continue that fails is recorded and warned about; the backup goes on.
func TestHookWithOnErrorContinueLetsTheBackupGoOn(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	lenient := shHook("echo optional step failed; exit 1")
	lenient.OnError = storagev1.HookContinue
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{lenient, logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	if got := w.log(); got != "freeze" || len(w.Jobs()) != 1 {
		t.Fatalf("log %q, %d Jobs: the failed hook with onError Continue stopped the run", got, len(w.Jobs()))
	}
	if e := eventsWith(w.events, "Warning "+eventHookContinuing); len(e) != 1 ||
		!strings.Contains(e[0], "exited with code 1") || !strings.Contains(e[0], "onError is Continue") {
		t.Errorf("events: %q", e)
	}
	w.upload(pb)
	run := pb.Status.LastRun
	if run == nil || run.Result != storagev1.RunSucceeded || len(run.Hooks) != 3 || run.Hooks[0].Reason != ReasonHookFailed ||
		ptr.Deref(run.Hooks[0].ExitCode, 0) != 1 {
		t.Fatalf("last run: %+v", run)
	}
}

// The manager restarts between the before-hooks and the end of the upload: the new process runs
// the after-hooks from what the status says, once.
func TestManagerRestartDoesNotSkipTheAfterHooks(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	job := w.Job(pb)
	w.restartManager()
	w.Reconcile(pb)
	if got := w.log(); got != "freeze" {
		t.Fatalf("the restarted manager ran hooks again while the Job runs: %q", got)
	}
	w.note("mover")
	w.RunMover(job, storagetest.Volume(t))
	w.FinishJob(job, true)
	w.Reconcile(pb)
	w.Reconcile(pb)
	if got := w.log(); got != "freeze, mover, thaw" {
		t.Fatalf("log %q: want the after-hook once, after the mover", got)
	}
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("last run: %+v", pb.Status.LastRun)
	}
}

// The manager restarts after it recorded a run with hooks and before it recorded its
// before-hooks: whether they ran is unknown. The new process runs none again and makes no
// backup (HooksInterrupted), and runs the after-hooks.
func TestManagerRestartDuringBeforeHooksThawsAndMakesNoBackup(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	w.Reconcile(pb) // the run is recorded with this process's session
	w.note("freeze (the old process, which then stopped)")
	w.restartManager()
	w.Reconcile(pb)
	if got := w.log(); got != "freeze (the old process, which then stopped), thaw" {
		t.Fatalf("log %q: want no second freeze, and the thaw", got)
	}
	run := pb.Status.LastRun
	if run == nil || run.Result != storagev1.RunFailed || run.Reason != ReasonHooksInterrupted || len(w.Jobs()) != 0 {
		t.Fatalf("last run %+v, %d Jobs", run, len(w.Jobs()))
	}
}

// The output a hook prints is kept as a 1 KiB tail, marked as cut.
func TestHookOutputIsATail(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{shHook("yes line | head -c 100000; echo; echo the end")}}
	w.startRun(pb)
	out := pb.Status.ActiveRun.Hooks.Results[0].Output
	if !strings.HasPrefix(out, "[...]") || !strings.HasSuffix(out, "the end\n") || len(out) > outputTail+len("[...]") {
		t.Errorf("output (%d bytes) is not the marked 1 KiB tail: %q...", len(out), out[:min(len(out), 40)])
	}
}

// Hooks run only in a namespace a cluster administrator labelled: elsewhere the PVCBackup is
// Ready=False HooksNotAllowed, saying how to allow them, and no run starts (nothing is exec'd);
// the label heals it. A label removed after a run started ends the run before any hook.
func TestHooksRunOnlyWhereTheNamespaceAllowsThem(t *testing.T) {
	w := newHookWorld(t)
	w.allowHooks(false)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	res := w.Reconcile(pb)
	w.Reconcile(pb)
	c := storagetest.Condition(pb, storagev1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonHooksNotAllowed ||
		!strings.Contains(c.Message, "kubectl label namespace "+w.NS+" "+LabelAllowHooks+"=true") {
		t.Errorf("Ready = %+v", c)
	}
	if pb.Status.ActiveRun != nil || len(w.kubelet.Execs()) != 0 || len(w.Jobs()) != 0 || res.RequeueAfter <= 0 {
		t.Fatalf("a run started without the namespace's consent: active %+v, execs %+v, %d Jobs; requeue %s",
			pb.Status.ActiveRun, w.kubelet.Execs(), len(w.Jobs()), res.RequeueAfter)
	}

	w.allowHooks(true)
	w.Reconcile(pb) // the run is recorded
	w.allowHooks(false)
	w.Reconcile(pb)
	run := pb.Status.LastRun
	if run == nil || run.Reason != ReasonHooksNotAllowed || !strings.Contains(run.Message, "no hook ran") || len(w.kubelet.Execs()) != 0 {
		t.Fatalf("last run %+v, execs %+v", run, w.kubelet.Execs())
	}
}

// An after-hook that fails (the thaw) fails the run even though its backup was written: the
// message says the backup is there and restorable, and that the application may still be
// frozen. The after-hooks after it still run.
func TestAFailingAfterHookFailsARunWhoseBackupWasWritten(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")},
		After: []storagev1.BackupHook{shHook("echo 'thaw failed: not frozen' >&2; exit 32"), logHook("second thaw")}}
	w.startRun(pb)
	w.upload(pb)
	if got := w.log(); got != "freeze, mover, second thaw" {
		t.Errorf("log %q: every after-hook runs, whatever the one before did", got)
	}
	run := pb.Status.LastRun
	if run == nil || run.Result != storagev1.RunFailed || run.Reason != ReasonHookFailed || run.ObjectKey == "" {
		t.Fatalf("last run: %+v", run)
	}
	for _, s := range []string{"was written (" + run.ObjectKey + ") and is restorable", "may not have been thawed",
		"hook after[0] in pod db-0 container app exited with code 32", "thaw failed: not frozen"} {
		if !strings.Contains(run.Message, s) {
			t.Errorf("the message does not say %q: %s", s, run.Message)
		}
	}
	if !w.Exists(run.ObjectKey) {
		t.Errorf("the written backup %s is gone", run.ObjectKey)
	}
	if ids := storagetest.BackupIDs(pb.Status.Backups); len(ids) != 1 || ids[0] != run.ID {
		t.Errorf("status.backups %v: want the written backup %s listed as restorable", ids, run.ID)
	}
}

// A PVCBackup deleted between its run's before- and after-hooks still thaws its application:
// its finalizer holds it until the after-hooks ran.
func TestDeletingAPVCBackupMidRunRunsItsAfterHooks(t *testing.T) {
	w := newHookWorld(t)
	pb := w.Backup("app", "@hourly")
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	if !storagetest.ControllerutilContains(pb, hooksFinalizer) || len(w.Jobs()) != 1 {
		t.Fatalf("finalizers %v, %d Jobs", pb.Finalizers, len(w.Jobs()))
	}
	w.Must(k8s.Delete(testCtx, pb))
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	if got := w.log(); got != "freeze, thaw" {
		t.Errorf("log %q: want the thaw of the deleted PVCBackup's run", got)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb); !apierrors.IsNotFound(err) {
		t.Errorf("the PVCBackup is still there: %v, finalizers %v", err, pb.Finalizers)
	}
}
