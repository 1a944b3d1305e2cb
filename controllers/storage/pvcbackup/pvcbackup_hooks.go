package pvcbackup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// The hooks of a backup run (spec.hooks): commands run in the application's pods through the
// pods/exec API, before the snapshot or the copy starts and after it is taken. They run inside
// the reconcile, one after the other, each bounded by its timeout (at most 10 minutes): a run's
// hooks hold one of the controller's workers while they run.
//
// What survives a restart of the manager is what the status records (status.activeRun.hooks):
//   - A run with hooks is recorded in the status before any hook runs (startRun writes the
//     status instead of the one-request start of issue 13), with the session of the manager
//     process that may run them.
//   - Before-hooks run at most once per run. A manager that finds the before-hooks of another
//     session unrecorded cannot know how many ran: it runs none again and ends the run failed
//     (HooksInterrupted), after running the after-hooks.
//   - After-hooks run at least once once any before-hook may have run, also when the run
//     fails; twice only when the manager stops between running them and recording them (so
//     they must be safe to repeat: a thaw of a thawed filesystem, a second BGSAVE wait).
//
// Within one process, results that ran but whose status write failed (a conflict) are kept in
// hookMemory and recorded by the next reconcile instead of running the hooks again.

// Hook failure reasons (status.lastRun.reason, hook results and events).
const (
	// ReasonHookFailed: the command exited with a non-zero code.
	ReasonHookFailed = "HookFailed"
	// ReasonHookTimedOut: the command did not end within its timeout; the exec was cancelled.
	ReasonHookTimedOut = "HookTimedOut"
	// ReasonHookPodNotFound: the selector matched no running pod, or the pod has no such
	// container.
	ReasonHookPodNotFound = "HookPodNotFound"
	// ReasonHookExecFailed: the exec could not be made (refused by the API server or the
	// kubelet, the stream broke).
	ReasonHookExecFailed = "HookExecFailed"
	// ReasonHooksInterrupted: the manager stopped while it ran the before-hooks; how many ran is
	// unknown, so none is run again and no backup is made.
	ReasonHooksInterrupted = "HooksInterrupted"
	// ReasonHooksNotAllowed (Ready=False, polled; lastRun.reason): spec.hooks in a namespace
	// without the label LabelAllowHooks: no run starts.
	ReasonHooksNotAllowed = "HooksNotAllowed"
	// ReasonBeforeHooks (Running=True): the run's before-hooks run next.
	ReasonBeforeHooks = "RunningBeforeHooks"
	// eventHookContinuing is the Warning event of a failed hook with onError Continue.
	eventHookContinuing = "HookFailedContinuing"
)

// LabelAllowHooks on a namespace, with the value "true", allows the PVCBackups in it to run
// hooks: the operator's ClusterRole may exec in every pod of the cluster (RBAC cannot make that
// depend on a PVCBackup), and whoever may write a PVCBackup chooses the command. Labelling a
// namespace is a cluster administrator's decision (namespaced roles cannot), so a namespace's
// users get exec through the operator only where an administrator agreed.
const LabelAllowHooks = "storage.okgoes.com/allow-hooks"

// outputTail is how much of a hook's output the status keeps: the end, where errors are.
const outputTail = 1024

// PodExec runs a command in a container of a running pod, as `kubectl exec` does: the real one
// goes through the API server's pods/exec subresource to the kubelet (NewPodExecutor). Tests
// use a stand-in for the kubelet (storagetest.LocalKubelet).
type PodExec interface {
	// Exec runs command in container of pod, writes what it prints (stdout and stderr) to
	// output, and returns its exit code once it has ended. err is set when the command could
	// not be run, or did not end before ctx did: then exitCode means nothing.
	Exec(ctx context.Context, pod *corev1.Pod, container string, command []string, output io.Writer) (exitCode int, err error)
}

// hookMemory is, per PVCBackup, the hook results of its latest run that this process ran: the
// reconcile whose status write failed after running hooks leaves them here for the next one.
type hookMemory struct {
	mu   sync.Mutex
	runs map[types.NamespacedName]hookMemo
}

type hookMemo struct {
	runID string
	ran   map[storagev1.HookPhase][]storagev1.HookResult
}

