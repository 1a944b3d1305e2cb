package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/flowcontrol"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/phase"
)

// Reasons of the Complete condition of a PVCRestore.
const (
	ReasonRestoring          = "Restoring"          // False: the mover Job writes the volume
	ReasonSourceNotFound     = "SourceNotFound"     // False, polled: the PVCBackup does not exist
	ReasonTargetNotFound     = "TargetNotFound"     // False, polled: target.pvcName does not exist
	ReasonTargetInUse        = "TargetInUse"        // False, polled: a running pod mounts the target read-write
	ReasonRestored           = "Restored"           // True: restored and verified
	ReasonBackupNotFound     = "BackupNotFound"     // True, failed: no such backup (or no manifest)
	ReasonVerificationFailed = "VerificationFailed" // True, failed: the archive does not match its manifest
	ReasonTargetNotEmpty     = "TargetNotEmpty"     // True, failed: overwrite is Refuse and the volume holds data
	ReasonTargetNotWritable  = "TargetNotWritable"  // True, failed: the volume refused a write (permissions, full, read-only)
	ReasonRestoreFailed      = "RestoreFailed"      // True, failed: any other mover failure
)

// PVCRestoreReconciler runs each PVCRestore once: resolve the backup, prepare the target, run a
// `mover restore` Job, record the verified result. A finished restore is never run again.
type PVCRestoreReconciler struct {
	client.Client
	Deps
}

// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcrestores/finalizers,verbs=update

// restoreScope is what the phases of one restore reconcile share.
type restoreScope struct {
	restore *storagev1.PVCRestore
	// backup is the source PVCBackup, or one standing for source.s3 (its S3 settings, in this
	// namespace), which the mover Job is built from.
	backup *storagev1.PVCBackup
	// prefix is where the source's backups are in the bucket.
	prefix string
	store  ObjectStore
	now    time.Time
	// result ends the restore (Succeeded or Failed) with a Complete=True reason.
	result *restoreResult
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
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pr.Status.Phase == storagev1.RestoreSucceeded || pr.Status.Phase == storagev1.RestoreFailed || !pr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // one-shot: a resync never runs a finished restore again
	}
	base := pr.DeepCopy()
	s := &restoreScope{restore: pr, now: r.Clock.Now()}
	err := phase.Run(ctx, s, r.resolveSource, r.resolveTarget, r.runJob)
	switch {
	case errors.Is(err, errStaleCache):
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	case errors.Is(err, errFinished):
		err = nil
	}
	computeRestoreStatus(pr, s, err)
	res, err := errclass.Result(err, restoreRequeue(pr))
	if !equality.Semantic.DeepEqual(base.Status, pr.Status) {
		if perr := r.Status().Patch(ctx, pr, client.MergeFrom(base)); perr != nil && err == nil {
			err = fmt.Errorf("patch status: %w", perr)
		}
		r.recordRestoreTransition(base, pr)
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
	pb := &storagev1.PVCBackup{}
	if src := pr.Spec.Source.S3; src != nil {
		pb.Namespace, pb.Name = pr.Namespace, src.PVCBackup
		pb.Spec.S3Bucket, pb.Spec.S3 = src.Bucket, src.Location
		s.prefix = src.Location.Prefix + path.Join(src.Namespace, src.PVCBackup) + "/"
	} else {
		if err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.Source.PVCBackup}, pb); err != nil {
			if apierrors.IsNotFound(err) {
				return errclass.Waiting(ReasonSourceNotFound, fmt.Sprintf("PVCBackup %q does not exist", pr.Spec.Source.PVCBackup), r.poll())
			}
			return err
		}
		s.prefix = backupPrefix(pb)
	}
	s.backup = pb
	store, err := openStoreAt(ctx, r.APIReader, r.Stores, pb, restoreS3Fields(pr), r.poll())
	if err != nil {
		return err
	}
	s.store = store
	if pr.Status.BackupID != "" {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	objects, err := store.List(cctx, s.prefix)
	if err != nil {
		return classifyS3Error(err, pb.Spec.S3Bucket, r.poll())
	}
	want := pr.Spec.Source.BackupID
	var found string
	for _, o := range objects { // keys sort by time: ids are UTC timestamps
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, s.prefix), ".manifest.json")
		if ok && !strings.Contains(id, "/") && (want == "" || want == "latest" || want == id) && id > found {
			found = id
		}
	}
	if found == "" {
		return s.finish(storagev1.RestoreFailed, ReasonBackupNotFound,
			fmt.Sprintf("no backup %q with a manifest under %s in bucket %s", want, s.prefix, pb.Spec.S3Bucket))
	}
	pr.Status.BackupID = found
	pr.Status.ObjectKey = s.prefix + found + archiveSuffix
	return nil
}

// resolveTarget finds or creates the target PVC and refuses one a running pod writes to.
func (r *PVCRestoreReconciler) resolveTarget(ctx context.Context, s *restoreScope) error {
	pr := s.restore
	t := pr.Spec.Target
	pvc := &corev1.PersistentVolumeClaim{}
	name := t.PVCName
	if t.NewPVC != nil {
		name = t.NewPVC.Name
	}
	err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: name}, pvc)
	switch {
	case apierrors.IsNotFound(err) && t.NewPVC != nil:
		pvc = desiredRestorePVC(pr)
		if err := r.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) {
				return s.finish(storagev1.RestoreFailed, ReasonInvalidSpec, fmt.Sprintf("the API server rejected target.newPVC: %v", err))
			}
			return fmt.Errorf("create target PVC: %w", err)
		}
	case apierrors.IsNotFound(err):
		return errclass.Waiting(ReasonTargetNotFound, fmt.Sprintf("PersistentVolumeClaim %q does not exist", name), r.poll())
	case err != nil:
		return err
	}
	pr.Status.TargetPVC = name
	if t.AllowInUse {
		return nil
	}
	if user, err := r.writerOf(ctx, pr, name); err != nil {
		return err
	} else if user != "" {
		return errclass.Waiting(ReasonTargetInUse, fmt.Sprintf("pod %s mounts PersistentVolumeClaim %q read-write; stop it or set target.allowInUse", user, name), r.poll())
	}
	return nil
}

