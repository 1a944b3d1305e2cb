// Package pvcbackup holds the PVCBackup reconciler: a stateless cron scheduler that runs one mover
// Job per scheduled time, streaming the PVC (or a CSI snapshot of it) to S3, then prunes the
// bucket by spec.retention. One file per concern: the reconcile and the run (_controller), what a
// run needs (_dependencies, _snapshot, _snapshotclass, _snapshotapi), its Jobs (_jobs), the engine
// of the next run (_engine), retention and housekeeping (_retention), status (_status, _stall),
// deletion (_finalizer), metrics (_metrics) and the watches (_setup). What it shares with the
// PVCRestore controller is in storagekit; it imports nothing of pvcrestore.
package pvcbackup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/phase"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

const (
	// finalizer guards the S3 objects of a PVCBackup with deletionPolicy Delete.
	finalizer    = "storage.okgoes.com/delete-backups"
	historyLimit = 10
)

// PVCBackupReconciler reconciles PVCBackup objects.
type PVCBackupReconciler struct {
	client.Client
	storagekit.Deps
	// SnapshotsAvailable is true when the cluster serves snapshot.storage.k8s.io/v1 at setup:
	// VolumeSnapshots are then watched and indexed from the start.
	SnapshotsAvailable bool
	// SnapshotAPIProbe, when set, asks the API server whether it serves the VolumeSnapshot API
	// now (SnapshotAPIServed), for a reconciler that found it absent at setup: asked again once
	// per poll interval, so that CRDs installed later heal spec.snapshot without a restart.
	SnapshotAPIProbe func(context.Context) (bool, error)
	snapshotAPI      snapshotAPI
	// watchSnapshots starts the watch on VolumeSnapshots that the setup skipped (set by
	// SetupWithManager when the API was absent).
	watchSnapshots func() error
	// seen is the resourceVersion of each PVCBackup that the reconciler last wrote or read
	// uncached (ensureFresh).
	seen storagekit.SeenVersions
	// started is the run this process last started per PVCBackup, until the status records it.
	started startedRuns
	// runObjectsIndexed is set by SetupWithManager: the manager's cache indexes the run objects
	// by PVCBackup (runObjectsIndex). Without it (a reconciler on an uncached client) they are
	// listed by label.
	runObjectsIndexed bool
}

// scope is what the phases of one reconcile share.
type scope struct {
	backup *storagev1.PVCBackup
	now    time.Time
	// store is opened lazily by storeFor and reused within the reconcile; passwordErr is what
	// the credentials Secret said about the kopia password (nil: it has one).
	store       storagekit.ObjectStore
	passwordErr error
	// base is the status as read at the start of this reconcile: what the status patch is
	// computed against.
	base *storagev1.PVCBackup
	// checkedFresh is set once ensureFresh found the PVCBackup current in this reconcile.
	checkedFresh bool
	// engine is the engine of the next run, when this reconcile resolved it.
	engine storagev1.BackupEngine
	// stage of the active run (SnapshotPending, Uploading) and a message about it.
	stage, stageMessage string
	// runFailure ends the active run as failed with this message (e.g. the snapshot failed), and
	// runFailureReason names why (lastRun.reason).
	runFailure, runFailureReason string
	// snapshotClass is the VolumeSnapshotClass of the next run's snapshot, when spec.snapshot is
	// set and checkDependencies resolved it.
	snapshotClass string
	// finished is the run that ended in this reconcile, for events and metrics.
	finished *storagev1.RunStatus
	// schedule is the parsed spec.schedule; next the next scheduled time; requeue the time to
	// wait for anything.
	schedule cron.Schedule
	next     time.Time
	requeue  time.Duration
}

// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list