func (m *hookMemory) get(key types.NamespacedName, runID string, phase storagev1.HookPhase) ([]storagev1.HookResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	memo, ok := m.runs[key]
	if !ok || memo.runID != runID {
		return nil, false
	}
	res, ok := memo.ran[phase]
	return res, ok
}

func (m *hookMemory) put(key types.NamespacedName, runID string, phase storagev1.HookPhase, res []storagev1.HookResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.runs = map[types.NamespacedName]hookMemo{}
	}
	memo := m.runs[key]
	if memo.runID != runID {
		memo = hookMemo{runID: runID, ran: map[storagev1.HookPhase][]storagev1.HookResult{}}
	}
	memo.ran[phase] = res
	m.runs[key] = memo
}

// hookSession names this manager process in status.activeRun.hooks.session.
func (r *PVCBackupReconciler) hookSession() string {
	r.sessionOnce.Do(func() {
		if r.HookSession != "" {
			return
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		r.HookSession = hex.EncodeToString(b)
	})
	return r.HookSession
}

// hasHooks tells whether runs of pb run hooks.
func hasHooks(pb *storagev1.PVCBackup) bool {
	h := pb.Spec.Hooks
	return h != nil && len(h.Before)+len(h.After) > 0
}

// hooksOf is the list of hooks of phase in the spec (the spec of now: an edit during a run
// changes the hooks still to run).
func hooksOf(pb *storagev1.PVCBackup, phase storagev1.HookPhase) []storagev1.BackupHook {
	if pb.Spec.Hooks == nil {
		return nil
	}
	if phase == storagev1.HookBefore {
		return pb.Spec.Hooks.Before
	}
	return pb.Spec.Hooks.After
}

// afterHooksDue tells whether the active run still owes its after-hooks: its before-hooks ran
// (or may have) and the after-hooks are not recorded.
func afterHooksDue(run *storagev1.ActiveRun) bool {
	return run != nil && run.Hooks != nil && run.Hooks.BeforeDone && !run.Hooks.AfterDone
}

// reconcileBeforeHooks runs the before-hooks of the active run, once, and goes on to the
// snapshot or the copy; a failure ends the run (after its after-hooks, runFinishedUnrecorded).
func (r *PVCBackupReconciler) reconcileBeforeHooks(ctx context.Context, s *scope) (runState, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if err := r.ensureFresh(ctx, s); err != nil { // never hooks for a run a stale copy shows
		return runDone, err
	}
	h := run.Hooks
	key := client.ObjectKeyFromObject(pb)
	results, ran := r.hookMemory.get(key, run.ID, storagev1.HookBefore)
	if !ran && h.Session != r.hookSession() {
		// Recorded by another manager process, which stopped before recording the before-hooks:
		// some may have run (a frozen application). None runs again; the after-hooks thaw.
		h.Session, h.BeforeDone = r.hookSession(), true
		return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: ReasonHooksInterrupted,
			Message: "the operator restarted while the before-hooks of this run may have been running: how many ran is unknown, " +
				"so none ran again and no backup was made; the after-hooks ran. The next scheduled run starts over"})
	}
	if !ran {
		if err := r.checkHooksAllowed(ctx, pb); err != nil {
			if _, ok := errclass.AsWaiting(err); !ok {
				return runDone, err
			}
			// The label was removed since the run started: nothing ran, nothing is to undo.
			h.BeforeDone, h.AfterDone = true, true
			return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: ReasonHooksNotAllowed,
				Message: "no hook ran and no backup was made: " + errclass.Of(err).Message})
		}
		results = r.runHooks(ctx, s, storagev1.HookBefore)
		r.hookMemory.put(key, run.ID, storagev1.HookBefore, results)
	}
	h.Results = boundedResults(append(h.Results, results...))
	h.BeforeDone = true
	if failed := firstFailure(pb, results); failed != nil {
		return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: failed.Reason,
			Message: "no backup was made: " + failureMessage(failed) + "; the after-hooks ran"})
	}
	if pb.Spec.Snapshot != nil {
		return runSnapshotting, nil
	}
	return runUploading, nil
}

