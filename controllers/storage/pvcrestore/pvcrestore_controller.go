// Package pvcrestore holds the PVCRestore reconciler: it runs each PVCRestore once (resolve the
// backup, prepare the target PVC, run a `mover restore` Job, record the verified result). What it
// shares with the PVCBackup controller is in storagekit; it imports nothing of pvcbackup.
package pvcrestore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/phase"
	"github.com/okgoes/okgoes-operator/internal/statuspatch"
)

// Reasons of the Complete condition of a PVCRestore.
const (
	ReasonRestoring      = "Restoring"                        // False: the mover Job writes the volume
	ReasonSourceNotFound = "SourceNotFound"                   // False, polled: the PVCBackup does not exist
	ReasonTargetNotFound = "TargetNotFound"                   // False, polled: target.pvcName does not exist
	ReasonTargetInUse    = "TargetInUse"                      // False, polled: a running pod mounts the target read-write
	ReasonRestored       = "Restored"                         // True: restored and verified
	ReasonBackupNotFound = string(mover.ReasonBackupNotFound) // True, failed: no such backup (or no manifest)
	ReasonBackupBroken   = "BackupBroken"                     // True, failed: the backup named by backupID is incomplete
	ReasonTargetExists   = "TargetExists"                     // True, failed: target.newPVC names a PVC this restore did not create
	ReasonTargetTooSmall = "TargetTooSmall"                   // True, failed: target.newPVC.size is below the backup's content
)

// PVCRestoreReconciler runs each PVCRestore once: resolve the backup, prepare the target, run a
// `mover restore` Job, record the verified result. A finished restore is never run again.
type PVCRestoreReconciler struct {
	client.Client
	storagekit.Deps
}

// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores/finalizers,verbs=update

// restoreScope is what the phases of one restore reconcile share.
type restoreScope struct {
	restore *storagev1.PVCRestore
	// source is the bucket of the backups: the PVCBackup's, or source.s3 (with the credentials
	// in this namespace); the mover Job is built from it.
	source storagekit.S3Source
	// prefix is where the source's backups are in the bucket.
	prefix string
	store  storagekit.ObjectStore
	now    time.Time
	// result ends the restore (Succeeded or Failed) with a Complete=True reason.
	result *restoreResult
	// manifest of the backup, when resolved in this reconcile.
	manifest *archive.Manifest
	// history of the source PVCBackup's runs (none for source.s3): which backups failed verification.
	history []storagev1.RunStatus
	// note is said in an event when the source is resolved (e.g. newer broken backups skipped).
	note string
	// waiting and waitingMessage say why the restore Job's mover does not run yet.
	waiting, waitingMessage string
	// requeue is when to look again at a running restore.
	requeue time.Duration
}

type restoreResult struct {
	phase   storagev1.RestorePhase
	reason  string
	message string
}

