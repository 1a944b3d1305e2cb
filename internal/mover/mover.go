// Package mover is the contract between the storage controllers and the mover program (cmd/mover)
// that runs inside a backup, restore or verify Job: the environment variables the controller sets
// (credentials arrive as secretKeyRef variables, never as values in any object), the Result the
// mover reports through the pod's termination message, the Progress a running backup writes to
// S3, the RepositoryRecord a kopia backup writes, and the rules of a manifest. It is the only
// mover package the controllers import, and it links no engine: the mover's run (its driver) is
// internal/mover/run, its engines internal/mover/engine/archive and internal/mover/engine/kopia.
package mover

import "time"

// Environment variables of every mover command.
const (
	EnvEndpoint       = "S3_ENDPOINT"
	EnvRegion         = "S3_REGION"
	EnvBucket         = "S3_BUCKET"
	EnvInsecure       = "S3_INSECURE"
	EnvCAFile         = "S3_CA_FILE"
	EnvAccessKey      = "AWS_ACCESS_KEY_ID"
	EnvSecretKey      = "AWS_SECRET_ACCESS_KEY"
	EnvTerminationLog = "MOVER_TERMINATION_LOG"
	EnvIdleTimeout    = "S3_IDLE_TIMEOUT" // a Go duration; DefaultIdleTimeout when empty
	// EnvMemoryLimit is the container's memory limit in bytes (the Job sets it from the downward
	// API, resourceFieldRef limits.memory; without a limit the kubelet gives the node's
	// allocatable memory).
	EnvMemoryLimit = "MOVER_MEMORY_LIMIT"

	// EnvEngine names the engine (one of the Engine constants below; empty: the archive
	// engine). A backup stores with it; a restore or verify reads with it, and the controller
	// sets it from the backup's manifest.
	EnvEngine = "MOVER_ENGINE"

	EnvArchiveKey  = "BACKUP_ARCHIVE_KEY"
	EnvManifestKey = "BACKUP_MANIFEST_KEY"
)

// Environment of `mover backup`.
const (
	EnvSourceDir       = "MOVER_SOURCE_DIR"
	EnvBackupID        = "BACKUP_ID"
	EnvSourceNamespace = "BACKUP_SOURCE_NAMESPACE"
	EnvSourcePVC       = "BACKUP_SOURCE_PVC"
	// EnvSourcePVCs lists the members of a group backup, comma-separated: each is mounted at
	// <EnvSourceDir>/<name>, and the backup of EnvSourceDir holds them all (one backup id). Empty
	// for the backup of one PVC (EnvSourcePVC).
	EnvSourcePVCs    = "BACKUP_SOURCE_PVCS"
	EnvScheduledTime = "BACKUP_SCHEDULED_TIME"
	EnvPartSize      = "S3_PART_SIZE" // archive engine: bytes; DefaultPartSize when empty
	// EnvProgressKey is where a running backup writes its Progress (JSON), about every
	// ProgressEvery; the controller shows it in status.activeRun.progress.
	EnvProgressKey = "BACKUP_PROGRESS_KEY"
)

// Environment of `mover restore` (besides the S3 variables and the keys of the backup).
const (
	EnvTargetDir = "MOVER_TARGET_DIR"
	EnvOverwrite = "RESTORE_OVERWRITE" // Refuse, Clean or Merge
	// EnvRestoreMembers makes the restore that of a group backup: "<pvc>=<overwrite>,...", one
	// per member of the backup (its manifest's source.pvcs), each restored into
	// <EnvTargetDir>/<pvc>, its target volume's mount, with its own overwrite policy
	// (EnvOverwrite is then unused).
	EnvRestoreMembers = "RESTORE_MEMBERS"
)

// Environment of `mover list` (besides the S3 variables, the engine's and EnvManifestKey): the
// directory of the backup to list and how deep.
const (
	EnvListPath  = "LIST_PATH"  // relative to the volume's root; empty: the root
	EnvListDepth = "LIST_DEPTH" // 1 to MaxListDepth; empty: 1
)

// MaxListDepth is the deepest `mover list` goes below its path.
const MaxListDepth = 3