// Reconcile schedules, starts, follows and records backup runs of one PVCBackup.
func (r *PVCBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pb := &storagev1.PVCBackup{}
	if err := r.Get(ctx, req.NamespacedName, pb); err != nil {
		if apierrors.IsNotFound(err) {
			forgetMetrics(req.Namespace, req.Name)
			r.seen.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := pb.DeepCopy()
	s := &scope{backup: pb, now: r.Clock.Now()}

	if !pb.DeletionTimestamp.IsZero() {
		err := r.reconcileDelete(ctx, s)
		if _, perr := r.patchStatus(ctx, base, pb); perr != nil && err == nil {
			err = perr
		}
		return ctrl.Result{}, err
	}
	if err := r.reconcileFinalizer(ctx, pb); err != nil {
		return ctrl.Result{}, err
	}
	base = pb.DeepCopy() // the finalizer patch moved the resourceVersion the status patch is locked on
	s.base = base

	err := phase.Run(ctx, s,
		r.reconcileSchedule,
		r.reconcileRunObjects,
		r.reconcileActiveRun,
		r.reconcileNextRun,
	)
	if res, retry := r.Retry(s.now, err); retry {
		// Not the work queue's growing backoff: try again soon, so that what happened during an
		// outage is recorded right after it (apioutage.go), or from the newer copy on its way.
		// Nothing is written meanwhile.
		return res, nil
	}
	if errors.Is(err, errRunStarted) {
		// The create event of the run's first object wakes the reconcile that records the run,
		// behind the runs still to start (recordAfterStarts); this requeue is only the safety net,
		// at the same low priority (a higher one would move the record ahead again).
		return ctrl.Result{RequeueAfter: storagekit.RunPollInterval, Priority: ptr.To(handler.LowPriority)}, nil
	}
	computeStatus(pb, s, err)
	res, err := errclass.Result(err, s.requeue)
	observeMetrics(pb, s) // before the write, so a reader of the new status sees matching gauges
	_, perr := r.patchStatus(ctx, s.base, pb)
	if res, retry := r.Retry(s.now, perr); retry {
		return res, nil // a stale copy (Conflict): its newer one is on its way; or an outage
	}
	switch {
	case perr == nil && s.finished != nil:
		observeFinishedRun(pb, s)
		// The outcome is saved: come back soon to remove the run's objects (reconcileRunObjects)
		// and start the next run if one is due; a status write wakes no reconcile.
		res = shorter(res, time.Second)
	case perr != nil && err == nil:
		err = perr
	}
	r.recordTransitions(base, pb, s)
	return res, err
}

// shorter returns res with RequeueAfter at most d.
func shorter(res ctrl.Result, d time.Duration) ctrl.Result {
	if res.RequeueAfter == 0 || res.RequeueAfter > d {
		res.RequeueAfter = d
	}
	return res
}

// reconcileSchedule checks the schedule (admission checks only its shape) and computes the next
// scheduled time.
func (r *PVCBackupReconciler) reconcileSchedule(_ context.Context, s *scope) error {
	sched, err := schedule.Parse(s.backup.Spec.Schedule, ptr.Deref(s.backup.Spec.TimeZone, ""))
	if err != nil {
		return errclass.Stalled(ReasonInvalidSchedule, err.Error())
	}
	s.schedule = sched
	s.next = sched.Next(s.now)
	s.requeue = schedule.RequeueAfter(schedule.Decision{Next: s.next}, s.now)
	return nil
}

// reconcileActiveRun follows the run in progress: snapshot, Job, result, cleanup.
func (r *PVCBackupReconciler) reconcileActiveRun(ctx context.Context, s *scope) error {
	pb := s.backup
	run := pb.Status.ActiveRun
	if run == nil {
		return nil
	}
	claim, err := r.ensureSourceClaim(ctx, s)
	if err != nil {
		return err
	}
	if s.runFailure != "" {
		return r.finishRun(ctx, s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: s.runFailureReason, Message: s.runFailure})
	}
	if claim == "" { // waiting for the snapshot
		s.requeue = min(s.requeue, 10*time.Second)
		return nil
	}

	job := &batchv1.Job{}
	err = r.runJobReader(s).Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, run)}, job)
	if apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return err
		}
		job = desiredBackupJob(pb, run, claim, r.MoverImage, storagekit.RemainingSeconds(runDeadline(pb, run), s.now))
		if err := storagekit.CreateOnce(ctx, r.Client, pb, job); err != nil {
			if apierrors.IsInvalid(err) {
				return errclass.Stalled(storagekit.ReasonInvalidSpec, fmt.Sprintf("the API server rejected the mover Job built from the spec: %v", err))
			}
			return fmt.Errorf("create mover Job: %w", err)
		}
		s.stage = ReasonUploading
		s.requeue = min(s.requeue, storagekit.RunPollInterval)
		return nil
	} else if err != nil {
		return fmt.Errorf("get mover Job: %w", err)
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
		return nil
	case out.Failed:
		return r.finishRun(ctx, s, storagev1.RunStatus{Result: storagev1.RunFailed, Reason: out.Reason, Message: out.Message})
	}
	m, err := r.readManifest(ctx, s, storagekit.ManifestKey(pb, run.ID))
	if err != nil {
		if objectstore.IsNotFound(err) {
			return r.finishRun(ctx, s, storagev1.RunStatus{Result: storagev1.RunFailed,
				Message: "the mover Job succeeded but wrote no manifest: the backup is not usable"})
		}
		return err // S3 hiccup: try again with backoff, the run stays active
	}
	rec := storagev1.RunStatus{
		Result: storagev1.RunSucceeded, ObjectKey: m.Archive.Key, Bytes: m.Archive.Bytes, SHA256: m.Archive.SHA256,
		Files: m.Files, ContentBytes: m.ContentBytes, Engine: storagekit.EngineOf(m),
	}
	if rec.Engine == storagev1.EngineKopia {
		rec.ObjectKey, rec.SnapshotID, rec.Bytes = storagekit.ManifestKey(pb, run.ID), m.Kopia.SnapshotID, m.Kopia.UploadedBytes
		prev := pb.Status.Repository
		pb.Status.Repository = repositoryStatus(out.Result, s.now)
		if prev != nil { // the run's own check arrives with its record (housekeeping)
			pb.Status.Repository.Check = prev.Check
		}
	}
	r.recordSkipped(pb, run.ID, &rec, m.Skipped)
	if pb.Spec.Verify {
		verified, msg, done, err := r.reconcileVerify(ctx, s)
		if err != nil || !done {
			return err
		}
		rec.Verified, rec.VerificationMessage = &verified, msg
	}
	return r.finishRun(ctx, s, rec)
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

