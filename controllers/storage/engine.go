package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The kopia engine keeps one repository per PVCBackup, under the PVCBackup's prefix next to the
// manifests. The okgoes manifest of each backup (<prefix><id>.manifest.json) stays the catalog
// for both engines: a kopia backup exists for the operator only when its manifest does.
const (
	kopiaDir   = "kopia"
	kopiaCache = "/kopia-cache"
	// kopiaCacheLimit bounds kopia's content and metadata caches; the emptyDir holding them
	// (and kopia's index cache, which grows with the repository) is limited to kopiaCacheVolume.
	kopiaCacheLimit = 512 << 20
)

var kopiaCacheVolume = resource.MustParse("2Gi")

// kopiaPrefix is where the kopia repository of the backups under prefix lives.
func kopiaPrefix(prefix string) string { return prefix + kopiaDir }

// progressKey is where the mover of a running backup reports its progress.
func progressKey(prefix, id string) string { return prefix + id + progressSuffix }

const progressSuffix = ".progress.json"

// repositoryRecordKey is where each kopia backup run records what it found in the repository
// (mover.RepositoryRecord), next to the manifests it judges (readCatalog).
func repositoryRecordKey(prefix string) string { return prefix + mover.RepositoryRecordName }

// engineOf is the engine a manifest describes.
func engineOf(m archive.Manifest) storagev1.BackupEngine {
	if m.Engine == mover.EngineKopia {
		return storagev1.EngineKopia
	}
	return storagev1.EngineArchive
}

// moverEngine is the MOVER_ENGINE value of an engine.
func moverEngine(e storagev1.BackupEngine) string {
	if e == storagev1.EngineKopia {
		return mover.EngineKopia
	}
	return mover.EngineArchive
}

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
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	objects, err := store.ListTop(cctx, backupPrefix(pb))
	if err != nil {
		return "", classifyS3Error(err, pb.Spec.S3Bucket, r.poll())
	}
	for _, o := range objects {
		if strings.HasSuffix(o.Key, archiveSuffix) {
			return storagev1.EngineArchive, nil
		}
	}
	return storagev1.EngineKopia, nil
}

// passwordKey is the key of the kopia repository password in the credentials Secret.
func passwordKey(loc storagev1.S3Location) string {
	if k := loc.CredentialsSecretRef.RepositoryPasswordKey; k != "" {
		return k
	}
	return storagev1.DefaultRepositoryPasswordKey
}

// checkPassword is a Waiting RepositoryPasswordMissing when the credentials Secret of src has no
// (or an empty) repository password: never a generated or default password, which would encrypt
// backups with a key nobody keeps.
func checkPassword(secret *corev1.Secret, src s3Source, why string, poll time.Duration) error {
	key := passwordKey(src.location)
	problem := "has no key"
	if v, ok := secret.Data[key]; ok {
		if len(v) > 0 {
			return nil
		}
		problem = "has an empty key"
	}
	return errclass.Waiting(ReasonRepositoryPasswordMissing, fmt.Sprintf(
		"Secret %q named by %s %s %q: %s encrypted with that password; add it (and keep a copy outside the cluster)",
		secret.Name, src.fields.field("credentialsSecretRef"), problem, key, why), poll)
}

// kopiaEnv is what a mover Job of the kopia engine needs besides the S3 variables: the engine, the
// repository, its password (by secretKeyRef only) and the cache directory.
func kopiaEnv(src s3Source, prefix string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: mover.EnvEngine, Value: mover.EngineKopia},
		{Name: mover.EnvKopiaPrefix, Value: kopiaPrefix(prefix)},
		{Name: mover.EnvKopiaPassword, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: src.location.CredentialsSecretRef.Name}, Key: passwordKey(src.location)}}},
		{Name: mover.EnvKopiaCacheDir, Value: kopiaCache},
		{Name: mover.EnvKopiaCacheLimit, Value: fmt.Sprint(kopiaCacheLimit)},
	}
}

// keyDerivation is kopia's name of the key derivation spec.kopia asks a new repository for;
// empty when it asks for none (the mover then creates kopia's default, scrypt).
func keyDerivation(k *storagev1.KopiaOptions) string {
	if k == nil {
		return ""
	}
	switch k.KeyDerivation {
	case storagev1.KeyDerivationScrypt:
		return kopiarepo.KeyDerivationScrypt
	case storagev1.KeyDerivationPBKDF2:
		return kopiarepo.KeyDerivationPBKDF2
	}
	return ""
}

// keyDerivationName is status.repository.keyDerivation for kopia's name of an algorithm.
func keyDerivationName(kopiaName string) string {
	switch kopiaName {
	case kopiarepo.KeyDerivationScrypt:
		return string(storagev1.KeyDerivationScrypt)
	case kopiarepo.KeyDerivationPBKDF2:
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
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	body, err := store.Get(cctx, progressKey(backupPrefix(pb), run.ID))
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
	rs := &storagev1.RepositoryStatus{Bytes: res.RepositoryBytes, KeyDerivation: keyDerivationName(res.KeyDerivation),
		MaintenanceMessage: truncate(res.MaintenanceError, 1024), UpdateTime: metav1.NewTime(now)}
	if t := res.LastQuickMaintenance; t != nil {
		rs.LastQuickMaintenance = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	if t := res.LastFullMaintenance; t != nil {
		rs.LastFullMaintenance = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	return rs
}
