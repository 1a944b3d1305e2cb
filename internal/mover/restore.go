package mover

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Environment of `mover restore` (besides the S3 variables it shares with backup).
const (
	EnvTargetDir = "MOVER_TARGET_DIR"
	EnvOverwrite = "RESTORE_OVERWRITE" // Refuse, Clean or Merge
)

// ObjectReader is what a restore or verify needs from S3.
type ObjectReader interface {
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (objectstore.ObjectInfo, error)
}

// RestoreJob describes one restore.
type RestoreJob struct {
	TargetDir   string
	ArchiveKey  string
	ManifestKey string
	Overwrite   string
}

// zstdMagic starts every zstd frame: an archive that does not start with it is not ours.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Restore streams the backup (manifest first, then the archive) into job.TargetDir and checks
// the archive's sha256, size and counts against the manifest. Nothing in the target is touched
// until the backup has proven readable: manifest decoded and describing the archive, archive
// present with the declared size and starting like a zstd stream. A failure says what state the
// target was left in.
func Restore(ctx context.Context, store ObjectReader, job RestoreJob) (archive.Manifest, archive.Stats, error) {
	prepared := false
	m, st, err := readBackup(ctx, store, job.ArchiveKey, job.ManifestKey,
		func() error {
			err := prepareTarget(job.TargetDir, job.Overwrite)
			prepared = err == nil
			return err
		},
		func(r io.Reader) (archive.Stats, error) {
			return archive.Read(ctx, r, job.TargetDir, archive.ReadOptions{Chown: true, IgnoreChownEPERM: true})
		})
	if err != nil {
		err = &failure{reasonOf(err, ReasonStorageFailed), fmt.Errorf("%w; %s", err, targetState(prepared, job.Overwrite))}
	}
	return m, st, err
}

// targetState tells the user what a failed restore left in the target volume.
func targetState(prepared bool, overwrite string) string {
	switch {
	case !prepared:
		return "the target volume was not changed"
	case overwrite == "Clean":
		return "the target volume was emptied (overwrite: Clean) and holds a partial restore"
	case overwrite == "Merge":
		return "the target volume holds its earlier files and a partial restore"
	default:
		return "the target volume holds a partial restore"
	}
}

// CheckBackup reports whether manifest m describes a complete backup whose archive is stored at
// archiveKey with archiveSize bytes: the definition of a usable backup that restore, verify,
// retention and "latest" share. A nil error does not prove the archive's content; reading it
// against the manifest does.
func CheckBackup(m archive.Manifest, id, archiveKey string, archiveSize int64) error {
	switch {
	case m.FormatVersion != archive.FormatVersion:
		return fmt.Errorf("manifest format %d is not %d", m.FormatVersion, archive.FormatVersion)
	case m.ID != id:
		return fmt.Errorf("manifest names backup %q, not %q", m.ID, id)
	case m.Archive.Key != archiveKey:
		return fmt.Errorf("manifest describes %s, not %s", m.Archive.Key, archiveKey)
	case archiveSize < 0:
		return fmt.Errorf("archive %s does not exist", archiveKey)
	case archiveSize != m.Archive.Bytes:
		return fmt.Errorf("archive %s has %d bytes, its manifest says %d", archiveKey, archiveSize, m.Archive.Bytes)
	}
	return nil
}

// readBackup is what restore and verify share: fetch the manifest, prove the archive is there
// (CheckBackup) and readable (its first bytes), only then run prepare, stream the archive into
// consume (archive.Read or archive.Check), and compare what consume saw with the manifest. A
// missing object is BackupNotFound, a damaged or mismatching one VerificationFailed.
func readBackup(ctx context.Context, store ObjectReader, archiveKey, manifestKey string, prepare func() error,
	consume func(io.Reader) (archive.Stats, error)) (archive.Manifest, archive.Stats, error) {
	var st archive.Stats
	body, err := store.Get(ctx, manifestKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return archive.Manifest{}, st, fail(ReasonBackupNotFound, "manifest %s does not exist: the backup is incomplete or was pruned", manifestKey)
		}
		return archive.Manifest{}, st, fail(ReasonStorageFailed, "read manifest %s: %w", manifestKey, err)
	}
	m, err := ReadManifest(body)
	body.Close()
	switch {
	case errors.Is(err, ErrBadManifest):
		return m, st, fail(ReasonVerificationFailed, "manifest %s: %w", manifestKey, err)
	case err != nil:
		return m, st, fail(ReasonStorageFailed, "read manifest %s: %w", manifestKey, err)
	}
	size := int64(-1)
	info, err := store.Stat(ctx, archiveKey)
	switch {
	case objectstore.IsNotFound(err):
		return m, st, fail(ReasonBackupNotFound, "archive %s does not exist: the backup is incomplete", archiveKey)
	case err != nil:
		return m, st, fail(ReasonStorageFailed, "stat archive %s: %w", archiveKey, err)
	default:
		size = info.Size
	}
	if err := CheckBackup(m, m.ID, archiveKey, size); err != nil {
		return m, st, &failure{ReasonVerificationFailed, err}
	}
	body, err = store.Get(ctx, archiveKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return m, st, fail(ReasonBackupNotFound, "archive %s does not exist", archiveKey)
		}
		return m, st, fail(ReasonStorageFailed, "read archive %s: %w", archiveKey, err)
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10)
	head, err := br.Peek(len(zstdMagic))
	if err != nil {
		return m, st, fail(ReasonStorageFailed, "read archive %s: %w", archiveKey, err)
	}
	if !bytes.Equal(head, zstdMagic) {
		return m, st, fail(ReasonVerificationFailed, "archive %s is not a zstd stream (starts with %x)", archiveKey, head)
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return m, st, err
		}
	}
	st, err = consume(br)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return m, st, fail(ReasonInterrupted, "restore of %s interrupted: %w", archiveKey, err)
		case archive.IsTargetError(err):
			return m, st, fail(ReasonTargetNotWritable, "the target refused a write (%v): the mover runs as uid %d and needs a writable volume with room for the backup",
				err, os.Getuid())
		case objectstore.IsNetworkError(err):
			return m, st, fail(ReasonStorageFailed, "download of archive %s failed: %w", archiveKey, err)
		}
		return m, st, fail(ReasonVerificationFailed, "archive %s is damaged (%v)", archiveKey, err)
	}
	if err := m.Verify(st); err != nil {
		return m, st, fail(ReasonVerificationFailed, "archive %s does not match its manifest: %v", archiveKey, err)
	}
	return m, st, nil
}