// Environment of the kopia engine.
const (
	// EnvKopiaPrefix is the key prefix of the PVCBackup's kopia repository in the bucket.
	EnvKopiaPrefix = "KOPIA_PREFIX"
	// EnvKopiaPassword is the repository password (a secretKeyRef). It is also the variable the
	// stock kopia CLI reads, so the same Secret works with `kopia repository connect`.
	EnvKopiaPassword = "KOPIA_PASSWORD"
	// EnvKopiaPreviousPassword is the password being rotated away from (the Secret's
	// "<key>.previous", an optional secretKeyRef; empty or unset: no rotation). A backup that
	// opens the repository only with it changes the repository's password to EnvKopiaPassword;
	// a restore or verify just opens with it.
	EnvKopiaPreviousPassword = "KOPIA_PREVIOUS_PASSWORD"
	// EnvKopiaCacheDir is kopia's cache and config directory (a size-limited emptyDir).
	EnvKopiaCacheDir = "KOPIA_CACHE_DIR"
	// EnvKopiaCacheLimit bounds kopia's content and metadata caches, in bytes.
	EnvKopiaCacheLimit = "KOPIA_CACHE_LIMIT_BYTES"
	// EnvKopiaKeyDerivation is kopia's name of the password key derivation of a repository a
	// backup creates (spec.kopia.keyDerivation): KeyDerivationScrypt or KeyDerivationPBKDF2;
	// empty: kopia's default, scrypt.
	EnvKopiaKeyDerivation = "KOPIA_KEY_DERIVATION"
	// EnvKopiaSplitter is kopia's name of the splitter of a repository a backup creates
	// (spec.kopia.splitter), e.g. DYNAMIC-1M-BUZHASH; empty: the mover's default. An existing
	// repository keeps its own, reported as Result.Splitter.
	EnvKopiaSplitter = "KOPIA_SPLITTER"
	// EnvKopiaCompression is kopia's name of the compressor of a backup's new chunks
	// (spec.kopia.compression), e.g. zstd-fastest; empty: the mover's default. It applies to
	// existing repositories too: chunks already stored keep theirs, nothing is uploaded again.
	EnvKopiaCompression = "KOPIA_COMPRESSION"
	// EnvKopiaRetentionMode and EnvKopiaRetentionPeriod are the S3 Object Lock retention of a
	// repository a backup creates (spec.kopia.immutability): RetentionGovernance or
	// RetentionCompliance, and a Go duration of at least two days. Both or neither. A backup
	// into an existing repository whose retention differs fails with
	// ReasonImmutabilityMismatch, changing nothing.
	EnvKopiaRetentionMode   = "KOPIA_RETENTION_MODE"
	EnvKopiaRetentionPeriod = "KOPIA_RETENTION_PERIOD"
	// EnvKopiaPointInTime (restore, verify; RFC 3339) reads the repository as the versioned
	// bucket held it at that time: a locked repository whose objects someone deleted or
	// overwrite since still restores from the versions S3 Object Lock kept.
	EnvKopiaPointInTime = "KOPIA_POINT_IN_TIME"
	// EnvKopiaRecordKey is where a kopia backup records what it found in the repository
	// (RepositoryRecord): <prefix>RepositoryRecordName, next to the manifests it judges.
	EnvKopiaRecordKey = "KOPIA_RECORD_KEY"
)

// Values of EnvKopiaKeyDerivation: kopia's own names of its password key derivations (the
// kopia engine's tests prove them equal to internal/kopiarepo's).
const (
	KeyDerivationScrypt = "scrypt-65536-8-1"     // kopia's default: memory-hard
	KeyDerivationPBKDF2 = "pbkdf2-sha256-600000" // cheaper per run; not memory-hard
)

// Values of EnvKopiaRetentionMode: S3's names of the Object Lock modes.
const (
	RetentionGovernance = "GOVERNANCE"
	RetentionCompliance = "COMPLIANCE"
)

// Engines of a backup (PVCBackup spec.engine, Manifest.Engine, EnvEngine).
const (
	EngineArchive = "archive"
	EngineKopia   = "kopia"
)

// DefaultPartSize is the archive engine's multipart part size (EnvPartSize): the mover holds
// about one part in memory, so this bounds its memory whatever the volume size, and 10,000 parts
// of 16 MiB allow 156 GiB compressed archives.
const DefaultPartSize = 16 << 20

// DefaultIdleTimeout (EnvIdleTimeout) is how long an S3 call may move no byte before the mover
// gives up on it: long enough for one part on a slow link, short enough that a frozen server
// ends the run long before its deadline.
const DefaultIdleTimeout = 5 * time.Minute
