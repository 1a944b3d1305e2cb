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
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/phase"
	"github.com/okgoes/okgoes-operator/internal/schedule"
	"github.com/okgoes/okgoes-operator/internal/statuspatch"
)

const (
	// finalizer guards the S3 objects of a PVCBackup with deletionPolicy Delete.
	finalizer = "storage.okgoes.com/delete-backups"
	// hooksFinalizer keeps a PVCBackup with hooks until the after-hooks its active run owes
	// have run (pvcbackup_hooks.go).
	hooksFinalizer = "storage.okgoes.com/after-hooks"
	historyLimit   = 10
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
	// PodExec runs the hooks' commands in pods (spec.hooks): NewPodExecutor in the manager.
	PodExec PodExec
	// HookSession names this process in the status of the runs whose hooks it runs; empty: a
	// random one (pvcbackup_hooks.go).
	HookSession string
	sessionOnce sync.Once
	// hookMemory keeps the results of hooks this process ran until the status records them.
	hookMemory hookMemory
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
	// members are the PVCs the next run backs up, and snapshotClasses the VolumeSnapshotClass of
	// each one's snapshot (with spec.snapshot), when checkDependencies resolved them.
	members         []string
	snapshotClasses map[string]string
	// groupSnapshotClass is the VolumeGroupSnapshotClass of the next run, when it captures its
	// group with one VolumeGroupSnapshot (pvcbackup_groupsnapshot.go).
	groupSnapshotClass string
	// finished is the run that ended in this reconcile, for events and metrics.
	finished *storagev1.RunStatus
	// claims are the PVCs the active run's mover reads, one per member (runSnapshotting resolves
	// them); outcome is the run's record once its end is known (runFinishedUnrecorded).
	claims  []storagekit.MemberClaim
	outcome *storagev1.RunStatus
	// afterNext is the state the after-hooks go on to (afterHooksThen).
	afterNext runState
	// starting is set when this reconcile started the run (runDue); dueTick and dueManual are
	// what made it due, startedID its id.
	starting  bool
	dueTick   *time.Time
	dueManual bool
	startedID string
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
// +kubebuilder:rbac:groups="",resources=pods/exec,verbs=create;get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
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
		// Once the last finalizer is removed the PVCBackup is gone: its status with it.
		if _, perr := r.patchStatus(ctx, base, pb); perr != nil && err == nil && !apierrors.IsNotFound(perr) {
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
		r.reconcileRun, // pvcbackup_run.go
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
		// The outcome is saved: come back soon to remove the run's objects (runRecorded)
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
	if err := checkLockSchedule(s.backup, sched, s.now); err != nil {
		return err
	}
	s.schedule = sched
	s.next = sched.Next(s.now)
	s.requeue = schedule.RequeueAfter(schedule.Decision{Next: s.next}, s.now)
	return nil
}

// patchStatus writes the status computed in this reconcile, once, skipped when unchanged
// (statuspatch.Patch), and remembers the resourceVersion the API server answered with
// (seenVersions): the reconciler's own write needs no uncached read to be proved current.
func (r *PVCBackupReconciler) patchStatus(ctx context.Context, base, pb *storagev1.PVCBackup) (bool, error) {
	written, err := statuspatch.Patch(ctx, r.Client, base, pb, func(pb *storagev1.PVCBackup) any { return pb.Status })
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
	if rotatedAt := passwordChangeTime(pb); rotatedAt != nil && !rotatedAt.Equal(passwordChangeTime(base)) {
		// The run that rotated is still active when spec.verify runs after it.
		id := ""
		if run := pb.Status.ActiveRun; run != nil {
			id = run.ID
		} else if run := pb.Status.LastRun; run != nil {
			id = run.ID
		}
		r.Recorder.Eventf(pb, corev1.EventTypeNormal, "PasswordRotated",
			"backup %s changed the kopia repository's password to the one under %q of Secret %q; %q no longer opens it: remove it from the Secret",
			id, storagekit.PasswordKey(pb.Spec.S3), pb.Spec.S3.CredentialsSecretRef.Name, storagekit.PreviousPasswordKey(pb.Spec.S3))
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

// passwordChangeTime is status.repository.passwordChangeTime, nil when none.
func passwordChangeTime(pb *storagev1.PVCBackup) *metav1.Time {
	if pb.Status.Repository == nil {
		return nil
	}
	return pb.Status.Repository.PasswordChangeTime
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
	case storagekit.ReasonBucketNotFound, storagekit.ReasonCredentialsRejected, storagekit.ReasonEndpointUnreachable, storagekit.ReasonRepositoryPasswordMissing,
		storagekit.ReasonBucketNotLockable:
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