// reconcileAfterHooks runs the after-hooks of the active run, once, and goes on to s.afterNext:
// the upload of the snapshot, or the record of the run's end. An after-hook that fails with
// onError Fail fails the run (the application may still be frozen); a backup already written
// stays, and the message says so.
func (r *PVCBackupReconciler) reconcileAfterHooks(ctx context.Context, s *scope) (runState, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if err := r.ensureFresh(ctx, s); err != nil {
		return runDone, err
	}
	h := run.Hooks
	key := client.ObjectKeyFromObject(pb)
	results, ran := r.hookMemory.get(key, run.ID, storagev1.HookAfter)
	if !ran {
		results = r.runHooks(ctx, s, storagev1.HookAfter)
		r.hookMemory.put(key, run.ID, storagev1.HookAfter, results)
	}
	h.Session = r.hookSession()
	h.Results = boundedResults(append(h.Results, results...))
	h.AfterDone = true
	failed := firstFailure(pb, results)
	switch {
	case failed == nil:
		return s.afterNext, nil
	case s.outcome == nil: // the snapshot is taken, nothing uploaded: the run ends here
		return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: failed.Reason,
			Message: "the snapshot was taken but not uploaded: " + failureMessage(failed)})
	case s.outcome.Result == storagev1.RunSucceeded:
		s.outcome.Result, s.outcome.Reason = storagev1.RunFailed, failed.Reason
		s.outcome.Message = fmt.Sprintf("backup %s was written (%s) and is restorable, but the application may not have been thawed: %s",
			run.ID, s.outcome.ObjectKey, failureMessage(failed))
	default: // the run failed already: its reason stands, the hook's failure is added
		s.outcome.Message += "; and " + failureMessage(failed)
	}
	return runFinishedUnrecorded, nil
}

// afterHooksThen runs the after-hooks, then goes on to next.
func afterHooksThen(s *scope, next runState) (runState, error) {
	s.afterNext = next
	return runAfterHooks, nil
}

// firstFailure is the first result of a hook with onError Fail that failed; nil when none.
func firstFailure(pb *storagev1.PVCBackup, results []storagev1.HookResult) *storagev1.HookResult {
	for i := range results {
		res := &results[i]
		if res.Reason == "" {
			continue
		}
		hooks := hooksOf(pb, res.Phase)
		if int(res.Index) < len(hooks) && hooks[res.Index].Continues() {
			continue
		}
		return res
	}
	return nil
}

// runHooks runs the hooks of phase in order, each in every running pod its selector matches.
// It stops at the first failure of a hook with onError Fail, except for after-hooks: each of
// them runs, so that one failed thaw does not keep the next from running.
func (r *PVCBackupReconciler) runHooks(ctx context.Context, s *scope, phase storagev1.HookPhase) []storagev1.HookResult {
	pb := s.backup
	var results []storagev1.HookResult
	for i, hook := range hooksOf(pb, phase) {
		ran := r.runHook(ctx, s, phase, int32(i), hook)
		results = append(results, ran...)
		for _, res := range ran {
			r.hookEvent(pb, res, hook)
		}
		if phase == storagev1.HookBefore && firstFailure(pb, ran) != nil {
			break
		}
	}
	return results
}

// runHook runs one hook in each pod its selector matches.
func (r *PVCBackupReconciler) runHook(ctx context.Context, s *scope, phase storagev1.HookPhase, index int32, hook storagev1.BackupHook) []storagev1.HookResult {
	name := hookName(phase, index)
	pods, err := r.hookPods(ctx, s.backup, hook)
	if err != nil {
		return []storagev1.HookResult{{Phase: phase, Index: index, Reason: ReasonHookExecFailed,
			Message: fmt.Sprintf("hook %s: listing its pods failed: %v", name, err)}}
	}
	if len(pods) == 0 {
		sel, _ := metav1.LabelSelectorAsSelector(&hook.Selector)
		return []storagev1.HookResult{{Phase: phase, Index: index, Reason: ReasonHookPodNotFound,
			Message: fmt.Sprintf("hook %s: no running pod in namespace %s matches the selector %q: check spec.hooks.%s[%d].selector and that the application runs",
				name, s.backup.Namespace, sel, strings.ToLower(string(phase)), index)}}
	}
	var results []storagev1.HookResult
	for i := range pods {
		results = append(results, r.execHook(ctx, phase, index, hook, &pods[i]))
	}
	return results
}

