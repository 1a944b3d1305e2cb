// Package backupcatalog holds the BackupCatalog reconciler: it reads, and only reads, a bucket and
// prefix where PVCBackups (of this cluster or a lost one) wrote their backups, and lists in status
// every PVCBackup prefix found, each with its restorable backups, so that a PVCRestore
// (spec.source.s3) can take one of them on a cluster that has nothing but the bucket, its
// credentials and the repository password. What a backup is, and when it is restorable, is
// storagekit's catalog (ReadCatalog), the same rule PVCRestore and PVCBackup apply.
package backupcatalog

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/statuspatch"
)

// DefaultRefreshInterval is spec.refreshInterval when it is not set (the CRD defaults it too).
const DefaultRefreshInterval = 10 * time.Minute

// BackupCatalogReconciler lists the backups under a BackupCatalog's bucket and prefix, on every
// spec change and then every spec.refreshInterval; while the location cannot be read (Ready
// False) it tries again every poll interval. It answers spec.browse with a `mover list` Job
// (backupcatalog_browse.go).
type BackupCatalogReconciler struct {
	client.Client
	storagekit.Deps
}

// The catalog reads its credentials Secret uncached (Deps.APIReader): get only.
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=backupcatalogs,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=backupcatalogs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// Browse runs a mover Job and reads its pod's termination message and the Job's events.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Reconcile refreshes one BackupCatalog when it is due, and answers its spec.browse.
func (r *BackupCatalogReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bc := &storagev1.BackupCatalog{}
	if err := r.Get(ctx, req.NamespacedName, bc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !bc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	base := bc.DeepCopy()
	var refreshErr error
	if untilRefresh(bc, now) == 0 {
		found, err := r.discover(ctx, bc, now)
		if res, retry := r.Retry(now, err); retry {
			return res, nil // an API server outage (storagekit/apioutage.go)
		}
		computeStatus(bc, found, err, now)
		refreshErr = err
	}
	res, err := errclass.Result(refreshErr, untilRefresh(bc, now))
	browseAfter, berr := r.reconcileBrowse(ctx, bc, now)
	if res, retry := r.Retry(now, berr); retry {
		return res, nil
	}
	if err == nil {
		err = berr
	}
	if browseAfter > 0 && (res.RequeueAfter == 0 || browseAfter < res.RequeueAfter) {
		res.RequeueAfter = browseAfter
	}
	if _, perr := statuspatch.Patch(ctx, r.Client, base, bc, func(bc *storagev1.BackupCatalog) any { return bc.Status }); perr != nil && err == nil {
		err = perr
	}
	return res, err
}

// refreshInterval is spec.refreshInterval, or the default.
func refreshInterval(bc *storagev1.BackupCatalog) time.Duration {
	if i := bc.Spec.RefreshInterval; i != nil && i.Duration >= time.Minute {
		return i.Duration
	}
	return DefaultRefreshInterval
}

// untilRefresh is how long the status stays fresh: zero when the bucket is to be read now, because
// the spec changed, the last attempt failed (Ready is not True), or the refresh interval has
// passed.
func untilRefresh(bc *storagev1.BackupCatalog, now time.Time) time.Duration {
	st := bc.Status
	if st.ObservedGeneration != bc.Generation || st.LastRefreshTime == nil || !ready(bc) {
		return 0
	}
	return max(0, st.LastRefreshTime.Add(refreshInterval(bc)).Sub(now))
}

// discover opens the location, checks the bucket and reads every PVCBackup prefix under it.
func (r *BackupCatalogReconciler) discover(ctx context.Context, bc *storagev1.BackupCatalog, now time.Time) (*found, error) {
	src := storagekit.S3Source{Namespace: bc.Namespace, Bucket: bc.Spec.Bucket, Location: bc.Spec.Location,
		Fields: storagekit.S3Fields{Location: "spec.location"}}
	store, secret, err := storagekit.OpenStore(ctx, r.Deps, src)
	if err != nil {
		return nil, err
	}
	if err := r.checkBucket(ctx, store, src); err != nil {
		return nil, err
	}
	f, err := readSources(ctx, store, bc.Spec.Location.Prefix, now)
	if err != nil {
		return nil, storagekit.ClassifyS3Error(err, src.Bucket, r.Poll())
	}
	if f.kopiaBackups > 0 {
		// Listing needs no password; restoring a kopia backup does. Say so now, not when the
		// PVCRestore waits for it.
		why := fmt.Sprintf("%d of the backups found are kopia backups,", f.kopiaBackups)
		if err := storagekit.CheckPassword(secret, src, why, r.Poll()); err != nil {
			return f, err
		}
	}
	return f, nil
}

// checkBucket is a Waiting BucketNotFound when the bucket does not exist, or the classified S3
// error when it cannot be asked.
func (r *BackupCatalogReconciler) checkBucket(ctx context.Context, store storagekit.ObjectStore, src storagekit.S3Source) error {
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	ok, err := store.BucketExists(cctx)
	switch {
	case err != nil:
		return storagekit.ClassifyS3Error(err, src.Bucket, r.Poll())
	case !ok:
		return errclass.Waiting(storagekit.ReasonBucketNotFound, fmt.Sprintf("bucket %q does not exist at %s: check %s and %s",
			src.Bucket, src.Location.Endpoint, "spec.bucket", src.Fields.Field("endpoint")), r.Poll())
	}
	return nil
}

// SetupWithManager registers the controller. Spec changes and its browse Jobs wake it (status
// writes do not); the refresh is its own RequeueAfter.
func (r *BackupCatalogReconciler) SetupWithManager(mgr ctrl.Manager, opts storagekit.Options) error {
	if err := r.Check(); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&storagev1.BackupCatalog{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		WithOptions(opts.Controller()).
		Named("backupcatalog").
		Complete(opts.Reconciler(r))
}
