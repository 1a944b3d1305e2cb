package archive

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"

	tarzstd "github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// ObjectReader is what a restore or verify needs from S3.
type ObjectReader interface {
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (objectstore.ObjectInfo, error)
}

// zstdMagic starts every zstd frame: an archive that does not start with it is not ours.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Restore is Restore from the bucket's store, and the Result of what it restored.
func (Engine) Restore(ctx context.Context, s3 engine.S3, job engine.RestoreJob) (mover.Result, error) {
	if job.TargetDir == "" || job.ArchiveKey == "" || job.ManifestKey == "" {
		return mover.Result{}, mover.Fail(mover.ReasonInvalidConfig, "missing environment: %s, %s and %s are required",
			mover.EnvTargetDir, mover.EnvArchiveKey, mover.EnvManifestKey)
	}
	if len(job.Paths) > 0 {
		m, sv, st, err := RestorePaths(ctx, s3.Store, job)
		res := result(m, st, job.ArchiveKey)
		res.RestoredBytes, res.TotalFiles, res.TotalBytes = st.ContentBytes, sv.Whole.Files, sv.Whole.ContentBytes
		return res, err
	}
	m, st, err := Restore(ctx, s3.Store, job)
	return result(m, st, job.ArchiveKey), err
}

// Verify is Verify from the bucket's store, and the Result of what it read.
func (Engine) Verify(ctx context.Context, s3 engine.S3, job engine.VerifyJob) (mover.Result, error) {
	m, st, err := Verify(ctx, s3.Store, job.ArchiveKey, job.ManifestKey)
	return result(m, st, job.ArchiveKey), err
}

// result is the Result of a restore or verify of archiveKey that read st.
func result(m tarzstd.Manifest, st tarzstd.Stats, archiveKey string) mover.Result {
	return mover.Result{ID: m.ID, ArchiveKey: archiveKey, Bytes: st.ArchiveBytes, SHA256: st.SHA256, Files: st.Files}
}

// Restore streams the backup (manifest first, then the archive) into job.TargetDir and checks
// the archive's sha256, size and counts against the manifest. Nothing in the target is touched
// until the backup has proven readable: manifest decoded and describing the archive, archive
// present with the declared size and starting like a zstd stream. A failure says what state the
// target was left in.
func Restore(ctx context.Context, store ObjectReader, job engine.RestoreJob) (tarzstd.Manifest, tarzstd.Stats, error) {
	prepared := false
	m, st, err := readBackup(ctx, store, job.ArchiveKey, job.ManifestKey,
		func(m tarzstd.Manifest) error {
			if err := engine.CheckMembers(job, m.ID, m.Source.PVCs); err != nil {
				return err
			}
			err := engine.PrepareTarget(job)
			prepared = err == nil
			return err
		},
		func(r io.Reader) (tarzstd.Stats, error) {
			return tarzstd.Read(ctx, r, job.TargetDir, tarzstd.ReadOptions{Chown: true, IgnoreChownEPERM: true, VolumeRoots: engine.VolumeRoots(job)})
		})
	if err != nil {
		err = engine.RestoreFailed(err, prepared, engine.OverwriteOf(job))
	}
	return m, st, err
}

// RestorePaths restores only job.Paths of the backup (and the directories above them) into
// job.TargetDir. A tar stream has no index, so it reads the archive twice: first to its end
// writing nothing (archive.SurveySelection), which proves it whole against the manifest and
// every path present and restorable alone (PathNotInBackup otherwise), all before the target is
// touched; then again, extracting the selection, whose counts must be the survey's. It returns
// the survey and the Stats of what it extracted.
func RestorePaths(ctx context.Context, store ObjectReader, job engine.RestoreJob) (tarzstd.Manifest, tarzstd.Survey, tarzstd.Stats, error) {
	sel := tarzstd.Select(job.Paths)
	var sv tarzstd.Survey
	m, _, err := readBackup(ctx, store, job.ArchiveKey, job.ManifestKey, nil, func(r io.Reader) (tarzstd.Stats, error) {
		var err error
		sv, err = tarzstd.SurveySelection(ctx, r, sel)
		return sv.Whole, err
	})
	if err == nil {
		err = selectionError(job.ArchiveKey, sv)
	}
	if err != nil {
		return m, sv, tarzstd.Stats{}, engine.RestoreFailed(err, false, job.Overwrite)
	}
	var got tarzstd.Stats
	prepared := false
	m, _, err = readBackup(ctx, store, job.ArchiveKey, job.ManifestKey,
		func(m tarzstd.Manifest) error {
			if err := engine.CheckMembers(job, m.ID, m.Source.PVCs); err != nil {
				return err
			}
			err := engine.PrepareTarget(job)
			prepared = err == nil
			return err
		},
		func(r io.Reader) (tarzstd.Stats, error) {
			var err error
			got, err = tarzstd.Read(ctx, r, job.TargetDir, tarzstd.ReadOptions{Chown: true, IgnoreChownEPERM: true, Only: sel})
			if err != nil {
				return got, err
			}
			if want := sv.Selected; got != want {
				return got, mover.Fail(mover.ReasonVerificationFailed, "archive %s: restored %d files (%d bytes), %d directories, %d symlinks, %d hard links "+
					"of the paths; the first read found %d files (%d bytes), %d directories, %d symlinks, %d hard links",
					job.ArchiveKey, got.Files, got.ContentBytes, got.Dirs, got.Symlinks, got.HardLinks,
					want.Files, want.ContentBytes, want.Dirs, want.Symlinks, want.HardLinks)
			}
			whole := sv.Whole // the stream is the one the survey proved whole: compare it so with the manifest
			whole.ArchiveBytes, whole.SHA256 = got.ArchiveBytes, got.SHA256
			return whole, nil
		})
	if err != nil {
		err = engine.RestoreFailed(err, prepared, job.Overwrite)
	}
	return m, sv, got, err
}