// Reconcile drives one PVCRestore to its single outcome.
func (r *PVCRestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pr := &storagev1.PVCRestore{}
	if err := r.Get(ctx, req.NamespacedName, pr); err != nil {
		if apierrors.IsNotFound(err) {
			forgetRestore(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pr.DeletionTimestamp.IsZero() {
		forgetRestore(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if pr.Status.Phase == storagev1.RestoreSucceeded || pr.Status.Phase == storagev1.RestoreFailed {
		observeRestore(pr) // also after a restart of the operator, which reconciles every PVCRestore
		// One-shot: a finished restore is never run again; its saved outcome lets its Job go.
		return ctrl.Result{}, r.deleteFinishedJob(ctx, pr)
	}
	base := pr.DeepCopy()
	s := &restoreScope{restore: pr, now: r.Clock.Now()}
	err := phase.Run(ctx, s, r.resolveSource, r.resolveTarget, r.runJob)
	if res, retry := r.Retry(s.now, err); retry {
		return res, nil // an outage (apioutage.go), or a stale copy whose newer one is on its way
	}
	if errors.Is(err, errFinished) {
		err = nil
	}
	computeRestoreStatus(pr, s, err)
	res, err := errclass.Result(err, s.requeue)
	written, perr := statuspatch.Patch(ctx, r.Client, base, pr, func(pr *storagev1.PVCRestore) any { return pr.Status })
	if res, retry := r.Retry(s.now, perr); retry {
		return res, nil
	}
	if perr != nil {
		if err == nil {
			err = perr
		}
		return res, err
	}
	if written {
		observeRestore(pr)
		r.recordRestoreTransition(base, pr, s)
		if s.result != nil {
			// The outcome is saved: come back to remove the Job (status writes wake no reconcile).
			return ctrl.Result{RequeueAfter: time.Millisecond}, err
		}
	}
	return res, err
}

// errFinished stops the phases of a restore that has its outcome (see restoreScope.finish).
var errFinished = errors.New("restore finished")

// finish records the outcome of the restore and stops the remaining phases.
func (s *restoreScope) finish(outcome storagev1.RestorePhase, reason, message string) error {
	s.result = &restoreResult{outcome, reason, message}
	return errFinished
}

// resolveSource finds the PVCBackup and the backup id ("latest" resolved once, then kept in
// status so that a backup finishing meanwhile does not change what is restored).
func (r *PVCRestoreReconciler) resolveSource(ctx context.Context, s *restoreScope) error {
	pr := s.restore
	if src := pr.Spec.Source.S3; src != nil {
		s.source = storagekit.S3Source{Namespace: pr.Namespace, Bucket: src.Bucket, Location: src.Location, Fields: restoreS3Fields(pr)}
		s.prefix = src.Location.Prefix + path.Join(src.Namespace, src.PVCBackup) + "/"
	} else {
		pb := &storagev1.PVCBackup{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.Source.PVCBackup}, pb); err != nil {
			if apierrors.IsNotFound(err) {
				return errclass.Waiting(ReasonSourceNotFound, fmt.Sprintf("PVCBackup %q does not exist", pr.Spec.Source.PVCBackup), r.Poll())
			}
			return err
		}
		s.source = storagekit.BackupSource(pb)
		s.history = pb.Status.History
		s.source.Fields = restoreS3Fields(pr)
		s.prefix = storagekit.BackupPrefix(pb)
	}
	store, secret, err := storagekit.OpenStore(ctx, r.Deps, s.source)
	if err != nil {
		return err
	}
	s.store = store
	// A kopia backup needs the repository password, checked on every reconcile until the
	// restore ends (the Secret may be fixed meanwhile).
	password := func() error {
		return storagekit.CheckPassword(secret, s.source, fmt.Sprintf("backup %s is a kopia backup,", pr.Status.BackupID), r.Poll())
	}
	if pr.Status.BackupID != "" {
		if storagekit.EngineFor(pr.Status.Engine).NeedsPassword() {
			return password()
		}
		return nil
	}
	if at := pr.Spec.Source.PointInTime; at != nil {
		return r.resolveAt(ctx, s, at.Time, password)
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	cat, err := storagekit.ReadCatalog(cctx, store, s.prefix, s.now)
	if err != nil {
		return storagekit.ClassifyS3Error(err, s.source.Bucket, r.Poll())
	}
	cat = storagekit.WithoutUnverified(cat, s.history) // a backup known to fail verification is not "latest"
	want := pr.Spec.Source.BackupID
	var found *storagekit.BackupEntry
	switch {
	case want == "" || want == "latest":
		if len(cat.Valid) > 0 {
			found = &cat.Valid[0]
		}
		// Say so when newer backups were passed over.
		var skipped []string
		for _, b := range cat.Broken {
			if found == nil || b.ID > found.ID {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", b.ID, b.Problem))
			}
		}
		if len(skipped) > 0 && found != nil {
			s.note = fmt.Sprintf("latest usable backup %s chosen; newer backups are not usable: %s", found.ID, strings.Join(skipped, "; "))
		}
		if found == nil && len(skipped) > 0 {
			return s.finish(storagev1.RestoreFailed, ReasonBackupNotFound, fmt.Sprintf("no usable backup under %s in bucket %s; not usable: %s",
				s.prefix, s.source.Bucket, strings.Join(skipped, "; ")))
		}
	default:
		for i := range cat.Valid {
			if cat.Valid[i].ID == want {
				found = &cat.Valid[i]
			}
		}
		for _, b := range cat.Broken {
			if b.ID == want {
				return s.finish(storagev1.RestoreFailed, ReasonBackupBroken, fmt.Sprintf("backup %s under %s in bucket %s is not usable: %s; nothing was restored",
					want, s.prefix, s.source.Bucket, b.Problem))
			}
		}
	}
	if found == nil {
		return s.finish(storagev1.RestoreFailed, ReasonBackupNotFound,
			fmt.Sprintf("no backup %q with a manifest under %s in bucket %s", want, s.prefix, s.source.Bucket))
	}
	s.manifest = &found.Manifest
	pr.Status.BackupID = found.ID
	engine := storagekit.ManifestEngine(found.Manifest)
	pr.Status.Engine = engine.Name()
	pr.Status.ObjectKey = engine.BackupKey(s.prefix, found.ID)
	pr.Status.SnapshotID = engine.SnapshotID(found.Manifest)
	if err := s.checkGroup(found.Manifest); err != nil {
		return err
	}
	if engine.NeedsPassword() {
		return password()
	}
	return nil
}

// runJob starts the `mover restore` Job and records its result when it ends.
func (r *PVCRestoreReconciler) runJob(ctx context.Context, s *restoreScope) error {
	pr := s.restore
	if pr.Status.StartTime == nil {
		pr.Status.StartTime = &metav1.Time{Time: s.now}
	}
	job := &batchv1.Job{}
	var reader client.Reader = r.Client
	if r.Outages.Recent(s.now) && r.APIReader != nil {
		reader = r.APIReader // the cache may not show the Job's end yet (apioutage.go)
	}
	err := reader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: restoreJobName(pr)}, job)
	if apierrors.IsNotFound(err) {
		if err := storagekit.EnsureFresh(ctx, r.APIReader, pr); err != nil {
			return err // the restore may have finished and its Job been deleted: never run it twice
		}
		deadline := pr.Status.StartTime.Add(time.Duration(pr.Spec.Mover.Deadline()) * time.Second)
		job = desiredRestoreJob(s.source, s.prefix, pr, r.MoverImage, storagekit.RemainingSeconds(deadline, s.now))
		if err := storagekit.CreateOnce(ctx, r.Client, pr, job); err != nil {
			if apierrors.IsInvalid(err) {
				return s.finish(storagev1.RestoreFailed, storagekit.ReasonInvalidSpec, fmt.Sprintf("the API server rejected the mover Job: %v", err))
			}
			return fmt.Errorf("create restore Job: %w", err)
		}
		// Restoring only once a pod of the Job runs: the Job controller has yet to create it.
		created := storagekit.MoverJobState{Waiting: storagekit.ReasonNoPodYet, WaitingMessage: fmt.Sprintf("Job %s was just created and has no pod yet", job.Name),
			Deadline: deadline}
		s.waiting, s.waitingMessage = created.Stage(ReasonRestoring, "the restore")
		s.requeue = storagekit.RunPollInterval
		return nil
	} else if err != nil {
		return err
	}
	out := r.ReadMoverJob(ctx, job, pr.Status.StartTime.Time, s.now, pr.Spec.Mover.Deadline())
	if out.Finished {
		if err := storagekit.EnsureFresh(ctx, r.APIReader, pr); err != nil {
			return err // the outcome may be saved already: record it once
		}
	}
	switch {
	case !out.Finished:
		if reason, msg := out.Stage(ReasonRestoring, "the restore"); reason != ReasonRestoring {
			s.waiting, s.waitingMessage = reason, msg // else computeRestoreStatus says what is restored where
		}
		s.requeue = out.Requeue(s.now, storagekit.RunPollInterval)
		if r.Outages.Recent(s.now) {
			s.requeue = min(s.requeue, storagekit.APIRetry) // no Job event may come until the informer relists
		}
	case out.Failed:
		s.result = &restoreResult{storagev1.RestoreFailed, out.Reason, storagekit.FailureMessage(s.source, out.Reason, out.Message)}
	default:
		res := out.Result
		pr.Status.Bytes, pr.Status.Files, pr.Status.VerifiedSHA256 = res.Bytes, res.Files, res.SHA256
		msg := storagekit.EngineFor(pr.Status.Engine).RestoredMessage(pr, res)
		s.result = &restoreResult{storagev1.RestoreSucceeded, ReasonRestored, msg}
	}
	// The Job stays until the outcome is saved: deleteFinishedJob removes it in a later reconcile.
	return nil
}

// deleteFinishedJob removes the Job of a restore whose outcome is saved.
func (r *PVCRestoreReconciler) deleteFinishedJob(ctx context.Context, pr *storagev1.PVCRestore) error {
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: restoreJobName(pr)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case !metav1.IsControlledBy(job, pr) || !job.DeletionTimestamp.IsZero():
		return nil
	}
	err = r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete restore Job: %w", err)
	}
	return nil
}

// computeRestoreStatus is the one place a PVCRestore's phase and conditions are decided.
func computeRestoreStatus(pr *storagev1.PVCRestore, s *restoreScope, err error) {
	st := &pr.Status
	set := func(status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: storagev1.ConditionComplete, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: pr.Generation})
	}
	verdict := errclass.Of(err)
	switch {
	case s.result != nil:
		st.Phase = s.result.phase
		st.CompletionTime = &metav1.Time{Time: s.now}
		if st.StartTime != nil {
			st.Duration = s.now.Sub(st.StartTime.Time).Round(time.Second).String()
		}
		set(metav1.ConditionTrue, s.result.reason, s.result.message)
	case verdict.Class == errclass.ClassStalled:
		st.Phase = storagev1.RestoreFailed
		set(metav1.ConditionTrue, verdict.Reason, verdict.Message)
	case verdict.Class == errclass.ClassWaiting:
		st.Phase = storagev1.RestorePending
		set(metav1.ConditionFalse, verdict.Reason, verdict.Message)
	case verdict.Class == errclass.ClassTransient:
		return // transient: keep the last observation
	case s.waiting != "":
		st.Phase = storagev1.RestoreRestoring
		set(metav1.ConditionFalse, s.waiting, withNote(s.waitingMessage, s.note))
	default:
		st.Phase = storagev1.RestoreRestoring
		set(metav1.ConditionFalse, ReasonRestoring, withNote(fmt.Sprintf("restoring backup %s into %s", st.BackupID, storagekit.RestoreTargets(pr)), s.note))
	}
	st.ObservedGeneration = pr.Generation
}