// reconcileVerify runs the verify Job of the active run (spec.verify) and reports its outcome
// once it has finished.
func (r *PVCBackupReconciler) reconcileVerify(ctx context.Context, s *scope) (verified bool, message string, done bool, err error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	job := &batchv1.Job{}
	err = r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.VerifyJobName(pb, run)}, job)
	if apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return false, "", false, err
		}
		job = desiredVerifyJob(pb, run, r.MoverImage, storagekit.RemainingSeconds(runDeadline(pb, run), s.now))
		if err := storagekit.CreateOnce(ctx, r.Client, pb, job); err != nil {
			return false, "", false, fmt.Errorf("create verify Job: %w", err)
		}
		err = nil
	} else if err != nil {
		return false, "", false, fmt.Errorf("get verify Job: %w", err)
	}
	out := r.ReadMoverJob(ctx, job, run.StartTime.Time, s.now, pb.Spec.Mover.Deadline())
	switch {
	case !out.Finished:
		s.stage, s.stageMessage = out.Stage(ReasonVerifying, "verification of backup "+run.ID)
		s.requeue = min(s.requeue, out.Requeue(s.now, storagekit.RunPollInterval))
		return false, "", false, nil
	case out.Failed:
		return false, out.Message, true, nil
	}
	return true, "", true, nil
}

// finishRun records the end of the active run. Its Job and temporary objects stay until that
// record is saved (reconcileRunObjects removes them in a later reconcile): were they deleted
// first and the status write then failed, the next reconcile would find no Job and run again.
// What the bucket needs (housekeeping) is idempotent and done now.
func (r *PVCBackupReconciler) finishRun(ctx context.Context, s *scope, rec storagev1.RunStatus) error {
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
	st := &pb.Status
	st.LastRun = &rec
	st.History = append([]storagev1.RunStatus{rec}, st.History...)
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
	return nil
}

