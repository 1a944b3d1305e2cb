package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Verify downloads a backup and checks it against its manifest (sha256, size, counts) without
// writing anything anywhere: what PVCBackup spec.verify runs after each backup.
func Verify(ctx context.Context, store ObjectReader, archiveKey, manifestKey string) (archive.Manifest, archive.Stats, error) {
	var st archive.Stats
	body, err := store.Get(ctx, manifestKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return archive.Manifest{}, st, &restoreError{ReasonBackupNotFound, fmt.Errorf("manifest %s does not exist", manifestKey)}
		}
		return archive.Manifest{}, st, fmt.Errorf("read manifest: %w", err)
	}
	m, err := ReadManifest(body)
	body.Close()
	if err != nil {
		return m, st, &restoreError{ReasonVerificationFailed, err}
	}
	body, err = store.Get(ctx, archiveKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return m, st, &restoreError{ReasonBackupNotFound, fmt.Errorf("archive %s does not exist", archiveKey)}
		}
		return m, st, fmt.Errorf("read archive: %w", err)
	}
	defer body.Close()
	st, err = archive.Check(ctx, body)
	if err != nil {
		if ctx.Err() != nil {
			return m, st, err
		}
		return m, st, &restoreError{ReasonVerificationFailed, fmt.Errorf("archive %s is damaged: %v", archiveKey, err)}
	}
	if err := m.Verify(st); err != nil {
		return m, st, &restoreError{ReasonVerificationFailed, fmt.Errorf("archive %s does not match its manifest: %v", archiveKey, err)}
	}
	return m, st, nil
}

// RunVerify is `mover verify`.
func RunVerify(ctx context.Context, getenv func(string) string) Result {
	res := runVerify(ctx, getenv)
	writeTerminationLog(getenv, &res)
	return res
}

func runVerify(ctx context.Context, getenv func(string) string) Result {
	cfg, err := storeFromEnv(getenv)
	if err != nil {
		return Result{Result: "Failed", Message: err.Error()}
	}
	store, err := objectstore.New(cfg)
	if err != nil {
		return Result{Result: "Failed", Message: err.Error()}
	}
	key := getenv(EnvArchiveKey)
	m, st, err := Verify(ctx, store, key, getenv(EnvManifestKey))
	if err != nil {
		res := Result{Result: "Failed", ID: m.ID, ArchiveKey: key, Message: err.Error()}
		var re *restoreError
		if errors.As(err, &re) {
			res.Reason = re.reason
		}
		return res
	}
	return Result{Result: "Succeeded", ID: m.ID, ArchiveKey: key, Bytes: st.ArchiveBytes, SHA256: st.SHA256, Files: st.Files}
}
