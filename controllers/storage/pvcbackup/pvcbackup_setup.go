package pvcbackup

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// runObjectsIndex indexes the manager's cache of Jobs, PVCs and VolumeSnapshots by the PVCBackup
// whose run they belong to (label storage.okgoes.com/pvcbackup). Every reconcile looks up its
// run objects: by label, the cache would walk every object of the namespace each time (with
// 1,000 PVCBackups and their Jobs in one namespace, a third of the manager's CPU as the runs of
// a minute start).
const runObjectsIndex = "storage.okgoes.com/pvcbackup"

func backupOfRunObject(obj client.Object) []string {
	if name, ok := obj.GetLabels()[storagekit.LabelBackup]; ok {
		return []string{name}
	}
	return nil
}

// notCreated passes the updates and deletions of a run's temporary PVCs, not their creation: the
// reconciler itself created them for a run it has recorded, and the reconcile such an event would
// wake competes, when many runs are due in the same minute, with the runs still to be started.
// (At start-up every PVCBackup is reconciled anyway.) The creation of a run's Job or snapshot
// does pass: it wakes the reconcile that records the run (errRunStarted).
func notCreated() predicate.Predicate {
	return predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}
}

// recordAfterStarts is owner, the handler that wakes the PVCBackup owning a Job or snapshot, with
// the reconciles woken by their creation queued behind every other: those record runs already
// started (errRunStarted), the others start runs. When 1,000 runs are due in the same minute, all
// start before the first is recorded. (Without controller-runtime's priority queue, the events
// pass unchanged.)
func recordAfterStarts(owner handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				q = lowPriority{pq}
			}
			owner.Create(ctx, e, q)
		},
		UpdateFunc:  owner.Update,
		DeleteFunc:  owner.Delete,
		GenericFunc: owner.Generic,
	}
}

// lowPriority is a priority queue that adds every item at handler.LowPriority.
type lowPriority struct {
	priorityqueue.PriorityQueue[reconcile.Request]
}

func (q lowPriority) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	o.Priority = ptr.To(handler.LowPriority)
	q.PriorityQueue.AddWithOpts(o, items...)
}

func (q lowPriority) Add(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

// SetupWithManager registers the controller. PVCBackups pass on spec changes (generation) and on
// the deletion timestamp (generation too); Jobs and snapshots pass on their creation (the run is
// recorded) and on status changes, which is what moves a run forward.
func (r *PVCBackupReconciler) SetupWithManager(mgr ctrl.Manager, opts storagekit.Options) error {
	if err := r.Check(); err != nil {
		return err
	}
	runObjects := []client.Object{&batchv1.Job{}, storagekit.ClaimMetadata()}
	if r.SnapshotsAvailable {
		runObjects = append(runObjects, &snapshotv1.VolumeSnapshot{})
	}
	for _, obj := range runObjects {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, runObjectsIndex, backupOfRunObject); err != nil {
			return fmt.Errorf("index %T by PVCBackup: %w", obj, err)
		}
	}
	r.runObjectsIndexed = true
	owner := recordAfterStarts(handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(),
		&storagev1.PVCBackup{}, handler.OnlyControllerOwner()))
	b := ctrl.NewControllerManagedBy(mgr).
		For(&storagev1.PVCBackup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&batchv1.Job{}, owner).
		Owns(&corev1.PersistentVolumeClaim{}, builder.OnlyMetadata, builder.WithPredicates(notCreated()))
	if r.SnapshotsAvailable {
		b = b.Watches(&snapshotv1.VolumeSnapshot{}, owner)
	}
	c, err := b.WithOptions(opts.Controller()).Named("pvcbackup").Build(opts.Reconciler(r))
	if err != nil {
		return err
	}
	if !r.SnapshotsAvailable {
		// The VolumeSnapshot API may be installed later (snapshotAPI): its watch starts then, on
		// the running controller.
		r.watchSnapshots = func() error {
			return c.Watch(source.Kind[client.Object](mgr.GetCache(), &snapshotv1.VolumeSnapshot{}, owner))
		}
	}
	return nil
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
