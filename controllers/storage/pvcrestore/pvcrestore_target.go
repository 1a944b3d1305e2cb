package pvcrestore

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// The targets of a restore (resolveTarget, the second phase): each target PVC found, or created
// once every new one proved large enough, and refused while a running pod writes to it.

// resolveTarget finds or creates the target PVC (each target's, for a group backup) and refuses
// one a running pod writes to.
func (r *PVCRestoreReconciler) resolveTarget(ctx context.Context, s *restoreScope) error {
	pr := s.restore
	if err := s.checkDistinctTargets(); err != nil {
		return err
	}
	if err := r.checkNewPVCSizes(ctx, s); err != nil {
		return err
	}
	pr.Status.Targets = nil
	for _, t := range targetsOf(pr) {
		if err := r.resolveOneTarget(ctx, s, t); err != nil {
			return err
		}
		if t.source == "" {
			pr.Status.TargetPVC = t.pvcName()
		} else {
			pr.Status.Targets = append(pr.Status.Targets, storagev1.RestoredTarget{SourcePVC: t.source, PVC: t.pvcName()})
		}
	}
	return nil
}

// resolveOneTarget finds or creates the PVC of t and refuses one a running pod writes to.
func (r *PVCRestoreReconciler) resolveOneTarget(ctx context.Context, s *restoreScope, t target) error {
	pr, name, field := s.restore, t.pvcName(), t.field()
	pvc := storagekit.ClaimMetadata() // its labels are all this needs
	err := r.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: name}, pvc)
	switch {
	case apierrors.IsNotFound(err) && t.spec.NewPVC != nil:
		if err := storagekit.CreateOnce(ctx, r.Client, nil, desiredRestorePVC(pr, t.spec.NewPVC)); err != nil {
			if apierrors.IsInvalid(err) {
				return s.finish(storagev1.RestoreFailed, storagekit.ReasonInvalidSpec, fmt.Sprintf("the API server rejected %s.newPVC: %v", field, err))
			}
			return fmt.Errorf("create target PVC %s: %w", name, err)
		}
	case apierrors.IsNotFound(err):
		return errclass.Waiting(ReasonTargetNotFound, fmt.Sprintf("PersistentVolumeClaim %q (%s.pvcName) does not exist", name, field), r.Poll())
	case err != nil:
		return err
	case t.spec.NewPVC != nil && pvc.Labels[storagekit.LabelRestore] != pr.Name:
		return s.finish(storagev1.RestoreFailed, ReasonTargetExists, fmt.Sprintf(
			"%s.newPVC names PersistentVolumeClaim %q, which exists and was not created by this restore; nothing was restored (to restore into it, use %s.pvcName)",
			field, name, field))
	}
	if t.spec.AllowInUse {
		return nil
	}
	if user, err := r.writerOf(ctx, pr, name); err != nil {
		return err
	} else if user != "" {
		return errclass.Waiting(ReasonTargetInUse, fmt.Sprintf("pod %s mounts PersistentVolumeClaim %q read-write; stop it or set %s.allowInUse", user, name, field), r.Poll())
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
		if p.Labels[storagekit.LabelRestore] == pr.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
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

// checkNewPVCSizes checks the size of every newPVC still to create (checkNewPVCSize) before any
// is created: a group restore with one target too small creates none.
func (r *PVCRestoreReconciler) checkNewPVCSizes(ctx context.Context, s *restoreScope) error {
	for _, t := range targetsOf(s.restore) {
		if t.spec.NewPVC == nil {
			continue
		}
		err := r.Get(ctx, client.ObjectKey{Namespace: s.restore.Namespace, Name: t.pvcName()}, storagekit.ClaimMetadata())
		switch {
		case apierrors.IsNotFound(err):
			if err := r.checkNewPVCSize(ctx, s, t); err != nil {
				return err
			}
		case err != nil:
			return err
		}
	}
	return nil
}

// checkNewPVCSize refuses a newPVC of t smaller than the content it receives: the backup's, or a
// group member's (known when the manifest recorded the backup's top level: archive backups; a
// kopia group's members are not checked).
func (r *PVCRestoreReconciler) checkNewPVCSize(ctx context.Context, s *restoreScope, t target) error {
	if s.manifest == nil {
		cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
		defer cancel()
		key := storagekit.ManifestKeyOf(s.restore.Status.ObjectKey)
		var m archive.Manifest
		var err error
		if at := s.restore.Spec.Source.PointInTime; at != nil { // the manifest resolveAt read
			m, err = storagekit.GetManifestAt(cctx, s.store, key, at.Time)
		} else {
			m, err = storagekit.GetManifest(cctx, s.store, key)
		}
		if err != nil {
			return fmt.Errorf("read manifest of backup %s: %w", s.restore.Status.BackupID, err)
		}
		s.manifest = &m
	}
	size, need, of := t.spec.NewPVC.Size, s.manifest.ContentBytes, ""
	if t.source != "" {
		var known bool
		if need, known = memberBytes(*s.manifest, t.source); !known {
			return nil
		}
		of = " of member " + t.source
	}
	if size.Value() < need {
		return s.finish(storagev1.RestoreFailed, ReasonTargetTooSmall, fmt.Sprintf(
			"%s.newPVC.size %s is smaller than the %d bytes of file data%s in backup %s; nothing was created or restored",
			t.field(), size.String(), need, of, s.restore.Status.BackupID))
	}
	return nil
}
