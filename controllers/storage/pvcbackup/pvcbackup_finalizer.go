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

// reconcileFinalizer keeps each finalizer exactly when it is needed: finalizer when
// deletionPolicy is Delete (with Retain there is nothing to clean up in S3, and a finalizer would
// only risk a stuck object), hooksFinalizer while runs have hooks or the active run owes its
// after-hooks (a deleted PVCBackup still thaws its application).
func (r *PVCBackupReconciler) reconcileFinalizer(ctx context.Context, pb *storagev1.PVCBackup) error {
	want := map[string]bool{
		finalizer:      pb.Spec.DeletionPolicy == storagev1.DeletionDelete,
		hooksFinalizer: hasHooks(pb) || afterHooksDue(pb.Status.ActiveRun),
	}
	changed := false
	for f, w := range want {
		changed = changed || w != controllerutil.ContainsFinalizer(pb, f)
	}
	if !changed {
		return nil
	}
	patch := client.MergeFrom(pb.DeepCopy())
	for f, w := range want {
		if w {
			controllerutil.AddFinalizer(pb, f)
		} else {
			controllerutil.RemoveFinalizer(pb, f)
		}
	}
	if err := r.Patch(ctx, pb, patch); err != nil {
		return err
	}
	r.seen.Record(pb) // pb is the API server's answer: its current copy
	return nil
}

// reconcileDelete runs the after-hooks the active run owes (hooksFinalizer), removes every
// object of the PVCBackup from S3 (finalizer), then the finalizers. It is idempotent (objects
// already gone are success) and does not hold the PVCBackup forever when the bucket itself is
// gone. A failure is returned for backoff and shown as DeletionFailed.
func (r *PVCBackupReconciler) reconcileDelete(ctx context.Context, s *scope) error {
	pb := s.backup
	hooks, backups := controllerutil.ContainsFinalizer(pb, hooksFinalizer), controllerutil.ContainsFinalizer(pb, finalizer)
	if !hooks && !backups {
		return nil
	}
	if hooks && afterHooksDue(pb.Status.ActiveRun) {
		// The run ends with the PVCBackup; its application is thawed first. A failed thaw is
		// in the events; it does not hold the PVCBackup.
		if _, err := r.reconcileAfterHooks(ctx, s); err != nil {
			return err
		}
	}
	if backups {
		if err := r.deleteBackups(ctx, s); err != nil {
			meta.SetStatusCondition(&pb.Status.Conditions, metav1.Condition{Type: storagev1.ConditionDeletionFailed,
				Status: metav1.ConditionTrue, Reason: ReasonDeletionFailed, Message: err.Error(), ObservedGeneration: pb.Generation})
			return err
		}
	}
	patch := client.MergeFrom(pb.DeepCopy())
	controllerutil.RemoveFinalizer(pb, finalizer)
	controllerutil.RemoveFinalizer(pb, hooksFinalizer)
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
