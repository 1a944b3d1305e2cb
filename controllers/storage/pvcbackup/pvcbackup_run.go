package pvcbackup

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// The backup run as one state machine. A run's state is derived, in each reconcile, from the
// PVCBackup's status (status.activeRun, status.history) and the run's objects (its Job,
// VolumeSnapshot, temporary PVC, found by their run label): nothing else is trusted to survive a
// restart of the manager. reconcileRun steps from the derived state, one state function at a
// time, each returning the next, until one has to wait for the world (a Job to run, a snapshot to
// become ready) or for the status write at the end of the reconcile.
//
//	runRecorded ──────────────► (state derived again)        objects of recorded runs deleted
//	runStartedUnrecorded ─────► runSnapshotting|runUploading  the run adopted from its first object
//	runBeforeHooks ───────────► runSnapshotting|runUploading | runFinishedUnrecorded (a hook failed)
//	runAfterHooks ────────────► s.afterNext (runSnapshotting, runVerifying, runFinishedUnrecorded)
//	runSnapshotting ──────────► runUploading | runFinishedUnrecorded | runScheduling (waits)
//	runUploading ─────────────► runVerifying | runFinishedUnrecorded | runScheduling (waits)
//	runVerifying ─────────────► runFinishedUnrecorded | runScheduling (waits)
//	runFinishedUnrecorded ────► runScheduling                  the outcome recorded in status
//	runScheduling ────────────► runDue | runDone               ticks counted, the next run decided
//	runDue ───────────────────► runSnapshotting|runUploading  (starting) ─► runStarted
//	                          ╰─► runDone: a run with hooks is recorded before any hook runs
//
// Hooks (spec.hooks, pvcbackup_hooks.go): a run with hooks starts in runBeforeHooks; its
// after-hooks run once its snapshot is cut (runSnapshotting), once its upload is over without a
// snapshot (runUploading), and in any case before its end is recorded (runFinishedUnrecorded),
// so a run that fails after its before-hooks still thaws the application.
//
//	runStarted, runDone: the reconcile ends.
//
// Completion is recorded before cleanup: runFinishedUnrecorded writes the outcome into the status
// and leaves the run's objects; only a later reconcile, which reads that outcome back from
// status.history, deletes them (runRecorded). Were they deleted first and the status write then
// failed, the next reconcile would find no Job and run the backup again.
//
// Three transitions are optimisations, each safe on its own:
//   - runDue → runStarted writes no status: the start costs one request, the create of the run's
//     first object, which carries the run in its annotations (storagekit.RunAnnotations); the
//     reconcile its create event wakes adopts it (runStartedUnrecorded). 1,000 runs due in the
//     same minute all start before the first is recorded (issue 13).
//   - runScheduling → runDone while startedRuns remembers a run this process started that
//     neither the status nor the cache shows yet: a stale cache never starts a second run.
//   - every create is made from a copy proved current (ensureFresh), which costs no read when the
//     copy has the resourceVersion the reconciler itself last wrote or read (seenVersions): a run
//     recorded as finished, whose Job is gone, is never started again.
type runState string

const (
	// runRecorded: status.history records a run whose objects are still there.
	runRecorded runState = "Recorded"
	// runStartedUnrecorded: a run's first object (Job or VolumeSnapshot) is there, with the run
	// annotations, and the status does not record the run (see runStarted).
	runStartedUnrecorded runState = "StartedUnrecorded"
	// runSnapshotting: the active run waits for its VolumeSnapshot and the PVC restored from it.
	runSnapshotting runState = "Snapshotting"
	// runUploading: the active run's backup Job streams the volume to S3.
	runUploading runState = "Uploading"
	// runVerifying: the backup is written; the verify Job reads it back (spec.verify).
	runVerifying runState = "Verifying"
	// runFinishedUnrecorded: the run's outcome is known (s.outcome) and status.activeRun still
	// names the run.
	runFinishedUnrecorded runState = "FinishedUnrecorded"
	// runScheduling: nothing more to do for an active run in this reconcile; the schedule's
	// ticks are counted and, without an active run, the next run decided.
	runScheduling runState = "Scheduling"
	// runDue: no active run and a tick or manual trigger is due.
	runDue runState = "Due"
	// runStarted: this reconcile created the new run's first object (errRunStarted).
	runStarted runState = "Started"
	// runDone: the reconcile has nothing more to do for the run.
	runDone runState = "Done"
	// runBeforeHooks: the active run has hooks whose before-hooks are not recorded.
	runBeforeHooks runState = "BeforeHooks"
	// runAfterHooks: the active run's after-hooks run now, then s.afterNext.
	runAfterHooks runState = "AfterHooks"
)