// withNote is msg with the note of the source's resolution (newer broken backups passed over by
// "latest"), which the Complete condition keeps saying while the restore runs or waits.
func withNote(msg, note string) string {
	if note == "" {
		return msg
	}
	return msg + "; " + note
}

func (r *PVCRestoreReconciler) recordRestoreTransition(base, pr *storagev1.PVCRestore, s *restoreScope) {
	if r.Recorder == nil {
		return
	}
	if s.note != "" {
		r.Recorder.Eventf(pr, corev1.EventTypeWarning, "BrokenBackupsSkipped", "%s", s.note)
	}
	if base.Status.Phase == pr.Status.Phase {
		return
	}
	c := meta.FindStatusCondition(pr.Status.Conditions, storagev1.ConditionComplete)
	if c == nil {
		return
	}
	kind := corev1.EventTypeNormal
	if pr.Status.Phase == storagev1.RestoreFailed {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(pr, kind, c.Reason, "%s", c.Message)
}

// SetupWithManager registers the controller: PVCRestores on creation (the spec is immutable),
// and their Jobs.
func (r *PVCRestoreReconciler) SetupWithManager(mgr ctrl.Manager, opts storagekit.Options) error {
	if err := r.Check(); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&storagev1.PVCRestore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		WithOptions(opts.Controller()).
		Named("pvcrestore").
		Complete(opts.Reconciler(r))
}
