package kopia

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// readKopiaManifest fetches the manifest of a kopia backup and checks that it names a snapshot;
// with at (EnvKopiaPointInTime), the version of the manifest that was current then.
func readKopiaManifest(ctx context.Context, store Store, key string, at *time.Time) (archive.Manifest, error) {
	body, err := getManifest(ctx, store, key, at)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return archive.Manifest{}, mover.Fail(mover.ReasonBackupNotFound, "manifest %s does not exist: the backup is incomplete or was pruned", key)
		}
		return archive.Manifest{}, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", key, err)
	}
	m, err := mover.ReadManifest(body)
	body.Close()
	switch {
	case errors.Is(err, mover.ErrBadManifest):
		return m, mover.Fail(mover.ReasonVerificationFailed, "manifest %s: %w", key, err)
	case err != nil:
		return m, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", key, err)
	case m.FormatVersion != archive.FormatVersion:
		return m, mover.Fail(mover.ReasonVerificationFailed, "manifest %s: format %d is not %d", key, m.FormatVersion, archive.FormatVersion)
	case m.Engine != name || m.Kopia == nil || m.Kopia.SnapshotID == "":
		return m, mover.Fail(mover.ReasonVerificationFailed, "manifest %s does not describe a kopia snapshot", key)
	}
	return m, nil
}

// openSnapshot opens the repository the manifest names (opts.Prefix when it names none) and
// proves the snapshot readable and matching the manifest, reading no file.
func openSnapshot(ctx context.Context, cfg objectstore.Config, opts Options, m archive.Manifest) (*kopiarepo.Repo, error) {
	if m.Kopia.Repository != "" {
		opts.Prefix = m.Kopia.Repository
	}
	r, _, err := openRepo(ctx, cfg, opts, true)
	if err != nil {
		return nil, err
	}
	id := m.Kopia.SnapshotID
	info, err := r.Check(ctx, id)
	switch {
	case errors.Is(err, kopiarepo.ErrSnapshotNotFound):
		err = mover.Fail(mover.ReasonBackupNotFound, "backup %s: kopia snapshot %s is not in the repository at %s", m.ID, id, opts.Prefix)
	case err != nil && ctx.Err() != nil:
		err = mover.Fail(mover.ReasonInterrupted, "interrupted: %w", err)
	case err != nil && objectstore.IsNetworkError(err):
		err = mover.Fail(mover.ReasonStorageFailed, "backup %s: %w", m.ID, err)
	case err != nil:
		err = mover.Fail(mover.ReasonVerificationFailed, "backup %s: kopia snapshot %s cannot be read: %w", m.ID, id, err)
	case int64(info.Files) != m.Files || info.TotalBytes != m.ContentBytes:
		err = mover.Fail(mover.ReasonVerificationFailed, "backup %s: kopia snapshot %s holds %d files (%d bytes), its manifest says %d (%d bytes)",
			m.ID, id, info.Files, info.TotalBytes, m.Files, m.ContentBytes)
	}
	if err != nil {
		r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the error above says what matters
		return nil, err
	}
	return r, nil
}

// Restore restores the kopia backup whose manifest is job.ManifestKey into job.TargetDir (the
// repository is the one the manifest names), and returns the Result of what it restored.
func (e Engine) Restore(ctx context.Context, s3 engine.S3, job engine.RestoreJob) (mover.Result, error) {
	if job.TargetDir == "" || job.ManifestKey == "" {
		return mover.Result{}, mover.Fail(mover.ReasonInvalidConfig, "missing environment: %s and %s are required", mover.EnvTargetDir, mover.EnvManifestKey)
	}
	if len(job.Paths) > 0 {
		m, sel, st, err := restorePaths(ctx, s3.Store, s3.Config, job, e.Options.watched(s3.Watch))
		res := readResult(m, int64(st.Files), st.Bytes)
		res.RestoredBytes, res.TotalFiles, res.TotalBytes = st.Bytes, m.Files, m.ContentBytes
		if sel != nil {
			res.TotalFiles, res.TotalBytes = sel.TotalFiles, sel.TotalBytes
		}
		return res, err
	}
	m, st, err := restore(ctx, s3.Store, s3.Config, job, e.Options.watched(s3.Watch))
	return readResult(m, int64(st.Files), st.Bytes), err
}

