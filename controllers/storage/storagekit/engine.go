package storagekit

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Engine is what the storage controllers do differently for each backup engine: the mover Jobs'
// environment, the object that names a backup in status, what a run's record and the messages
// say, how the catalog judges a manifest, and whether a repository password and a repository are
// involved. It is picked once, from an engine name (EngineFor: spec, status, a run) or from a
// backup's manifest (ManifestEngine); nothing else in the controllers compares engines, and a
// third engine is a third implementation of this interface.
type Engine interface {
	// Name is the engine's name in the API.
	Name() storagev1.BackupEngine
	// NeedsPassword tells whether the engine's backups are encrypted with the repository password
	// of the credentials Secret (CheckPassword).
	NeedsPassword() bool
	// HasRepository tells whether the engine keeps a repository under the backup prefix
	// (status.repository, the RepositoryHealthy condition).
	HasRepository() bool
	// BackupKey is the object status names backup id under prefix by (objectKey).
	BackupKey(prefix, id string) string
	// SnapshotID is the snapshot a manifest names ("" for an engine without snapshots).
	SnapshotID(m archive.Manifest) string
	// StoredBytes is what a backup of manifest m stored in the bucket.
	StoredBytes(m archive.Manifest) int64
	// BackupEnv is the environment of a backup mover Job beyond the S3 settings and the
	// variables of every backup (desiredBackupJob).
	BackupEnv(src S3Source, prefix string, opts *storagev1.KopiaOptions) []corev1.EnvVar
	// VerifyEnv is the environment of the verify Job of backup id under prefix.
	VerifyEnv(src S3Source, prefix, id string) []corev1.EnvVar
	// RestoreEnv is the environment of a restore Job of the backup named by objectKey (BackupKey).
	// paths are PVCRestore spec.paths (mover.EnvRestorePaths), none for the whole backup.
	RestoreEnv(src S3Source, prefix, objectKey, overwrite string, paths []string) []corev1.EnvVar
	// MoverCache tells whether a mover Job of the engine mounts its cache directory.
	MoverCache() bool
	// SucceededMessage says what a successful run stored.
	SucceededMessage(run *storagev1.RunStatus) string
	// RestoredMessage says what a restore restored and how it was checked.
	RestoredMessage(pr *storagev1.PVCRestore, res mover.Result) string
	// check judges manifest m of backup id (readCatalog), whose archive key is archiveKey and
	// whose archive, if any, has archiveSize bytes (-1: missing), by the repository record rec.
	check(m archive.Manifest, id, archiveKey string, archiveSize int64, rec *mover.RepositoryRecord) error
}

// EngineFor is the Engine named e: Kopia, or Archive for anything else (an empty engine is the
// record of an operator without kopia).
func EngineFor(e storagev1.BackupEngine) Engine {
	if e == storagev1.EngineKopia {
		return kopia
	}
	return tarArchive
}

// ManifestEngine is the Engine that wrote manifest m.
func ManifestEngine(m archive.Manifest) Engine {
	if m.Engine == mover.EngineKopia {
		return kopia
	}
	return tarArchive
}

// The two engines.
var (
	tarArchive = archiveEngine{engineTraits{name: storagev1.EngineArchive}}
	kopia      = kopiaEngine{engineTraits{name: storagev1.EngineKopia, password: true, repository: true, cache: true}}
)

// engineTraits are the yes-or-no differences between engines.
type engineTraits struct {
	name                        storagev1.BackupEngine
	password, repository, cache bool
}

func (t engineTraits) Name() storagev1.BackupEngine { return t.name }
func (t engineTraits) NeedsPassword() bool          { return t.password }
func (t engineTraits) HasRepository() bool          { return t.repository }
func (t engineTraits) MoverCache() bool             { return t.cache }

// archiveEngine: one tar+zstd archive per backup, checked by its sha256.
type archiveEngine struct{ engineTraits }

func (archiveEngine) BackupKey(prefix, id string) string {
	return prefix + id + ArchiveSuffix
}
func (archiveEngine) SnapshotID(archive.Manifest) string   { return "" }
func (archiveEngine) StoredBytes(m archive.Manifest) int64 { return m.Archive.Bytes }
func (archiveEngine) BackupEnv(S3Source, string, *storagev1.KopiaOptions) []corev1.EnvVar {
	return nil
}

func (archiveEngine) VerifyEnv(_ S3Source, prefix, id string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: mover.EnvArchiveKey, Value: prefix + id + ArchiveSuffix},
		{Name: mover.EnvManifestKey, Value: prefix + id + ManifestSuffix},
	}
}

func (archiveEngine) RestoreEnv(_ S3Source, _, objectKey, overwrite string, paths []string) []corev1.EnvVar {
	return append([]corev1.EnvVar{
		{Name: mover.EnvTargetDir, Value: VolumeMount},
		{Name: mover.EnvArchiveKey, Value: objectKey},
		{Name: mover.EnvManifestKey, Value: ManifestKeyOf(objectKey)},
		{Name: mover.EnvOverwrite, Value: overwrite},
	}, pathsEnv(paths)...)
}

// pathsEnv is the mover.EnvRestorePaths variable of a restore of paths; none for the whole
// backup, so a whole restore's Job is the one it always was.
func pathsEnv(paths []string) []corev1.EnvVar {
	if len(paths) == 0 {
		return nil
	}
	return []corev1.EnvVar{{Name: mover.EnvRestorePaths, Value: mover.EncodePaths(paths)}}
}

