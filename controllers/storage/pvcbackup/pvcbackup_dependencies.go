package pvcbackup

import (
	"context"
	"fmt"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// checkDependencies verifies that the PVC (every member of a group: s.members) and the
// credentials are there and, with checkBucket, that S3 accepts them and has the bucket. Each
// missing piece is a precise Waiting condition, polled, never a retry storm.
func (r *PVCBackupReconciler) checkDependencies(ctx context.Context, s *scope, checkBucket bool) error {
	pb := s.backup
	members, err := r.resolveMembers(ctx, pb)
	if err != nil {
		return err
	}
	s.members = members
	if err := r.checkHooksAllowed(ctx, pb); err != nil {
		return err
	}
	if pb.Spec.Snapshot != nil && !r.snapshotsServed(ctx) {
		// Found before a run is due, and polled: installing the CRDs heals it (snapshotAPI).
		return errclass.Waiting(ReasonSnapshotsUnsupported, snapshotsUnsupported(r.Poll()), r.Poll())
	}
	if pb.Spec.Snapshot != nil {
		// The snapshot class depends on the PVC's spec, which the cache does not hold: read it
		// uncached, as the PersistentVolume and classes it leads to are. Every member of a group
		// has its own (the members may be volumes of different drivers).
		if s.groupSnapshotClass, err = r.groupSnapshotClass(ctx, pb, members); err != nil {
			return err
		}
		s.snapshotClasses = make(map[string]string, len(members))
		for _, pvc := range members {
			if s.groupSnapshotClass != "" {
				break // one VolumeGroupSnapshot: no VolumeSnapshotClass of the members is needed
			}
			source, err := r.sourceClaim(ctx, pb.Namespace, pvc)
			if err != nil {
				return err
			}
			if s.snapshotClasses[pvc], err = r.resolveSnapshotClass(ctx, s, source); err != nil {
				return err
			}
		}
	}
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return err
	}
	if !checkBucket {
		if storagekit.EngineFor(pb.Spec.Engine).NeedsPassword() {
			return s.passwordErr
		}
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	exists, err := store.BucketExists(cctx)
	switch {
	case err != nil:
		return storagekit.ClassifyS3Error(err, pb.Spec.S3Bucket, r.Poll())
	case !exists:
		return errclass.Waiting(storagekit.ReasonBucketNotFound, fmt.Sprintf("bucket %q does not exist at %s", pb.Spec.S3Bucket, pb.Spec.S3.Endpoint), r.Poll())
	}
	if s.engine, err = r.resolveEngine(ctx, s); err != nil {
		return err
	}
	if err := r.checkImmutability(ctx, s, store); err != nil {
		return err
	}
	if storagekit.EngineFor(s.engine).NeedsPassword() {
		return s.passwordErr
	}
	return nil
}

// storeFor opens the ObjectStore of the PVCBackup, once per reconcile.
func (r *PVCBackupReconciler) storeFor(ctx context.Context, s *scope) (storagekit.ObjectStore, error) {
	if s.store != nil {
		return s.store, nil
	}
	src := storagekit.BackupSource(s.backup)
	store, secret, err := storagekit.OpenStore(ctx, r.Deps, src)
	if err == nil {
		s.store = store
		why := "kopia backups (spec.engine Kopia) are"
		if s.backup.Spec.Engine == "" {
			why = "new backups use the kopia engine (spec.engine empty, and the prefix holds no archive backups) and are"
		}
		s.passwordErr = storagekit.CheckPassword(secret, src, why, r.Poll())
	}
	return store, err
}

// readManifest fetches and decodes the manifest of a run.
func (r *PVCBackupReconciler) readManifest(ctx context.Context, s *scope, key string) (archive.Manifest, error) {
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return archive.Manifest{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	body, err := store.Get(cctx, key)
	if err != nil {
		return archive.Manifest{}, err
	}
	defer body.Close()
	return mover.ReadManifest(body)
}