// reconcileRun derives the run's state and steps through the machine.
func (r *PVCBackupReconciler) reconcileRun(ctx context.Context, s *scope) error {
	objs, err := r.listRunObjects(ctx, s)
	if err != nil {
		return err
	}
	state := runStateOf(s, objs)
	for state != runDone && state != runStarted {
		if state, err = r.step(ctx, s, state, &objs); err != nil {
			return err
		}
	}
	if state == runStarted {
		r.started.add(client.ObjectKeyFromObject(s.backup), s.startedID, s.now)
		return errRunStarted
	}
	return nil
}

// runStateOf is the state a reconcile starts from: derived from the status and the run objects.
func runStateOf(s *scope, objs runObjects) runState {
	pb := s.backup
	switch {
	case len(objs.recorded) > 0:
		return runRecorded
	case pb.Status.ActiveRun == nil && objs.started != nil:
		return runStartedUnrecorded
	case pb.Status.ActiveRun == nil:
		return runScheduling
	case pb.Status.ActiveRun.Hooks != nil && !pb.Status.ActiveRun.Hooks.BeforeDone:
		return runBeforeHooks
	case pb.Spec.Snapshot != nil:
		return runSnapshotting
	}
	return runUploading
}

// step is the one switch of the machine: it runs the function of state and returns the next.
func (r *PVCBackupReconciler) step(ctx context.Context, s *scope, state runState, objs *runObjects) (runState, error) {
	switch state {
	case runRecorded:
		if err := r.deleteRecordedObjects(ctx, s, objs.recorded); err != nil {
			return runDone, err
		}
		objs.recorded = nil
		return runStateOf(s, *objs), nil
	case runStartedUnrecorded:
		adoptStartedRun(s, objs.started)
		objs.started = nil
		return runStateOf(s, *objs), nil
	case runSnapshotting:
		return r.reconcileSnapshotting(ctx, s)
	case runUploading:
		return r.reconcileUploading(ctx, s)
	case runVerifying:
		return r.reconcileVerifying(ctx, s)
	case runBeforeHooks:
		return r.reconcileBeforeHooks(ctx, s)
	case runAfterHooks:
		return r.reconcileAfterHooks(ctx, s)
	case runFinishedUnrecorded:
		if afterHooksDue(s.backup.Status.ActiveRun) { // a frozen application is thawed first
			return afterHooksThen(s, runFinishedUnrecorded)
		}
		r.finishRun(ctx, s, *s.outcome)
		if s.starting {
			return runStarted, nil // the start's reconcile writes no status (errRunStarted)
		}
		return runScheduling, nil
	case runScheduling:
		return r.reconcileScheduling(ctx, s)
	case runDue:
		return r.startRun(ctx, s)
	}
	return runDone, fmt.Errorf("unknown run state %q", state)
}

// waiting is the state after one that has to wait for the world: the schedule's ticks are still
// counted (runScheduling), unless this reconcile is the run's start, which has decided them.
func waiting(s *scope) runState {
	if s.starting {
		return runStarted
	}
	return runScheduling
}

// finished ends the active run with rec (runFinishedUnrecorded).
func finished(s *scope, rec storagev1.RunStatus) (runState, error) {
	s.outcome = &rec
	return runFinishedUnrecorded, nil
}