// reconcileRunObjects looks at the Jobs, snapshots and temporary PVCs of the PVCBackup's runs
// (found by their run label, from the cache). Those of runs whose outcome status.history records
// are deleted. A run that was started but that the status does not record yet becomes the
// active run (adoptStartedRun): the reconcile that starts a run records nothing
// (reconcileNextRun), and a manager may also have stopped in between. The objects of the active
// run, and of a run whose end the status does not record yet (a stale cache, or a status write
// that failed), are kept.
func (r *PVCBackupReconciler) reconcileRunObjects(ctx context.Context, s *scope) error {
	pb := s.backup
	recorded := func(id string) bool {
		if run := pb.Status.ActiveRun; run != nil && run.ID == id {
			return false
		}
		for _, h := range pb.Status.History {
			if h.ID == id {
				return true
			}
		}
		// Older than everything history still holds: recorded once, then rotated out.
		h := pb.Status.History
		return len(h) == historyLimit && id < h[len(h)-1].ID
	}
	var sel client.ListOption = client.MatchingLabels{storagekit.LabelBackup: pb.Name}
	if r.runObjectsIndexed {
		sel = client.MatchingFields{runObjectsIndex: pb.Name}
	}
	type runObjects struct {
		kind string
		list client.ObjectList
	}
	lists := []runObjects{{"Job", &batchv1.JobList{}}, {"PersistentVolumeClaim", storagekit.ClaimMetadataList()}}
	if pb.Spec.Snapshot != nil || r.SnapshotsAvailable {
		if r.snapshotsServed(ctx) {
			lists = append(lists, runObjects{"VolumeSnapshot", &snapshotv1.VolumeSnapshotList{}})
		}
	}
	var started client.Object // the first object of a run the status does not record
	for _, l := range lists {
		kind, list := l.kind, l.list
		sel := sel
		if kind == "VolumeSnapshot" && !r.SnapshotsAvailable {
			sel = client.MatchingLabels{storagekit.LabelBackup: pb.Name} // the API came later: not indexed
		}
		if err := r.List(ctx, list, client.InNamespace(pb.Namespace), sel); err != nil {
			return fmt.Errorf("list run objects: %w", err)
		}
		err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if !metav1.IsControlledBy(obj, pb) || !obj.GetDeletionTimestamp().IsZero() {
				return nil
			}
			if id := obj.GetLabels()[storagekit.LabelRun]; !recorded(id) {
				_, first := obj.GetAnnotations()[storagekit.AnnotationScheduledTime]
				if first && pb.Status.ActiveRun == nil && (started == nil || id > started.GetLabels()[storagekit.LabelRun]) {
					started = obj
				}
				return nil
			}
			err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s %s of run %s: %w", kind, obj.GetName(), obj.GetLabels()[storagekit.LabelRun], err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if started != nil {
		adoptStartedRun(s, started)
	}
	return nil
}

// adoptStartedRun records the run whose first object is obj as the active run, with what the
// reconcile that started it would have recorded: the run from the object's annotations (its
// start by the reconciler's clock), and the schedule's bookkeeping (the tick handled, the ticks
// missed before it) or the manual trigger handled. The status patch at the end of the reconcile
// saves it; reconcileActiveRun follows the run in the same reconcile.
func adoptStartedRun(s *scope, obj client.Object) {
	pb, a := s.backup, obj.GetAnnotations()
	scheduled, err := time.Parse(time.RFC3339, a[storagekit.AnnotationScheduledTime])
	if err != nil {
		return // not written by the operator: left alone
	}
	started, err := time.Parse(time.RFC3339, a[storagekit.AnnotationStartTime])
	if err != nil {
		return
	}
	trigger, manual := a[storagekit.AnnotationManualTrigger]
	run := &storagev1.ActiveRun{ID: obj.GetLabels()[storagekit.LabelRun], ScheduledTime: metav1.NewTime(scheduled),
		StartTime: metav1.NewTime(started), Manual: manual, Engine: storagev1.BackupEngine(a[storagekit.AnnotationEngine])}
	if run.ID != storagekit.RunID(scheduled, manual) {
		return
	}
	pb.Status.ActiveRun = run
	if s.engine == "" {
		s.engine = run.Engine // status.engine, as the reconcile that started the run resolved it
	}
	if manual {
		pb.Status.LastManualTrigger = trigger
		return
	}
	in := schedule.Input{Schedule: s.schedule, Created: pb.CreationTimestamp.Time, Now: scheduled}
	if last := pb.Status.LastScheduleTime; last != nil {
		in.LastScheduled = ptr.To(last.Time)
	}
	if d := schedule.Decide(in); d.Handled != nil {
		pb.Status.MissedSchedules += int64(d.Missed)
		pb.Status.LastScheduleTime = ptr.To(metav1.NewTime(*d.Handled))
	}
}