// restorePaths restores only job.Paths of the kopia backup whose manifest is job.ManifestKey
// into job.TargetDir. Before the target is touched it proves the backup readable as restore
// does and walks to each path (kopiarepo.Repo.Select: only the directories on the way are
// read): a path the snapshot lacks is PathNotInBackup. Then only the selection's directories
// and files are read, and the restored counts are checked against the snapshot's summaries of
// the selection. Clean never comes here (the run refuses it with paths).
func restorePaths(ctx context.Context, store Store, cfg objectstore.Config, job engine.RestoreJob, opts Options) (archive.Manifest, *kopiarepo.Selection, kopiarepo.RestoreStats, error) {
	var sel *kopiarepo.Selection
	m, st, err := restoreWith(ctx, store, cfg, job, opts, restoreSteps{
		check: func(r *kopiarepo.Repo, m archive.Manifest) (err error) {
			sel, err = r.Select(ctx, m.Kopia.SnapshotID, job.Paths)
			return selectError(ctx, m, err)
		},
		write: func(r *kopiarepo.Repo, m archive.Manifest) (kopiarepo.RestoreStats, error) {
			st, err := r.RestoreSelection(ctx, sel, job.TargetDir)
			return st, restoreError(ctx, m, st, err, sel)
		},
	})
	return m, sel, st, err
}

// selectError classifies an error of finding the paths of a restore in backup m.
func selectError(ctx context.Context, m archive.Manifest, err error) error {
	var missing *kopiarepo.PathsNotFoundError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &missing):
		return mover.Fail(mover.ReasonPathNotInBackup, "backup %s: %v: paths name files or directories relative to the volume's root, as they were backed up", m.ID, err)
	}
	return readError(ctx, m, "restore (finding the paths)", err)
}

// Verify reads back the kopia backup whose manifest is job.ManifestKey, and returns the Result
// of what it read.
func (e Engine) Verify(ctx context.Context, s3 engine.S3, job engine.VerifyJob) (mover.Result, error) {
	m, st, err := verify(ctx, s3.Store, s3.Config, job.ManifestKey, e.Options.watched(s3.Watch))
	return readResult(m, m.Files, st.Bytes), err
}

// readResult is the Result of a restore or verify of the kopia backup m.
func readResult(m archive.Manifest, files, bytes int64) mover.Result {
	res := mover.Result{ID: m.ID, Files: files, Bytes: bytes}
	if m.Kopia != nil {
		res.SnapshotID = m.Kopia.SnapshotID
	}
	return res
}

// restore restores the kopia backup whose manifest is job.ManifestKey into job.TargetDir.
// As with an archive, nothing in the target is touched before the backup proved readable (the
// manifest, the repository opened with the password, the snapshot and its root directory
// decrypted and matching the manifest). Every chunk is checked against its hash as it is read,
// and the restored counts against the manifest.
func restore(ctx context.Context, store Store, cfg objectstore.Config, job engine.RestoreJob, opts Options) (archive.Manifest, kopiarepo.RestoreStats, error) {
	return restoreWith(ctx, store, cfg, job, opts, restoreSteps{
		check: func(r *kopiarepo.Repo, m archive.Manifest) error { return proveBeforeClean(ctx, r, m, job) },
		write: func(r *kopiarepo.Repo, m archive.Manifest) (kopiarepo.RestoreStats, error) {
			st, err := r.Restore(ctx, m.Kopia.SnapshotID, job.TargetDir, engine.VolumeRoots(job)...)
			return st, restoreError(ctx, m, st, err, nil)
		},
	})
}

// restoreSteps is what a whole restore and a restore of some paths do differently: check, what
// must hold before the target is touched (the backup opened and its snapshot read already), and
// write, the restore into the prepared target.
type restoreSteps struct {
	check func(*kopiarepo.Repo, archive.Manifest) error
	write func(*kopiarepo.Repo, archive.Manifest) (kopiarepo.RestoreStats, error)
}

// restoreWith is the order every kopia restore keeps: read the manifest, open the repository and
// the snapshot, steps.check, and only then prepare the target (Clean empties it) and
// steps.write. A failure says whether the target was touched (engine.RestoreFailed).
func restoreWith(ctx context.Context, store Store, cfg objectstore.Config, job engine.RestoreJob, opts Options, steps restoreSteps) (archive.Manifest, kopiarepo.RestoreStats, error) {
	var st kopiarepo.RestoreStats
	prepared := false
	m, err := readKopiaManifest(ctx, store, job.ManifestKey, opts.PointInTime)
	if err == nil {
		var r *kopiarepo.Repo
		if r, err = openSnapshot(ctx, cfg, opts, m); err == nil {
			defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
			err = engine.CheckMembers(job, m.ID, m.Source.PVCs)
			if err == nil {
				err = steps.check(r, m)
			}
			if err == nil {
				err = engine.PrepareTarget(job)
			}
			if err == nil {
				prepared = true
				st, err = steps.write(r, m)
			}
		}
	}
	if err != nil {
		err = engine.RestoreFailed(err, prepared, engine.OverwriteOf(job))
	}
	return m, st, err
}

