package storagekit

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The kopia engine keeps one repository per PVCBackup, under the PVCBackup's prefix next to the
// manifests. The okgoes manifest of each backup (<prefix><id>.manifest.json) stays the Catalog
// for both engines: a kopia backup exists for the operator only when its manifest does.
const (
	kopiaDir      = "kopia"
	KopiaCacheDir = "/kopia-cache"
	// kopiaCacheLimit bounds kopia's content and metadata caches; the emptyDir holding them
	// (and kopia's index cache, which grows with the repository) is limited to KopiaCacheVolume.
	kopiaCacheLimit = 512 << 20
)

var KopiaCacheVolume = resource.MustParse("2Gi")

// KopiaPrefix is where the kopia repository of the backups under prefix lives.
func KopiaPrefix(prefix string) string { return prefix + kopiaDir }

// ProgressKey is where the mover of a running backup reports its progress.
func ProgressKey(prefix, id string) string { return prefix + id + progressSuffix }

const progressSuffix = ".progress.json"

// RepositoryRecordKey is where each kopia backup run records what it found in the repository
// (mover.RepositoryRecord), next to the manifests it judges (ReadCatalog).
func RepositoryRecordKey(prefix string) string { return prefix + mover.RepositoryRecordName }

// EngineOf is the name of the engine a manifest describes.
func EngineOf(m archive.Manifest) storagev1.BackupEngine { return ManifestEngine(m).Name() }

// PasswordKey is the key of the kopia repository password in the credentials Secret.
func PasswordKey(loc storagev1.S3Location) string {
	if k := loc.CredentialsSecretRef.RepositoryPasswordKey; k != "" {
		return k
	}
	return storagev1.DefaultRepositoryPasswordKey
}

// PreviousPasswordSuffix makes the key of the password being rotated away from: the repository
// password key plus ".previous", as RedisCache's auth Secret has it.
const PreviousPasswordSuffix = ".previous"

// PreviousPasswordKey is the key of the password being rotated away from in the credentials
// Secret: present only while a rotation is in progress.
func PreviousPasswordKey(loc storagev1.S3Location) string {
	return PasswordKey(loc) + PreviousPasswordSuffix
}

// FailureMessage is the message of a mover run of src that failed with reason and msg: msg, and
// what to do in the operator's terms, which the mover does not know: for RepositoryPasswordWrong
// the Secret and its keys, for ImmutabilityMismatch the fields.
func FailureMessage(src S3Source, reason, msg string) string {
	switch reason {
	case ReasonImmutabilityMismatch:
		return msg + ". Set spec.kopia.immutability to what the repository has (status.repository.immutability) or remove it; " +
			"another lock needs a new repository (another spec.s3.prefix or bucket)"
	case string(mover.ReasonRepositoryPasswordWrong):
	default:
		return msg
	}
	key := PasswordKey(src.Location)
	return msg + fmt.Sprintf(". In Secret %q named by %s put the repository's password under %q; "+
		"to change the password, put the new one under %q and the repository's current one under %q (the next backup changes it)",
		src.Location.CredentialsSecretRef.Name, src.Fields.Field("credentialsSecretRef"), key, key, key+PreviousPasswordSuffix)
}

// CheckPassword is a Waiting RepositoryPasswordMissing when the credentials Secret of src has no
// (or an empty) repository password: never a generated or default password, which would encrypt
// backups with a key nobody keeps.
func CheckPassword(secret *corev1.Secret, src S3Source, why string, poll time.Duration) error {
	key := PasswordKey(src.Location)
	problem := "has no key"
	if v, ok := secret.Data[key]; ok {
		if len(v) > 0 {
			return nil
		}
		problem = "has an empty key"
	}
	return errclass.Waiting(ReasonRepositoryPasswordMissing, fmt.Sprintf(
		"Secret %q named by %s %s %q: %s encrypted with that password; add it (and keep a copy outside the cluster)",
		secret.Name, src.Fields.Field("credentialsSecretRef"), problem, key, why), poll)
}

// KopiaEnv is what a mover Job of the kopia engine needs besides the S3 variables: the engine, the
// repository, its password and the previous one while a rotation is in progress (by secretKeyRef
// only, the previous one optional: the controller never reads it) and the cache directory.
func KopiaEnv(src S3Source, prefix string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: mover.EnvEngine, Value: mover.EngineKopia},
		{Name: mover.EnvKopiaPrefix, Value: KopiaPrefix(prefix)},
		{Name: mover.EnvKopiaPassword, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: src.Location.CredentialsSecretRef.Name}, Key: PasswordKey(src.Location)}}},
		{Name: mover.EnvKopiaPreviousPassword, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: src.Location.CredentialsSecretRef.Name}, Key: PreviousPasswordKey(src.Location),
			Optional: ptr.To(true)}}},
		{Name: mover.EnvKopiaCacheDir, Value: KopiaCacheDir},
		{Name: mover.EnvKopiaCacheLimit, Value: fmt.Sprint(kopiaCacheLimit)},
	}
}

// KeyDerivation is kopia's name of the key derivation spec.kopia asks a new repository for;
// empty when it asks for none (the mover then creates kopia's default, scrypt).
func KeyDerivation(k *storagev1.KopiaOptions) string {
	if k == nil {
		return ""
	}
	switch k.KeyDerivation {
	case storagev1.KeyDerivationScrypt:
		return mover.KeyDerivationScrypt
	case storagev1.KeyDerivationPBKDF2:
		return mover.KeyDerivationPBKDF2
	}
	return ""
}

// FormatEnv is the compression and the splitter spec.kopia asks for, as the mover's
// EnvKopiaCompression and EnvKopiaSplitter (the API's values are kopia's names); none of either
// when it asks for none (the mover's defaults).
func FormatEnv(k *storagev1.KopiaOptions) []corev1.EnvVar {
	var env []corev1.EnvVar
	if k != nil && k.Compression != "" {
		env = append(env, corev1.EnvVar{Name: mover.EnvKopiaCompression, Value: string(k.Compression)})
	}
	if k != nil && k.Splitter != "" {
		env = append(env, corev1.EnvVar{Name: mover.EnvKopiaSplitter, Value: string(k.Splitter)})
	}
	return env
}

// RetentionEnv is the object lock retention spec.kopia asks a new repository for, as the mover's
// EnvKopiaRetentionMode and EnvKopiaRetentionPeriod; none when it asks for none.
func RetentionEnv(k *storagev1.KopiaOptions) []corev1.EnvVar {
	if k == nil || k.Immutability == nil {
		return nil
	}
	mode := mover.RetentionGovernance
	if k.Immutability.Mode == storagev1.ImmutabilityCompliance {
		mode = mover.RetentionCompliance
	}
	period := time.Duration(k.Immutability.Days) * 24 * time.Hour
	return []corev1.EnvVar{{Name: mover.EnvKopiaRetentionMode, Value: mode}, {Name: mover.EnvKopiaRetentionPeriod, Value: period.String()}}
}

// RepositoryImmutability is status.repository.immutability for the retention a mover reported
// (mover.Result RetentionMode, RetentionPeriod); nil when it reported none.
func RepositoryImmutability(mode, period string) *storagev1.RepositoryImmutability {
	if mode == "" {
		return nil
	}
	d, _ := time.ParseDuration(period)
	switch mode {
	case mover.RetentionGovernance:
		mode = string(storagev1.ImmutabilityGovernance)
	case mover.RetentionCompliance:
		mode = string(storagev1.ImmutabilityCompliance)
	}
	return &storagev1.RepositoryImmutability{Mode: mode, Period: metav1.Duration{Duration: d}}
}