// reconcileNextRun starts a run when one is due, or counts the ticks that cannot run.
func (r *PVCBackupReconciler) reconcileNextRun(ctx context.Context, s *scope) error {
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
		return nil
	}
	if pb.Status.ActiveRun == nil && r.started.pending(client.ObjectKeyFromObject(pb), &pb.Status, s.now) {
		// This process started a run that neither the status nor the cache shows yet (the
		// reconcile its creation wakes records it): no second run meanwhile.
		s.requeue = min(s.requeue, storagekit.StaleCacheRetry)
		return nil
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
			return err
		}
	}
	pb.Status.MissedSchedules += int64(d.Missed)
	pb.Status.SkippedSchedules += int64(d.Skipped)
	if d.Handled != nil {
		pb.Status.LastScheduleTime = ptr.To(metav1.NewTime(*d.Handled))
	}
	if !start {
		return nil
	}
	run := &storagev1.ActiveRun{StartTime: metav1.NewTime(s.now)}
	if d.Run != nil {
		run.ScheduledTime = metav1.NewTime(*d.Run)
	} else {
		run.ScheduledTime, run.Manual = metav1.NewTime(s.now), true
	}
	if manual {
		pb.Status.LastManualTrigger = pb.Spec.Trigger.Manual
	}
	run.ID = storagekit.RunID(run.ScheduledTime.Time, run.Manual)
	run.Engine = s.engine // resolved by checkDependencies, as a run is due
	pb.Status.ActiveRun = run
	// Start the run: create its Job, or its snapshot, from a current copy (ensureFresh). A
	// failure is reported as for any run (the run is recorded, the next reconcile creates again).
	if err := r.reconcileActiveRun(ctx, s); err != nil {
		return err
	}
	r.started.add(client.ObjectKeyFromObject(pb), run.ID, s.now)
	return errRunStarted
}

// startedRuns remembers, per PVCBackup, the last run this process started and when, until the
// status records it. A reconcile in between may not find the run's Job in a cache that has not
// caught up, and would otherwise start a second run (a manual trigger set in that instant). After
// startedRunMemory the cache has long caught up (or the Job was deleted), and the run objects
// found decide again. The zero value is ready to use.
type startedRuns struct {
	mu   sync.Mutex
	runs map[types.NamespacedName]startedRun
}

type startedRun struct {
	id string
	at time.Time
}

const startedRunMemory = time.Minute

func (s *startedRuns) add(key types.NamespacedName, id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[types.NamespacedName]startedRun{}
	}
	s.runs[key] = startedRun{id, at}
}

// pending tells whether the run last started for key is neither recorded in st nor forgotten.
func (s *startedRuns) pending(key types.NamespacedName, st *storagev1.PVCBackupStatus, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	run, ok := s.runs[key]
	if !ok {
		return false
	}
	recorded := st.ActiveRun != nil && st.ActiveRun.ID == run.id
	for _, h := range st.History {
		recorded = recorded || h.ID == run.id
	}
	if recorded || now.Sub(run.at) > startedRunMemory || now.Before(run.at) {
		delete(s.runs, key)
		return false
	}
	return true
}