// writerOf names a running pod (not our own mover) that mounts the PVC read-write.
func (r *PVCRestoreReconciler) writerOf(ctx context.Context, pr *storagev1.PVCRestore, claim string) (string, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(pr.Namespace)); err != nil {
		return "", fmt.Errorf("list pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Labels[labelRestore] == pr.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if c := v.PersistentVolumeClaim; c != nil && c.ClaimName == claim && !c.ReadOnly {
				return p.Name, nil
			}
		}
	}
	return "", nil
}

// runJob starts the `mover restore` Job and records its result when it ends.
func (r *PVCRestoreReconciler) runJob(ctx context.Context, s *restoreScope) error {
	pr := s.restore
	if pr.Status.StartTime == nil {
		pr.Status.StartTime = &metav1.Time{Time: s.now}
	}
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: restoreJobName(pr)}, job)
	if apierrors.IsNotFound(err) {
		if err := ensureFresh(ctx, r.APIReader, pr); err != nil {
			return err // the restore may have finished and its Job been deleted: never run it twice
		}
		job = desiredRestoreJob(s.backup, pr, r.MoverImage)
		if err := controllerutil.SetControllerReference(pr, job, r.Scheme()); err != nil {
			return err
		}
		if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) {
				return s.finish(storagev1.RestoreFailed, ReasonInvalidSpec, fmt.Sprintf("the API server rejected the mover Job: %v", err))
			}
			return fmt.Errorf("create restore Job: %w", err)
		}
		return nil
	} else if err != nil {
		return err
	}
	finished, failed, jobMessage := jobOutcome(job)
	if !finished {
		return nil
	}
	res, ok := moverResult(ctx, r.APIReader, job)
	switch {
	case !failed && ok && res.Result == "Succeeded":
		pr.Status.Bytes, pr.Status.Files, pr.Status.VerifiedSHA256 = res.Bytes, res.Files, res.SHA256
		s.result = &restoreResult{storagev1.RestoreSucceeded, ReasonRestored,
			fmt.Sprintf("restored backup %s into %s; sha256 %s verified against the manifest", pr.Status.BackupID, pr.Status.TargetPVC, res.SHA256)}
	case ok && res.Reason != "":
		s.result = &restoreResult{storagev1.RestoreFailed, res.Reason, res.Message}
	case ok && res.Message != "":
		s.result = &restoreResult{storagev1.RestoreFailed, ReasonRestoreFailed, res.Message}
	default:
		s.result = &restoreResult{storagev1.RestoreFailed, ReasonRestoreFailed, "mover Job failed: " + jobMessage}
	}
	if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete restore Job: %w", err)
	}
	return nil
}

// moverResult reads the Result the mover wrote to its termination message.
func moverResult(ctx context.Context, reader client.Reader, job *batchv1.Job) (mover.Result, bool) {
	pods := &corev1.PodList{}
	if err := reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name}); err != nil {
		return mover.Result{}, false
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				var res mover.Result
				if err := json.Unmarshal([]byte(t.Message), &res); err != nil {
					return mover.Result{Result: "Failed", Message: "mover: " + t.Message}, true
				}
				return res, true
			}
		}
	}
	return mover.Result{}, false
}

// computeRestoreStatus is the one place a PVCRestore's phase and conditions are decided.
func computeRestoreStatus(pr *storagev1.PVCRestore, s *restoreScope, err error) {
	st := &pr.Status
	set := func(status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: storagev1.ConditionComplete, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: pr.Generation})
	}
	stalled, isStalled := errclass.AsStalled(err)
	waiting, isWaiting := errclass.AsWaiting(err)
	switch {
	case s.result != nil:
		st.Phase = s.result.phase
		st.CompletionTime = &metav1.Time{Time: s.now}
		if st.StartTime != nil {
			st.Duration = s.now.Sub(st.StartTime.Time).Round(time.Second).String()
		}
		set(metav1.ConditionTrue, s.result.reason, s.result.message)
	case isStalled:
		st.Phase = storagev1.RestoreFailed
		set(metav1.ConditionTrue, stalled.Reason, stalled.Message)
	case isWaiting:
		st.Phase = storagev1.RestorePending
		set(metav1.ConditionFalse, waiting.Reason, waiting.Message)
	case err != nil:
		return // transient: keep the last observation
	default:
		st.Phase = storagev1.RestoreRestoring
		set(metav1.ConditionFalse, ReasonRestoring, fmt.Sprintf("restoring backup %s into %s", st.BackupID, st.TargetPVC))
	}
	st.ObservedGeneration = pr.Generation
}

func restoreRequeue(pr *storagev1.PVCRestore) time.Duration {
	if pr.Status.Phase == storagev1.RestoreRestoring {
		return runPollInterval
	}
	return 0
}

func (r *PVCRestoreReconciler) recordRestoreTransition(base, pr *storagev1.PVCRestore) {
	if r.Recorder == nil || base.Status.Phase == pr.Status.Phase {
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
func (r *PVCRestoreReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if err := r.check(); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&storagev1.PVCRestore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, RateLimiter: flowcontrol.RateLimiter()}).
		Named("pvcrestore").
		Complete(r)
}