// reconcileSnapshotting takes the run's snapshots (one per member) and restores each into a PVC
// the mover reads (ensureSourceClaims); the run goes on to its upload once those PVCs exist.
func (r *PVCBackupReconciler) reconcileSnapshotting(ctx context.Context, s *scope) (runState, error) {
	if afterHooksDue(s.backup.Status.ActiveRun) {
		cut, err := r.snapshotCut(ctx, s)
		if err != nil {
			return runDone, err
		}
		if cut { // the application is thawed as soon as the snapshot holds its data
			return afterHooksThen(s, runSnapshotting)
		}
	}
	claims, err := r.ensureSourceClaims(ctx, s)
	switch {
	case err != nil:
		return runDone, err
	case s.runFailure != "":
		return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: s.runFailureReason, Message: s.runFailure})
	case claims == nil: // waiting for the snapshots
		s.requeue = min(s.requeue, 10*time.Second)
		return waiting(s), nil
	}
	s.claims = claims
	return runUploading, nil
}

// reconcileUploading creates the run's backup Job and follows it to its end.
func (r *PVCBackupReconciler) reconcileUploading(ctx context.Context, s *scope) (runState, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if s.claims == nil {
		s.claims = directClaims(runMembers(pb, run)) // no snapshot: the mover reads the PVCs themselves
	}
	job := &batchv1.Job{}
	err := r.runJobReader(s).Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, run)}, job)
	if apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return runDone, err
		}
		job = desiredBackupJob(pb, run, s.claims, r.MoverImage, storagekit.RemainingSeconds(runDeadline(pb, run), s.now))
		if err := storagekit.CreateOnce(ctx, r.Client, pb, job); err != nil {
			if apierrors.IsInvalid(err) {
				return runDone, errclass.Stalled(storagekit.ReasonInvalidSpec, fmt.Sprintf("the API server rejected the mover Job built from the spec: %v", err))
			}
			return runDone, fmt.Errorf("create mover Job: %w", err)
		}
		s.stage = ReasonUploading
		s.requeue = min(s.requeue, storagekit.RunPollInterval)
		return waiting(s), nil
	} else if err != nil {
		return runDone, fmt.Errorf("get mover Job: %w", err)
	}

	out := r.ReadMoverJob(ctx, job, run.StartTime.Time, s.now, pb.Spec.Mover.Deadline())
	switch {
	case !out.Finished:
		s.stage, s.stageMessage = out.Stage(ReasonUploading, "backup "+run.ID)
		s.requeue = min(s.requeue, out.Requeue(s.now, storagekit.RunPollInterval))
		if r.Outages.Recent(s.now) {
			// No Job event may come until the informer relists (apioutage.go): look again soon.
			s.requeue = min(s.requeue, storagekit.APIRetry)
		}
		if job.Status.Active > 0 { // only a mover that runs writes progress
			r.readProgress(ctx, s)
			if msg, stalled := stalledMessage(run.Progress, s.now, pb.Spec.Mover.StorageIdle()); stalled && s.stage == ReasonUploading {
				s.stage, s.stageMessage = ReasonStalled, msg
			}
		}
		return waiting(s), nil
	case out.Failed:
		if out.Result.PasswordRotated && pb.Status.Repository != nil { // the rotation stands though the backup failed
			pb.Status.Repository.PasswordChangeTime = ptr.To(metav1.NewTime(s.now))
		}
		recordImmutability(pb, out.Result, s.now)
		return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: out.Reason,
			Message: storagekit.FailureMessage(storagekit.BackupSource(pb), out.Reason, out.Message)})
	}
	m, err := r.readManifest(ctx, s, storagekit.ManifestKey(pb, run.ID))
	if err != nil {
		if objectstore.IsNotFound(err) {
			return finished(s, storagev1.RunStatus{Result: storagev1.RunFailed,
				Message: "the mover Job succeeded but wrote no manifest: the backup is not usable"})
		}
		return runDone, err // S3 hiccup: try again with backoff, the run stays active
	}
	rec := storagev1.RunStatus{
		Result: storagev1.RunSucceeded, ObjectKey: m.Archive.Key, Bytes: m.Archive.Bytes, SHA256: m.Archive.SHA256,
		Files: m.Files, ContentBytes: m.ContentBytes, Engine: storagekit.EngineOf(m),
	}
	engine := storagekit.ManifestEngine(m)
	if engine.HasRepository() {
		rec.ObjectKey, rec.SnapshotID, rec.Bytes = engine.BackupKey(storagekit.BackupPrefix(pb), run.ID), engine.SnapshotID(m), engine.StoredBytes(m)
		prev := pb.Status.Repository
		pb.Status.Repository = repositoryStatus(out.Result, s.now)
		if prev != nil { // the run's own check arrives with its record (housekeeping)
			pb.Status.Repository.Check = prev.Check
			if pb.Status.Repository.PasswordChangeTime == nil {
				pb.Status.Repository.PasswordChangeTime = prev.PasswordChangeTime
			}
		}
	}
	r.recordSkipped(pb, run.ID, &rec, m.Skipped)
	s.outcome = &rec
	next := runFinishedUnrecorded
	if pb.Spec.Verify {
		next = runVerifying
	}
	if afterHooksDue(run) { // no snapshot: the application is thawed once the upload is over
		return afterHooksThen(s, next)
	}
	return next, nil
}

