package mover

import (
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

// Reasons a restore reports in Result.Reason; the controller turns them into conditions.
const (
	ReasonVerificationFailed = "VerificationFailed"
	ReasonTargetNotEmpty     = "TargetNotEmpty"
	ReasonBackupNotFound     = "BackupNotFound"
	ReasonTargetNotWritable  = "TargetNotWritable"
)

// ObjectReader is what a restore needs from S3.
type ObjectReader interface {
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

// RestoreJob describes one restore.
type RestoreJob struct {
	TargetDir   string
	ArchiveKey  string
	ManifestKey string
	Overwrite   string
}

// restoreError carries the Reason of a failed restore.
type restoreError struct {
	reason string
	err    error
}

func (e *restoreError) Error() string { return e.err.Error() }
func (e *restoreError) Unwrap() error { return e.err }

// Restore streams the backup (manifest first, then the archive) into job.TargetDir and checks
// the archive's sha256, size and counts against the manifest. A mismatch is a
// VerificationFailed error; the files written before it was found stay, and the error says so.
func Restore(ctx context.Context, store ObjectReader, job RestoreJob) (archive.Manifest, archive.Stats, error) {
	return readBackup(ctx, store, job.ArchiveKey, job.ManifestKey,
		func() error { return prepareTarget(job.TargetDir, job.Overwrite) },
		func(r io.Reader) (archive.Stats, error) {
			return archive.Read(ctx, r, job.TargetDir, archive.ReadOptions{Chown: true, IgnoreChownEPERM: true})
		}, "; the target holds a partial restore")
}

// readBackup is what restore and verify share: fetch the manifest and check that it describes
// archiveKey, run prepare, stream the archive into consume (archive.Read or archive.Check), and
// compare what consume saw with the manifest. A missing object is BackupNotFound, a damaged or
// mismatching one VerificationFailed; partial says what a failure half-way leaves behind.
func readBackup(ctx context.Context, store ObjectReader, archiveKey, manifestKey string, prepare func() error,
	consume func(io.Reader) (archive.Stats, error), partial string) (archive.Manifest, archive.Stats, error) {
	var st archive.Stats
	body, err := store.Get(ctx, manifestKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return archive.Manifest{}, st, &restoreError{ReasonBackupNotFound,
				fmt.Errorf("manifest %s does not exist: the backup is incomplete or was pruned", manifestKey)}
		}
		return archive.Manifest{}, st, fmt.Errorf("read manifest: %w", err)
	}
	m, err := ReadManifest(body)
	body.Close()
	if err != nil {
		return m, st, &restoreError{ReasonVerificationFailed, err}
	}
	if m.FormatVersion != archive.FormatVersion || m.Archive.Key != archiveKey {
		return m, st, &restoreError{ReasonVerificationFailed,
			fmt.Errorf("manifest format %d for %s does not describe %s", m.FormatVersion, m.Archive.Key, archiveKey)}
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return m, st, err
		}
	}
	body, err = store.Get(ctx, archiveKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return m, st, &restoreError{ReasonBackupNotFound, fmt.Errorf("archive %s does not exist", archiveKey)}
		}
		return m, st, fmt.Errorf("read archive: %w", err)
	}
	defer body.Close()
	st, err = consume(body)
	if err != nil {
		if ctx.Err() != nil {
			return m, st, err
		}
		if archive.IsTargetError(err) {
			return m, st, &restoreError{ReasonTargetNotWritable, fmt.Errorf("the target refused a write (%v): the mover runs as uid %d and needs a writable volume with room for the backup%s",
				err, os.Getuid(), partial)}
		}
		return m, st, &restoreError{ReasonVerificationFailed, fmt.Errorf("archive %s is damaged (%v)%s", archiveKey, err, partial)}
	}
	if err := m.Verify(st); err != nil {
		return m, st, &restoreError{ReasonVerificationFailed, fmt.Errorf("archive %s does not match its manifest: %v", archiveKey, err)}
	}
	return m, st, nil
}

// outcome is the Result of a restore or verify of archiveKey.
func outcome(m archive.Manifest, st archive.Stats, archiveKey string, err error) Result {
	if err != nil {
		res := Result{Result: "Failed", ID: m.ID, ArchiveKey: archiveKey, Message: err.Error()}
		var re *restoreError
		if errors.As(err, &re) {
			res.Reason = re.reason
		}
		return res
	}
	return Result{Result: "Succeeded", ID: m.ID, ArchiveKey: archiveKey, Bytes: st.ArchiveBytes, SHA256: st.SHA256, Files: st.Files}
}

// prepareTarget applies the overwrite policy. lost+found (made by mkfs) does not count as data.
func prepareTarget(dir, policy string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "lost+found" {
			names = append(names, e.Name())
		}
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
				return fmt.Errorf("clean target: %w", err)
			}
		}
		return nil
	default:
		shown := names[:min(len(names), 3)]
		return &restoreError{ReasonTargetNotEmpty, fmt.Errorf("the target volume is not empty (%s%s); set target.overwrite to Clean or Merge",
			strings.Join(shown, ", "), map[bool]string{true: ", ...", false: ""}[len(names) > 3])}
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
		return Result{Result: "Failed", Message: err.Error()}
	}
	job := RestoreJob{TargetDir: getenv(EnvTargetDir), ArchiveKey: getenv(EnvArchiveKey), ManifestKey: getenv(EnvManifestKey),
		Overwrite: getenv(EnvOverwrite)}
	if job.TargetDir == "" || job.ArchiveKey == "" || job.ManifestKey == "" {
		return Result{Result: "Failed", Message: fmt.Sprintf("missing environment: %s, %s and %s are required", EnvTargetDir, EnvArchiveKey, EnvManifestKey)}
	}
	store, err := objectstore.New(cfg)
	if err != nil {
		return Result{Result: "Failed", Message: err.Error()}
	}
	m, st, err := Restore(ctx, store, job)
	return outcome(m, st, job.ArchiveKey, err)
}