// restoredOf says how much of the backup a restore of some paths restored ("" for a whole one).
func restoredOf(res mover.Result) string {
	if res.TotalFiles == 0 && res.TotalBytes == 0 && res.RestoredBytes == 0 {
		return ""
	}
	return fmt.Sprintf("; restored the requested paths: %d files (%d bytes) of the backup's %d files (%d bytes)",
		res.Files, res.RestoredBytes, res.TotalFiles, res.TotalBytes)
}

func (archiveEngine) SucceededMessage(run *storagev1.RunStatus) string {
	return fmt.Sprintf("backup %s: %d bytes, sha256 %s", run.ID, run.Bytes, run.SHA256)
}

func (archiveEngine) RestoredMessage(pr *storagev1.PVCRestore, res mover.Result) string {
	return fmt.Sprintf("restored backup %s into %s; sha256 %s verified against the manifest", pr.Status.BackupID, RestoreTargets(pr), res.SHA256) +
		restoredOf(res)
}

// check is mover.CheckBackup, the rule the mover applies before it restores.
func (archiveEngine) check(m archive.Manifest, id, archiveKey string, archiveSize int64, _ *mover.RepositoryRecord) error {
	return mover.CheckBackup(m, id, archiveKey, archiveSize)
}

// kopiaEngine: one encrypted kopia repository per PVCBackup; a backup is its manifest, which
// names its snapshot.
type kopiaEngine struct{ engineTraits }

func (kopiaEngine) BackupKey(prefix, id string) string {
	return prefix + id + ManifestSuffix
}

func (kopiaEngine) SnapshotID(m archive.Manifest) string {
	if m.Kopia == nil {
		return ""
	}
	return m.Kopia.SnapshotID
}

func (kopiaEngine) StoredBytes(m archive.Manifest) int64 {
	if m.Kopia == nil {
		return 0
	}
	return m.Kopia.UploadedBytes
}

func (kopiaEngine) BackupEnv(src S3Source, prefix string, opts *storagev1.KopiaOptions) []corev1.EnvVar {
	env := append(KopiaEnv(src, prefix), corev1.EnvVar{Name: mover.EnvKopiaRecordKey, Value: RepositoryRecordKey(prefix)})
	if kd := KeyDerivation(opts); kd != "" {
		env = append(env, corev1.EnvVar{Name: mover.EnvKopiaKeyDerivation, Value: kd})
	}
	env = append(env, FormatEnv(opts)...)
	return append(env, RetentionEnv(opts)...)
}

func (kopiaEngine) VerifyEnv(src S3Source, prefix, id string) []corev1.EnvVar {
	return append([]corev1.EnvVar{{Name: mover.EnvManifestKey, Value: prefix + id + ManifestSuffix}}, KopiaEnv(src, prefix)...)
}

// RestoreEnv: objectKey is the manifest; the mover reads the snapshot from it.
func (kopiaEngine) RestoreEnv(src S3Source, prefix, objectKey, overwrite string, paths []string) []corev1.EnvVar {
	env := append([]corev1.EnvVar{
		{Name: mover.EnvTargetDir, Value: VolumeMount},
		{Name: mover.EnvManifestKey, Value: objectKey},
		{Name: mover.EnvOverwrite, Value: overwrite},
	}, pathsEnv(paths)...)
	return append(env, KopiaEnv(src, prefix)...)
}

func (kopiaEngine) SucceededMessage(run *storagev1.RunStatus) string {
	return fmt.Sprintf("backup %s: kopia snapshot %s, %d bytes uploaded", run.ID, run.SnapshotID, run.Bytes)
}

func (kopiaEngine) RestoredMessage(pr *storagev1.PVCRestore, res mover.Result) string {
	return fmt.Sprintf("restored backup %s (kopia snapshot %s) into %s; %d files, %d bytes checked against the manifest",
		pr.Status.BackupID, pr.Status.SnapshotID, RestoreTargets(pr), res.Files, res.Bytes) + restoredOf(res)
}

// check: the manifest must name its snapshot (whether the snapshot is readable only the mover,
// which holds the password, can tell: restore proves it before touching the target, verify reads
// it all), and the repository record must vouch for it (checkKopia).
func (kopiaEngine) check(m archive.Manifest, id, _ string, _ int64, rec *mover.RepositoryRecord) error {
	switch {
	case m.FormatVersion != archive.FormatVersion:
		return fmt.Errorf("manifest format %d is not %d", m.FormatVersion, archive.FormatVersion)
	case m.ID != id:
		return fmt.Errorf("manifest names backup %q, not %q", m.ID, id)
	case m.Kopia == nil || m.Kopia.SnapshotID == "":
		return errors.New("kopia manifest names no snapshot")
	}
	return checkKopia(m, rec)
}

// RestoreTargets names, in messages, the PVCs a restore writes: status.targetPVC, or for a group
// backup each target with its member ("db-new (member db), wal-new (member wal)").
func RestoreTargets(pr *storagev1.PVCRestore) string {
	if len(pr.Status.Targets) == 0 {
		return pr.Status.TargetPVC
	}
	names := make([]string, len(pr.Status.Targets))
	for i, t := range pr.Status.Targets {
		names[i] = fmt.Sprintf("%s (member %s)", t.PVC, t.SourcePVC)
	}
	return strings.Join(names, ", ")
}