// selectionError is PathNotInBackup when the survey of archiveKey found a path missing or a hard
// link that cannot be restored without a file outside the paths.
func selectionError(archiveKey string, sv tarzstd.Survey) error {
	if len(sv.Missing) > 0 {
		return mover.Fail(mover.ReasonPathNotInBackup, "the backup (archive %s) holds no %s: paths name files or directories relative to the volume's root, as they were backed up",
			archiveKey, quoteAll(sv.Missing))
	}
	for link, file := range sv.Outside {
		return mover.Fail(mover.ReasonPathNotInBackup, "%q is a hard link to %q, which is not under the paths to restore: the archive holds the content once, "+
			"under %q; add %q to paths", link, file, file, file)
	}
	return nil
}

// quoteAll is the paths, quoted, joined with " or ".
func quoteAll(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = strconv.Quote(p)
	}
	return strings.Join(q, " or ")
}

// Verify downloads a backup and checks it against its manifest (sha256, size, counts) without
// writing anything anywhere: what PVCBackup spec.verify runs after each backup.
func Verify(ctx context.Context, store ObjectReader, archiveKey, manifestKey string) (tarzstd.Manifest, tarzstd.Stats, error) {
	return readBackup(ctx, store, archiveKey, manifestKey, nil,
		func(r io.Reader) (tarzstd.Stats, error) { return tarzstd.Check(ctx, r) })
}

// readBackup is what restore and verify share: fetch the manifest, prove the archive is there
// (mover.CheckBackup) and readable (its first bytes), only then run prepare, stream the archive
// into consume (archive.Read or archive.Check), and compare what consume saw with the manifest.
// A missing object is BackupNotFound, a damaged or mismatching one VerificationFailed.
func readBackup(ctx context.Context, store ObjectReader, archiveKey, manifestKey string, prepare func(tarzstd.Manifest) error,
	consume func(io.Reader) (tarzstd.Stats, error)) (tarzstd.Manifest, tarzstd.Stats, error) {
	var st tarzstd.Stats
	body, err := store.Get(ctx, manifestKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return tarzstd.Manifest{}, st, mover.Fail(mover.ReasonBackupNotFound, "manifest %s does not exist: the backup is incomplete or was pruned", manifestKey)
		}
		return tarzstd.Manifest{}, st, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", manifestKey, err)
	}
	m, err := mover.ReadManifest(body)
	body.Close()
	switch {
	case errors.Is(err, mover.ErrBadManifest):
		return m, st, mover.Fail(mover.ReasonVerificationFailed, "manifest %s: %w", manifestKey, err)
	case err != nil:
		return m, st, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", manifestKey, err)
	}
	size := int64(-1)
	info, err := store.Stat(ctx, archiveKey)
	switch {
	case objectstore.IsNotFound(err):
		return m, st, mover.Fail(mover.ReasonBackupNotFound, "archive %s does not exist: the backup is incomplete", archiveKey)
	case err != nil:
		return m, st, mover.Fail(mover.ReasonStorageFailed, "stat archive %s: %w", archiveKey, err)
	default:
		size = info.Size
	}
	if err := mover.CheckBackup(m, m.ID, archiveKey, size); err != nil {
		return m, st, &mover.Error{Reason: mover.ReasonVerificationFailed, Err: err}
	}
	body, err = store.Get(ctx, archiveKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return m, st, mover.Fail(mover.ReasonBackupNotFound, "archive %s does not exist", archiveKey)
		}
		return m, st, mover.Fail(mover.ReasonStorageFailed, "read archive %s: %w", archiveKey, err)
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10)
	head, err := br.Peek(len(zstdMagic))
	if err != nil {
		return m, st, mover.Fail(mover.ReasonStorageFailed, "read archive %s: %w", archiveKey, err)
	}
	if !bytes.Equal(head, zstdMagic) {
		return m, st, mover.Fail(mover.ReasonVerificationFailed, "archive %s is not a zstd stream (starts with %x)", archiveKey, head)
	}
	if prepare != nil {
		if err := prepare(m); err != nil {
			return m, st, err
		}
	}
	st, err = consume(br)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return m, st, mover.Fail(mover.ReasonInterrupted, "restore of %s interrupted: %w", archiveKey, err)
		case tarzstd.IsTargetError(err):
			return m, st, engine.TargetRefused(err)
		case objectstore.IsNetworkError(err):
			return m, st, mover.Fail(mover.ReasonStorageFailed, "download of archive %s failed: %w", archiveKey, err)
		}
		return m, st, mover.Fail(mover.ReasonVerificationFailed, "archive %s is damaged (%v)", archiveKey, err)
	}
	if err := m.Verify(st); err != nil {
		return m, st, mover.Fail(mover.ReasonVerificationFailed, "archive %s does not match its manifest: %v", archiveKey, err)
	}
	return m, st, nil
}