// errRunStarted ends the reconcile that started a run: it writes no status. The run's first
// object (Job or snapshot) carries what the status is to record of the run (RunAnnotations), and
// its create event wakes the reconcile that records it (reconcileRunObjects). So when many runs
// are due in the same minute, each start costs the API server one request, the create, and the
// runs are recorded once all have started (issue 13: 1,000 runs due the same minute). The create
// is idempotent (the run's objects are named after the run) and made from a copy proved current
// (ensureFresh): a run recorded as finished, whose Job is gone, is never started again.
var errRunStarted = errors.New("the run was started; the reconcile its first object wakes records it")

// patchStatus writes the status computed in this reconcile, once, skipped when unchanged
// (storagekit.PatchStatus), and remembers the resourceVersion the API server answered with
// (seenVersions): the reconciler's own write needs no uncached read to be proved current.
func (r *PVCBackupReconciler) patchStatus(ctx context.Context, base, pb *storagev1.PVCBackup) (bool, error) {
	written, err := storagekit.PatchStatus(ctx, r.Client, base, pb, func(pb *storagev1.PVCBackup) any { return pb.Status })
	if written {
		r.seen.Record(pb)
	}
	return written, err
}

// recordTransitions emits events when a run starts or ends and when Ready changes reason.
func (r *PVCBackupReconciler) recordTransitions(base, pb *storagev1.PVCBackup, s *scope) {
	if r.Recorder == nil {
		return
	}
	if run := pb.Status.ActiveRun; run != nil && (base.Status.ActiveRun == nil || base.Status.ActiveRun.ID != run.ID) {
		r.Recorder.Eventf(pb, corev1.EventTypeNormal, "BackupStarted", "backup %s started", pb.Status.ActiveRun.ID)
	}
	if run := s.finished; run != nil {
		if run.Result == storagev1.RunSucceeded {
			r.Recorder.Eventf(pb, corev1.EventTypeNormal, "BackupSucceeded", "backup %s: %d bytes to %s", run.ID, run.Bytes, run.ObjectKey)
		} else {
			r.Recorder.Eventf(pb, corev1.EventTypeWarning, "BackupFailed", "backup %s failed: %s", run.ID, run.Message)
		}
	}
	was := meta.FindStatusCondition(base.Status.Conditions, storagev1.ConditionRepositoryHealthy)
	is := meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionRepositoryHealthy)
	if is != nil && is.Status == metav1.ConditionFalse && (was == nil || was.Status != is.Status || was.Message != is.Message) {
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, is.Reason, "%s", is.Message)
	}
	before := meta.FindStatusCondition(base.Status.Conditions, storagev1.ConditionReady)
	after := meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionReady)
	if after != nil && after.Status == metav1.ConditionFalse && (before == nil || before.Reason != after.Reason) && after.Reason != ReasonBackupFailed {
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, after.Reason, "%s", after.Message)
	}
}

// s3Trouble reports whether the last reconcile found S3 unusable: then every poll asks S3 again,
// so the condition clears as soon as the bucket or endpoint is fixed (and does not flip back to
// Ready between runs without a check).
func s3Trouble(pb *storagev1.PVCBackup) bool {
	c := meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionReady)
	if c == nil || c.Status == metav1.ConditionTrue {
		return false
	}
	switch c.Reason {
	case storagekit.ReasonBucketNotFound, storagekit.ReasonCredentialsRejected, storagekit.ReasonEndpointUnreachable, storagekit.ReasonRepositoryPasswordMissing:
		return true
	}
	return false
}

// ensureFresh is ensureFresh for the PVCBackup of s, at most once per reconcile: the run's
// objects are created only from a current copy, and a run that creates nothing (most reconciles
// of an active run: a poll, a Job status change) reads nothing uncached. A copy whose
// resourceVersion is the one the reconciler itself last wrote or read uncached needs no read
// (r.seen).
func (r *PVCBackupReconciler) ensureFresh(ctx context.Context, s *scope) error {
	if s.checkedFresh || r.seen.Current(s.backup) {
		s.checkedFresh = true
		return nil
	}
	if err := storagekit.EnsureFresh(ctx, r.APIReader, s.backup); err != nil {
		return err
	}
	r.seen.Record(s.backup)
	s.checkedFresh = true
	return nil
}