// proveBeforeClean reads the whole snapshot back before a Clean restore empties a target that
// holds data (Repo.Verify: every chunk fetched, decrypted and checked against its hash): a backup
// that cannot be read in full must not cost the user the data it would replace. It costs one
// more read of the backup (docs/backup-restore.md has the measured time); a Merge or Refuse
// restore, or one into an empty target, destroys nothing and skips it.
func proveBeforeClean(ctx context.Context, r *kopiarepo.Repo, m archive.Manifest, job engine.RestoreJob) error {
	cleans, err := engine.CleansData(job)
	if err != nil || !cleans {
		return err
	}
	_, err = r.Verify(ctx, m.Kopia.SnapshotID)
	return readError(ctx, m, "restore (the check before overwrite: Clean empties the target)", err)
}

// readError classifies an error of reading back the snapshot of backup m (verify, or the check
// before a Clean restore): damage is RepositoryDamaged, naming the lost or corrupt contents, their
// packs and the files that need them.
func readError(ctx context.Context, m archive.Manifest, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return mover.Fail(mover.ReasonInterrupted, "%s of backup %s interrupted: %w", what, m.ID, err)
	case kopiarepo.IsDamaged(err): // a *kopiarepo.DamageError among others
		return mover.Fail(mover.ReasonRepositoryDamaged, "%s of backup %s: the backup cannot be read: %v", what, m.ID, err)
	case objectstore.IsNetworkError(err):
		return mover.Fail(mover.ReasonStorageFailed, "%s of backup %s: %w", what, m.ID, err)
	}
	return mover.Fail(mover.ReasonVerificationFailed, "%s: backup %s is damaged: %v", what, m.ID, err)
}

// restoreError classifies the outcome of a kopia restore of the whole backup m, or of its
// selection sel (whose counts come from the snapshot's summaries of the paths).
func restoreError(ctx context.Context, m archive.Manifest, st kopiarepo.RestoreStats, err error, sel *kopiarepo.Selection) error {
	switch {
	case err == nil && sel != nil && sel.Known && (int64(st.Files) != sel.Files || st.Bytes != sel.Bytes):
		return mover.Fail(mover.ReasonVerificationFailed, "restored %d files (%d bytes) of %s, the snapshot of backup %s says they hold %d (%d bytes)",
			st.Files, st.Bytes, strings.Join(sel.Paths(), ", "), m.ID, sel.Files, sel.Bytes)
	case err == nil && sel != nil:
		return nil
	case err == nil && (int64(st.Files) != m.Files || st.Bytes != m.ContentBytes):
		return mover.Fail(mover.ReasonVerificationFailed, "restored %d files (%d bytes), the manifest of backup %s says %d (%d bytes)",
			st.Files, st.Bytes, m.ID, m.Files, m.ContentBytes)
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return mover.Fail(mover.ReasonInterrupted, "restore of backup %s interrupted: %w", m.ID, err)
	case archive.IsTargetError(err):
		return engine.TargetRefused(err)
	case objectstore.IsNetworkError(err):
		return mover.Fail(mover.ReasonStorageFailed, "restore of backup %s: %w", m.ID, err)
	}
	return mover.Fail(mover.ReasonVerificationFailed, "backup %s is damaged: %v", m.ID, err)
}

// verify reads back every file of the kopia backup whose manifest is manifestKey, each
// chunk checked against its hash and each pack against the bucket's listing, writing nothing.
func verify(ctx context.Context, store Store, cfg objectstore.Config, manifestKey string, opts Options) (archive.Manifest, kopiarepo.VerifyStats, error) {
	var st kopiarepo.VerifyStats
	m, err := readKopiaManifest(ctx, store, manifestKey, opts.PointInTime)
	if err != nil {
		return m, st, err
	}
	r, err := openSnapshot(ctx, cfg, opts, m)
	if err != nil {
		return m, st, err
	}
	defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	// Verify reads each distinct object once: hard links and files of equal content are one
	// object, so its counts are not the manifest's (openSnapshot compared those already).
	st, err = r.Verify(ctx, m.Kopia.SnapshotID)
	var damage *kopiarepo.DamageError
	if errors.As(err, &damage) && ctx.Err() == nil {
		err = dropDamage(ctx, r, damage, err)
	}
	return m, st, readError(ctx, m, "verify", err)
}

// dropDamage drops the contents a verify found lost or damaged from the repository's index
// (kopiarepo.Repo.Drop), so that the next backup uploads again those its volume still holds,
// and says so in err.
func dropDamage(ctx context.Context, r *kopiarepo.Repo, damage *kopiarepo.DamageError, err error) error {
	if derr := r.Drop(ctx, damage); derr != nil {
		return fmt.Errorf("%w; dropping the damaged contents from the index failed (%v): the next backup tries again", err, derr)
	}
	return fmt.Errorf("%w; they were dropped from the repository's index: the next backup reads every file and uploads them "+
		"again where the volume still holds them (backups that need contents the volume no longer holds stay unreadable)", err)
}
