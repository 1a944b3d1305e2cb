package storage

import (
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/flowcontrol"
)

// Options tune the PVCBackup controller.
type Options struct {
	MaxConcurrentReconciles int
	// Wrap, when set, wraps the reconciler (instrumentation, e.g. counting reconciles in tests).
	Wrap func(reconcile.Reconciler) reconcile.Reconciler
}

// SnapshotAPIServed tells whether the cluster serves snapshot.storage.k8s.io/v1 VolumeSnapshots;
// without it, the controller does not watch them and spec.snapshot is reported as unsupported.
func SnapshotAPIServed(mgr ctrl.Manager) (bool, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot").GroupKind(), "v1")
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// SetupWithManager registers the controller. PVCBackups pass on spec changes (generation) and on
// the deletion timestamp (generation too); Jobs and snapshots pass on status changes, which is
// what moves a run forward.
func (r *PVCBackupReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if err := r.check(); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&storagev1.PVCBackup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		Owns(&corev1.PersistentVolumeClaim{})
	if r.SnapshotsAvailable {
		b = b.Owns(&snapshotv1.VolumeSnapshot{})
	}
	var rec reconcile.Reconciler = r
	if opts.Wrap != nil {
		rec = opts.Wrap(r)
	}
	return b.WithOptions(controller.Options{
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		RateLimiter:             flowcontrol.RateLimiter(),
	}).Named("pvcbackup").Complete(rec)
}
