package pvcbackup

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// resolveEngine is the engine of the next run: spec.engine, or, when it is empty, the engine of
// the last run (Archive when an operator without kopia recorded it), or, for a PVCBackup that
// has not run yet, Archive when its prefix holds archives and Kopia otherwise. Upgrading the
// operator thus never turns an existing archive PVCBackup into one that needs a password it was
// never given, and a failed run (which leaves no backup to tell) never switches engines.
func (r *PVCBackupReconciler) resolveEngine(ctx context.Context, s *scope) (storagev1.BackupEngine, error) {
	pb := s.backup
	if pb.Spec.Engine != "" {
		return pb.Spec.Engine, nil
	}
	if last := pb.Status.LastRun; last != nil {
		if last.Engine == "" {
			return storagev1.EngineArchive, nil
		}
		return last.Engine, nil
	}
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	objects, err := store.ListTop(cctx, storagekit.BackupPrefix(pb))
	if err != nil {
		return "", storagekit.ClassifyS3Error(err, pb.Spec.S3Bucket, r.Poll())
	}
	for _, o := range objects {
		if strings.HasSuffix(o.Key, storagekit.ArchiveSuffix) {
			return storagev1.EngineArchive, nil
		}
	}
	return storagev1.EngineKopia, nil
}

// keyDerivationName is status.repository.keyDerivation for kopia's name of an algorithm.
func keyDerivationName(kopiaName string) string {
	switch kopiaName {
	case mover.KeyDerivationScrypt:
		return string(storagev1.KeyDerivationScrypt)
	case mover.KeyDerivationPBKDF2:
		return string(storagev1.KeyDerivationPBKDF2)
	}
	return kopiaName
}

// readProgress shows what the mover of the active run last reported (status.activeRun.progress).
// It is a nicety: a missing or unreadable report changes nothing else.
func (r *PVCBackupReconciler) readProgress(ctx context.Context, s *scope) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	body, err := store.Get(cctx, storagekit.ProgressKey(storagekit.BackupPrefix(pb), run.ID))
	if err != nil {
		return
	}
	defer body.Close()
	var p mover.Progress
	if err := json.NewDecoder(io.LimitReader(body, 4096)).Decode(&p); err != nil {
		return
	}
	run.Progress = &storagev1.RunProgress{Time: metav1.NewTime(p.Time.Truncate(time.Second)), EstimatedBytes: p.EstimatedBytes,
		HashedBytes: p.HashedBytes, CachedBytes: p.CachedBytes, UploadedBytes: p.UploadedBytes}
}

// repositoryStatus is status.repository after a kopia run that reported res.
func repositoryStatus(res mover.Result, now time.Time) *storagev1.RepositoryStatus {
	rs := &storagev1.RepositoryStatus{Bytes: res.RepositoryBytes, KeyDerivation: keyDerivationName(res.KeyDerivation), Splitter: res.Splitter,
		MaintenanceMessage: storagekit.Truncate(res.MaintenanceError, 1024), UpdateTime: metav1.NewTime(now),
		Immutability: storagekit.RepositoryImmutability(res.RetentionMode, res.RetentionPeriod)}
	if t := res.LastQuickMaintenance; t != nil {
		rs.LastQuickMaintenance = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	if t := res.LastFullMaintenance; t != nil {
		rs.LastFullMaintenance = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	if res.PasswordRotated {
		changed := rs.UpdateTime
		rs.PasswordChangeTime = &changed
	}
	return rs
}