// reconcileVerifying runs the verify Job of the active run (spec.verify) and adds its verdict to
// the run's outcome once it has finished.
func (r *PVCBackupReconciler) reconcileVerifying(ctx context.Context, s *scope) (runState, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.VerifyJobName(pb, run)}, job)
	if apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return runDone, err
		}
		job = desiredVerifyJob(pb, run, r.MoverImage, storagekit.RemainingSeconds(runDeadline(pb, run), s.now))
		if err := storagekit.CreateOnce(ctx, r.Client, pb, job); err != nil {
			return runDone, fmt.Errorf("create verify Job: %w", err)
		}
	} else if err != nil {
		return runDone, fmt.Errorf("get verify Job: %w", err)
	}
	out := r.ReadMoverJob(ctx, job, run.StartTime.Time, s.now, pb.Spec.Mover.Deadline())
	if !out.Finished {
		s.stage, s.stageMessage = out.Stage(ReasonVerifying, "verification of backup "+run.ID)
		s.requeue = min(s.requeue, out.Requeue(s.now, storagekit.RunPollInterval))
		return waiting(s), nil
	}
	verified := !out.Failed
	s.outcome.Verified, s.outcome.VerificationMessage = &verified, out.Message
	if verified {
		s.outcome.VerificationMessage = ""
	}
	return runFinishedUnrecorded, nil
}

// runJobReader is where the active run's Job is read: the cache, or the API server when the
// cache may not show the Job's end yet: for a while after an outage of the API server (the
// informers relist late, apioutage.go), and when a scheduled time has come during the run (it is
// counted as skipped only if the run really still goes). Neither happens at a run's start.
func (r *PVCBackupReconciler) runJobReader(s *scope) client.Reader {
	if r.APIReader != nil && (r.Outages.Recent(s.now) || tickDueDuringRun(s)) {
		return r.APIReader
	}
	return r.Client
}

// tickDueDuringRun tells whether a scheduled time has come since the last one handled.
func tickDueDuringRun(s *scope) bool {
	pb := s.backup
	if s.schedule == nil || pb.Spec.Suspend || pb.Status.ActiveRun == nil {
		return false
	}
	last := pb.CreationTimestamp.Time
	if l := pb.Status.LastScheduleTime; l != nil {
		last = l.Time
	}
	return !s.schedule.Next(last).After(s.now)
}

// runDeadline is when a run must be over.
func runDeadline(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) time.Time {
	return run.StartTime.Add(time.Duration(pb.Spec.Mover.Deadline()) * time.Second)
}