// hookPods are the running pods of the hook's selector in pb's namespace, by name.
func (r *PVCBackupReconciler) hookPods(ctx context.Context, pb *storagev1.PVCBackup, hook storagev1.BackupHook) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(&hook.Selector)
	if err != nil {
		return nil, err
	}
	reader := client.Reader(r.Client)
	if r.APIReader != nil {
		reader = r.APIReader // pods are not in the manager's cache
	}
	list := &corev1.PodList{}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := reader.List(lctx, list, client.InNamespace(pb.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// execHook runs hook in pod and says how it went.
func (r *PVCBackupReconciler) execHook(ctx context.Context, phase storagev1.HookPhase, index int32, hook storagev1.BackupHook, pod *corev1.Pod) storagev1.HookResult {
	name := hookName(phase, index)
	res := storagev1.HookResult{Phase: phase, Index: index, Pod: pod.Name, Container: hook.Container}
	if res.Container == "" && len(pod.Spec.Containers) > 0 {
		res.Container = pod.Spec.Containers[0].Name
	}
	if !hasContainer(pod, res.Container) {
		res.Reason = ReasonHookPodNotFound
		res.Message = fmt.Sprintf("hook %s: pod %s has no container %q", name, pod.Name, res.Container)
		return res
	}
	if r.PodExec == nil {
		res.Reason, res.Message = ReasonHookExecFailed, fmt.Sprintf("hook %s: this operator was built without pods/exec", name)
		return res
	}
	timeout := hook.TimeoutOrDefault()
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &tailWriter{max: outputTail}
	start := time.Now() // the real time the exec took, not the injected clock's
	code, err := r.PodExec.Exec(ectx, pod, res.Container, hook.Command, out)
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	res.Output = out.String()
	where := fmt.Sprintf("hook %s in pod %s container %s", name, pod.Name, res.Container)
	switch {
	case err != nil && (errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil):
		res.Reason = ReasonHookTimedOut
		res.Message = fmt.Sprintf("%s did not end within its timeout of %s and was cancelled (the command may still run in the container): "+
			"raise spec.hooks.%s[%d].timeout or make the command end sooner", where, timeout, strings.ToLower(string(phase)), index)
	case err != nil:
		res.Reason = ReasonHookExecFailed
		res.Message = fmt.Sprintf("%s could not be run: %v", where, err)
	case code != 0:
		res.ExitCode = ptr.To(int32(code))
		res.Reason = ReasonHookFailed
		res.Message = fmt.Sprintf("%s exited with code %d", where, code)
	default:
		res.ExitCode = ptr.To(int32(0))
	}
	return res
}

// hookEvent tells what a hook did: Normal when it succeeded, Warning otherwise.
func (r *PVCBackupReconciler) hookEvent(pb *storagev1.PVCBackup, res storagev1.HookResult, hook storagev1.BackupHook) {
	if r.Recorder == nil {
		return
	}
	name := hookName(res.Phase, res.Index)
	switch {
	case res.Reason == "":
		r.Recorder.Eventf(pb, corev1.EventTypeNormal, "HookSucceeded", "hook %s in pod %s container %s exited 0 after %s",
			name, res.Pod, res.Container, res.Duration)
	case hook.Continues():
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, eventHookContinuing, "%s (%s); onError is Continue: the backup goes on", failureMessage(&res), res.Reason)
	default:
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, res.Reason, "%s", failureMessage(&res))
	}
}