// outcome is the Result of a restore or verify of archiveKey.
func outcome(m archive.Manifest, st archive.Stats, archiveKey string, err error) Result {
	if err != nil {
		res := failed(err, ReasonStorageFailed)
		res.ID, res.ArchiveKey = m.ID, archiveKey
		return res
	}
	return Result{Result: Succeeded, ID: m.ID, ArchiveKey: archiveKey, Bytes: st.ArchiveBytes, SHA256: st.SHA256, Files: st.Files}
}

// targetData lists the entries of the target volume that are data: lost+found (made by mkfs)
// is not.
func targetData(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fail(ReasonTargetNotWritable, "target: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "lost+found" {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// prepareTarget applies the overwrite policy. lost+found (made by mkfs) does not count as data.
func prepareTarget(dir, policy string) error {
	names, err := targetData(dir)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	switch policy {
	case "Merge":
		return nil
	case "Clean":
		for _, n := range names {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return fail(ReasonTargetNotWritable, "clean target: %w (the target volume is partly emptied)", err)
			}
		}
		return nil
	default:
		shown := names[:min(len(names), 3)]
		more := ""
		if len(names) > 3 {
			more = ", ..."
		}
		return fail(ReasonTargetNotEmpty, "the target volume is not empty (%s%s); set target.overwrite to Clean or Merge",
			strings.Join(shown, ", "), more)
	}
}

// RunRestore is `mover restore`: it reads the environment, restores, and writes the Result to
// the termination log.
func RunRestore(ctx context.Context, getenv func(string) string) Result {
	res := runRestore(ctx, getenv)
	writeTerminationLog(getenv, &res)
	return res
}

func runRestore(ctx context.Context, getenv func(string) string) Result {
	cfg, err := storeFromEnv(getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	job := RestoreJob{TargetDir: getenv(EnvTargetDir), ArchiveKey: getenv(EnvArchiveKey), ManifestKey: getenv(EnvManifestKey),
		Overwrite: getenv(EnvOverwrite)}
	if getenv(EnvEngine) == EngineKopia {
		return runRestoreKopia(ctx, getenv, cfg, job)
	}
	if job.TargetDir == "" || job.ArchiveKey == "" || job.ManifestKey == "" {
		return failed(fmt.Errorf("missing environment: %s, %s and %s are required", EnvTargetDir, EnvArchiveKey, EnvManifestKey), ReasonInvalidConfig)
	}
	store, err := objectstore.New(cfg)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	w, err := watchReads(ctx, getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	defer w.stop()
	m, st, err := Restore(w.ctx, watchedStore{store, w.act}, job)
	return outcome(m, st, job.ArchiveKey, w.outcome(err))
}

// runRestoreKopia is `mover restore` of a kopia backup: the manifest names the snapshot.
func runRestoreKopia(ctx context.Context, getenv func(string) string, cfg objectstore.Config, job RestoreJob) Result {
	opts, err := kopiaOptionsFromEnv(getenv)
	if err == nil && (job.TargetDir == "" || job.ManifestKey == "") {
		err = fmt.Errorf("missing environment: %s and %s are required", EnvTargetDir, EnvManifestKey)
	}
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	store, err := objectstore.New(cfg)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	w, err := watchReads(ctx, getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	defer w.stop()
	m, st, err := RestoreKopia(w.ctx, watchedStore{store, w.act}, cfg, job, w.kopia(opts))
	return kopiaReadResult(m, int64(st.Files), st.Bytes, w.outcome(err))
}

// kopiaReadResult is the Result of a restore or verify of a kopia backup.
func kopiaReadResult(m archive.Manifest, files, bytes int64, err error) Result {
	res := Result{Result: Succeeded, ID: m.ID, Files: files, Bytes: bytes}
	if err != nil {
		res = failed(err, ReasonStorageFailed)
		res.ID = m.ID
	}
	if m.Kopia != nil {
		res.SnapshotID = m.Kopia.SnapshotID
	}
	return res
}