// reconcileScheduling counts the schedule's ticks (missed, skipped, the last handled) and, when no
// run is active and one is due, checks that everything a run needs is there (runDue).
func (r *PVCBackupReconciler) reconcileScheduling(ctx context.Context, s *scope) (runState, error) {
	pb := s.backup
	last := pb.Status.LastScheduleTime
	in := schedule.Input{Schedule: s.schedule, Created: pb.CreationTimestamp.Time, Now: s.now,
		Running: pb.Status.ActiveRun != nil, Suspended: pb.Spec.Suspend}
	if last != nil {
		in.LastScheduled = ptr.To(last.Time)
	}
	if d := pb.Spec.StartingDeadlineSeconds; d != nil {
		in.StartingDeadline = ptr.To(time.Duration(*d) * time.Second)
	}
	d := schedule.Decide(in)
	s.next = d.Next
	s.requeue = min(s.requeue, schedule.RequeueAfter(d, s.now))
	if s.finished != nil {
		// A run ended in this reconcile: its record is written first, and the next reconcile (a
		// second later) decides the next run. A run start writes no status (errRunStarted), and
		// would drop that record.
		return runDone, nil
	}
	if pb.Status.ActiveRun == nil && r.started.pending(client.ObjectKeyFromObject(pb), &pb.Status, s.now) {
		// Transition "started, not yet seen": this process started a run that neither the
		// status nor the cache shows yet (the reconcile its creation wakes records it): no
		// second run meanwhile. This is what makes a stale cache safe (startedRuns).
		s.requeue = min(s.requeue, storagekit.StaleCacheRetry)
		return runDone, nil
	}
	manual := pb.Spec.Trigger != nil && pb.Status.ActiveRun == nil &&
		schedule.ManualDue(pb.Spec.Trigger.Manual, pb.Status.LastManualTrigger)
	start := pb.Status.ActiveRun == nil && (d.Run != nil || manual)
	if pb.Status.ActiveRun == nil {
		// Everything a run needs must be there, checked now rather than by a failing pod: the
		// PVC and Secret on every reconcile (cheap reads), the bucket when a run is due, the
		// spec changed, or status.engine is not resolved yet (a PVCBackup an operator without
		// kopia wrote: its engine shows right after the upgrade, not at its next run). Until it
		// is, a due tick stays due (and runs late, within startingDeadlineSeconds).
		checkBucket := start || pb.Status.ObservedGeneration != pb.Generation || s3Trouble(pb) || pb.Status.Engine == ""
		if err := r.checkDependencies(ctx, s, checkBucket); err != nil {
			return runDone, err
		}
	}
	pb.Status.MissedSchedules += int64(d.Missed)
	pb.Status.SkippedSchedules += int64(d.Skipped)
	if d.Handled != nil {
		pb.Status.LastScheduleTime = ptr.To(metav1.NewTime(*d.Handled))
	}
	if !start {
		return runDone, nil
	}
	s.dueTick, s.dueManual = d.Run, manual
	return runDue, nil
}

