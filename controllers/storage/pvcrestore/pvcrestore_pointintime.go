package pvcrestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// resolveAt resolves spec.source.backupID as the bucket held it at spec.source.pointInTime: its
// manifest in the version that was current then, not the catalog of now (whose manifests an
// attacker may have hidden behind delete markers or overwritten). The mover reads the repository
// as of the same time (pointInTimeEnv) and proves the backup before it touches the target.
func (r *PVCRestoreReconciler) resolveAt(ctx context.Context, s *restoreScope, at time.Time, password func() error) error {
	pr := s.restore
	id := pr.Spec.Source.BackupID
	key := s.prefix + id + storagekit.ManifestSuffix
	when := at.UTC().Format(time.RFC3339)
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	m, err := storagekit.GetManifestAt(cctx, s.store, key, at)
	switch {
	case objectstore.IsNotFound(err):
		return s.finish(storagev1.RestoreFailed, ReasonBackupNotFound, fmt.Sprintf(
			"bucket %s held no manifest %s at %s (it was written later, or was already deleted then); nothing was restored", s.source.Bucket, key, when))
	case errors.Is(err, mover.ErrBadManifest):
		return s.finish(storagev1.RestoreFailed, ReasonBackupBroken, fmt.Sprintf(
			"the manifest %s that bucket %s held at %s is not usable: %v; nothing was restored", key, s.source.Bucket, when, err))
	case err != nil:
		return storagekit.ClassifyS3Error(err, s.source.Bucket, r.Poll())
	}
	engine := storagekit.ManifestEngine(m)
	if !engine.HasRepository() {
		return s.finish(storagev1.RestoreFailed, storagekit.ReasonInvalidSpec, fmt.Sprintf(
			"backup %s is an archive backup: source.pointInTime restores kopia backups only; remove it to restore the archive as it is now", id))
	}
	s.manifest = &m
	pr.Status.BackupID = id
	pr.Status.Engine = engine.Name()
	pr.Status.ObjectKey = engine.BackupKey(s.prefix, id)
	pr.Status.SnapshotID = engine.SnapshotID(m)
	if err := s.checkGroup(m); err != nil {
		return err
	}
	return password()
}

// pointInTimeEnv tells the mover to read the backup as the bucket held it at
// spec.source.pointInTime (mover.EnvKopiaPointInTime); none without it.
func pointInTimeEnv(pr *storagev1.PVCRestore) []corev1.EnvVar {
	if pr.Spec.Source.PointInTime == nil {
		return nil
	}
	return []corev1.EnvVar{{Name: mover.EnvKopiaPointInTime, Value: pr.Spec.Source.PointInTime.UTC().Format(time.RFC3339)}}
}