func hookName(phase storagev1.HookPhase, index int32) string {
	return fmt.Sprintf("%s[%d]", strings.ToLower(string(phase)), index)
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// failureMessage is the message of a failed hook with the start of its output tail: for the
// run's message and events (the whole tail is in the result's output).
func failureMessage(res *storagev1.HookResult) string {
	return res.Message + tailNote(storagekit.Truncate(res.Output, 512))
}

// maxHookResults is status.activeRun.hooks.results' maxItems: a status beyond it would be
// refused by the API server on every write.
const maxHookResults = 64

// boundedResults keeps at most maxHookResults results: when hooks ran in more pods than that,
// the successful results are dropped first (oldest first), so that every failure stays.
func boundedResults(results []storagev1.HookResult) []storagev1.HookResult {
	over := len(results) - maxHookResults
	if over <= 0 {
		return results
	}
	kept := make([]storagev1.HookResult, 0, maxHookResults)
	for _, res := range results {
		if over > 0 && res.Reason == "" {
			over--
			continue
		}
		kept = append(kept, res)
	}
	if len(kept) > maxHookResults {
		kept = kept[:maxHookResults]
	}
	return kept
}

// tailNote is the output tail for a message, quoted; nothing when there is none.
func tailNote(out string) string {
	if out == "" {
		return ""
	}
	return fmt.Sprintf("; its output ends: %q", out)
}

// tailWriter keeps the last max bytes written to it. Nothing else of a hook's output is kept or
// logged: what a command prints may be secret, and the status is readable by whoever reads the
// PVCBackup.
type tailWriter struct {
	max       int
	buf       []byte
	truncated bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
		w.truncated = true
	}
	return len(p), nil
}

// String is the tail as valid UTF-8, marked when its start was cut off.
func (w *tailWriter) String() string {
	b := w.buf
	if w.truncated {
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
		return "[...]" + strings.ToValidUTF8(string(b), "?")
	}
	return strings.ToValidUTF8(string(b), "?")
}

// withoutOutput is results without their output tails and messages (older history entries):
// ten runs of 64 results each stay small; the reason, exit code and pod remain.
func withoutOutput(results []storagev1.HookResult) []storagev1.HookResult {
	if len(results) == 0 {
		return results
	}
	out := make([]storagev1.HookResult, len(results))
	for i, r := range results {
		r.Output, r.Message = "", ""
		out[i] = r
	}
	return out
}

// snapshotCut tells whether the active run's VolumeSnapshot has been cut (its creation time is
// set, or it is ready to use): what the application wrote before it is in the snapshot. A run
// that takes several snapshots (a group of PVCs) is cut when all are: this is the one place that
// decides when the after-hooks are due.
func (r *PVCBackupReconciler) snapshotCut(ctx context.Context, s *scope) (bool, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if run.VolumeGroupSnapshotClass != "" {
		return r.groupSnapshotCut(ctx, s)
	}
	for i := range runMembers(pb, run) {
		vs := &snapshotv1.VolumeSnapshot{}
		err := r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: memberObjectName(pb, run, i)}, vs)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("get VolumeSnapshot: %w", err)
		}
		if vs.Status == nil || (vs.Status.CreationTime == nil && !ptr.Deref(vs.Status.ReadyToUse, false)) {
			return false, nil
		}
	}
	return true, nil
}

// checkHooksAllowed is nil when pb runs no hooks or its namespace has LabelAllowHooks=true, and
// a Waiting HooksNotAllowed otherwise (polled: labelling the namespace heals it). The namespace
// is read uncached: the manager caches no Namespaces. A PVCBackup the operator writes itself
// (a RedisCache's) is held to the same rule: whoever can edit it can change its command.
func (r *PVCBackupReconciler) checkHooksAllowed(ctx context.Context, pb *storagev1.PVCBackup) error {
	if !hasHooks(pb) {
		return nil
	}
	reader := client.Reader(r.Client)
	if r.APIReader != nil {
		reader = r.APIReader
	}
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: pb.Namespace}, ns); err != nil {
		return fmt.Errorf("get namespace %s: %w", pb.Namespace, err)
	}
	if ns.Labels[LabelAllowHooks] == "true" {
		return nil
	}
	return errclass.Waiting(ReasonHooksNotAllowed, fmt.Sprintf(
		"spec.hooks runs commands in pods of namespace %s, which does not allow hooks: a cluster administrator allows them with "+
			"`kubectl label namespace %s %s=true` (what that grants: docs/application-backups.md, RBAC); or remove spec.hooks",
		pb.Namespace, pb.Namespace, LabelAllowHooks), r.Poll())
}