// startRun makes the due run the active one and goes on to create its first object (its Job, or
// its snapshot), from a current copy (ensureFresh). The transitions of a start are the
// optimisation of issue 13 (1,000 runs due in the same minute): the start costs the API server
// one request, the create; the run's first object carries what the status is to record
// (storagekit.RunAnnotations), and the reconcile its create event wakes records it
// (runStartedUnrecorded). A failure is reported as for any run: the run is recorded, the next
// reconcile creates again.
func (r *PVCBackupReconciler) startRun(_ context.Context, s *scope) (runState, error) {
	pb := s.backup
	run := &storagev1.ActiveRun{StartTime: metav1.NewTime(s.now)}
	if s.dueTick != nil {
		run.ScheduledTime = metav1.NewTime(*s.dueTick)
	} else {
		run.ScheduledTime, run.Manual = metav1.NewTime(s.now), true
	}
	if s.dueManual {
		pb.Status.LastManualTrigger = pb.Spec.Trigger.Manual
	}
	run.ID = storagekit.RunID(run.ScheduledTime.Time, run.Manual)
	run.Engine = s.engine // resolved by checkDependencies, as a run is due
	if pb.Spec.IsGroup() {
		run.PVCs = s.members // resolved by checkDependencies: the run's members, once and for all
		run.VolumeGroupSnapshotClass = s.groupSnapshotClass
	}
	pb.Status.ActiveRun = run
	if hasHooks(pb) {
		// Not the one-request start: the run, and the session that may run its hooks, are in
		// the status before any hook runs, so that whichever manager comes next knows an
		// application may be frozen (pvcbackup_hooks.go). The next reconcile runs them.
		run.Hooks = &storagev1.RunHooks{Session: r.hookSession()}
		s.stage, s.stageMessage = ReasonBeforeHooks, fmt.Sprintf("backup %s: the before-hooks run next", run.ID)
		s.requeue = min(s.requeue, time.Second)
		return runDone, nil
	}
	s.starting, s.startedID = true, run.ID
	if pb.Spec.Snapshot != nil {
		return runSnapshotting, nil
	}
	return runUploading, nil
}

// finishRun records the end of the active run. Its Job and temporary objects stay until that
// record is saved (runRecorded removes them in a later reconcile): were they deleted
// first and the status write then failed, the next reconcile would find no Job and run again.
// What the bucket needs (housekeeping) is idempotent and done now.
func (r *PVCBackupReconciler) finishRun(ctx context.Context, s *scope, rec storagev1.RunStatus) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	rec.ID, rec.ScheduledTime, rec.StartTime, rec.Manual = run.ID, run.ScheduledTime, run.StartTime, run.Manual
	if rec.Engine == "" {
		// A failed run has no manifest to tell: it ran with the engine it started with. Left
		// empty, it would read as a run of an operator without kopia (resolveEngine: Archive).
		rec.Engine = run.Engine
	}
	rec.CompletionTime = metav1.NewTime(s.now)
	rec.Duration = s.now.Sub(run.StartTime.Time).Round(time.Second).String()
	rec.Message = storagekit.Truncate(rec.Message, 2048)
	if run.Hooks != nil {
		rec.Hooks = run.Hooks.Results
	}
	rec.PVCs, rec.VolumeGroupSnapshotClass = run.PVCs, run.VolumeGroupSnapshotClass
	st := &pb.Status
	st.LastRun = &rec
	st.History = append([]storagev1.RunStatus{rec}, st.History...)
	for i := 1; i < len(st.History); i++ { // hook output tails are kept for the newest run only
		st.History[i].Hooks = withoutOutput(st.History[i].Hooks)
	}
	if len(st.History) > historyLimit {
		st.History = st.History[:historyLimit]
	}
	if rec.Result == storagev1.RunSucceeded {
		st.LastBackup = s.now.UTC().Format(time.RFC3339)
	}
	st.ActiveRun = nil
	s.finished = &rec
	s.stage, s.stageMessage = "", ""
	// Never prune on the strength of a failed run or a backup that failed verification.
	prune := rec.Result == storagev1.RunSucceeded && (rec.Verified == nil || *rec.Verified)
	r.housekeeping(ctx, s, prune)
}

// errRunStarted ends the reconcile that started a run: it writes no status. The run's first
// object (Job or snapshot) carries what the status is to record of the run (RunAnnotations), and
// its create event wakes the reconcile that records it (runStartedUnrecorded). So when many runs
// are due in the same minute, each start costs the API server one request, the create, and the
// runs are recorded once all have started (issue 13: 1,000 runs due the same minute). The create
// is idempotent (the run's objects are named after the run) and made from a copy proved current
// (ensureFresh): a run recorded as finished, whose Job is gone, is never started again.
var errRunStarted = errors.New("the run was started; the reconcile its first object wakes records it")
