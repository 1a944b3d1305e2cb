package pvcbackup

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// reconcileFinalizer keeps the finalizer exactly when deletionPolicy is Delete: with Retain
// there is nothing to clean up, and a finalizer would only risk a stuck object.
func (r *PVCBackupReconciler) reconcileFinalizer(ctx context.Context, pb *storagev1.PVCBackup) error {
	want := pb.Spec.DeletionPolicy == storagev1.DeletionDelete
	if want == controllerutil.ContainsFinalizer(pb, finalizer) {
		return nil
	}
	patch := client.MergeFrom(pb.DeepCopy())
	if want {
		controllerutil.AddFinalizer(pb, finalizer)
	} else {
		controllerutil.RemoveFinalizer(pb, finalizer)
	}
	if err := r.Patch(ctx, pb, patch); err != nil {
		return err
	}
	r.seen.Record(pb) // pb is the API server's answer: its current copy
	return nil
}

// reconcileDelete removes every object of the PVCBackup from S3, then the finalizer. It is
// idempotent (objects already gone are success) and does not hold the PVCBackup forever when
// the bucket itself is gone. A failure is returned for backoff and shown as DeletionFailed.
func (r *PVCBackupReconciler) reconcileDelete(ctx context.Context, s *scope) error {
	pb := s.backup
	if !controllerutil.ContainsFinalizer(pb, finalizer) {
		return nil
	}
	err := r.deleteBackups(ctx, s)
	if err != nil {
		meta.SetStatusCondition(&pb.Status.Conditions, metav1.Condition{Type: storagev1.ConditionDeletionFailed,
			Status: metav1.ConditionTrue, Reason: ReasonDeletionFailed, Message: err.Error(), ObservedGeneration: pb.Generation})
		return err
	}
	patch := client.MergeFrom(pb.DeepCopy())
	controllerutil.RemoveFinalizer(pb, finalizer)
	return client.IgnoreNotFound(r.Patch(ctx, pb, patch))
}

func (r *PVCBackupReconciler) deleteBackups(ctx context.Context, s *scope) error {
	store, err := r.storeFor(ctx, s)
	if err != nil {
		if w, ok := errclass.AsWaiting(err); ok {
			return fmt.Errorf("cannot delete the backups: %s (restore it, or remove the finalizer %s to keep them)", w.Message, finalizer)
		}
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	n, err := store.DeletePrefix(cctx, storagekit.BackupPrefix(s.backup))
	switch {
	case objectstore.IsNoSuchBucket(err):
		return nil // the bucket is gone: nothing left to delete
	case err != nil:
		return fmt.Errorf("delete backups under %s: %w", storagekit.BackupPrefix(s.backup), err)
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(s.backup, "Normal", "BackupsDeleted", "deleted %d objects under %s", n, storagekit.BackupPrefix(s.backup))
	}
	return nil
}
