package mover

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Outcome is how a mover command ended.
type Outcome string

const (
	Succeeded Outcome = "Succeeded"
	Failed    Outcome = "Failed"
)

// Reason says why a mover command failed. The reasons are defined here once: the mover reports
// them and the storage controllers turn them into condition reasons unchanged.
type Reason string

const (
	// ReasonBackupNotFound: the manifest or the archive of the backup does not exist.
	ReasonBackupNotFound Reason = "BackupNotFound"
	// ReasonVerificationFailed: the backup exists but is damaged or does not match its manifest.
	ReasonVerificationFailed Reason = "VerificationFailed"
	// ReasonTargetNotEmpty: overwrite is Refuse and the target volume holds data.
	ReasonTargetNotEmpty Reason = "TargetNotEmpty"
	// ReasonTargetNotWritable: the target volume refused a write (permissions, full, read-only).
	ReasonTargetNotWritable Reason = "TargetNotWritable"
	// ReasonVolumeReadFailed: the source volume could not be read.
	ReasonVolumeReadFailed Reason = "VolumeReadFailed"
	// ReasonStorageFailed: S3 refused or failed a request (upload, download, manifest write).
	ReasonStorageFailed Reason = "StorageFailed"
	// ReasonRepositoryDamaged: the kopia repository in the bucket is missing or holds damaged
	// objects (a lost or corrupt blob, a manifest without its snapshot): S3 answered, but what it
	// holds cannot be read back. The message names what is damaged and what to do.
	ReasonRepositoryDamaged Reason = "RepositoryDamaged"
	// ReasonStorageStalled: S3 stopped taking or giving bytes for longer than the idle timeout.
	ReasonStorageStalled Reason = "StorageStalled"
	// ReasonInterrupted: the mover was told to stop (SIGTERM: deadline, eviction, deletion).
	ReasonInterrupted Reason = "Interrupted"
	// ReasonInvalidConfig: the mover's environment is incomplete or wrong (an operator bug).
	ReasonInvalidConfig Reason = "InvalidConfig"
)

// Result is what the mover reports through the pod's termination message (at most 4 KiB), so the
// controller learns why a run failed without reading logs.
type Result struct {
	Result     Outcome `json:"result"`
	Reason     Reason  `json:"reason,omitempty"`
	Message    string  `json:"message,omitempty"`
	ID         string  `json:"id,omitempty"`
	ArchiveKey string  `json:"archiveKey,omitempty"`
	Bytes      int64   `json:"bytes,omitempty"`
	SHA256     string  `json:"sha256,omitempty"`
	Files      int64   `json:"files,omitempty"`
	// Skipped counts what a backup found in the volume and could not hold (manifest's skipped):
	// sockets and devices, and FIFOs with kopia. The controller warns about them.
	Skipped int64 `json:"skipped,omitempty"`

	// Kopia engine only: the snapshot of the backup, the repository's size in the bucket after
	// the run, its password key derivation, and its maintenance (what ran after this backup,
	// when each kind last ran, and an error that did not fail the backup).
	SnapshotID           string     `json:"snapshotID,omitempty"`
	RepositoryBytes      int64      `json:"repositoryBytes,omitempty"`
	KeyDerivation        string     `json:"keyDerivation,omitempty"` // kopia's name, e.g. scrypt-65536-8-1
	Maintenance          string     `json:"maintenance,omitempty"`   // "", "quick" or "full"
	LastQuickMaintenance *time.Time `json:"lastQuickMaintenance,omitempty"`
	LastFullMaintenance  *time.Time `json:"lastFullMaintenance,omitempty"`
	MaintenanceError     string     `json:"maintenanceError,omitempty"`
	// RepositoryDamage is what the run found damaged in the repository (its RepositoryRecord
	// says the same, with the snapshots), though the backup itself succeeded.
	RepositoryDamage string `json:"repositoryDamage,omitempty"`
	// Repair says what the backup repaired in the repository before it read the volume (a
	// rebuilt index, contents dropped as lost or damaged to be uploaded again); empty: nothing.
	Repair string `json:"repair,omitempty"`
	// SampledBytes are the bytes of the repository's packs the backup read back whole and
	// checked before it read the volume (the day's slice, kopiarepo.DefaultVerifyPercent).
	SampledBytes int64 `json:"sampledBytes,omitempty"`
}

// RepositoryRecord is what a kopia backup run found in its repository, written (JSON) at the
// job's RecordKey after every run that opened the repository, whether the backup succeeded or
// not. The controller judges the kopia manifests with it (a manifest naming a snapshot the
// repository does not hold is a broken backup) without opening the repository itself.
//
// A record judges only the manifests it lists: those under the prefix before the run listed
// the repository. A manifest written after it (by hand, or by a run whose record write failed)
// is not confirmed by it, so a stale record never makes a backup look restorable.
type RepositoryRecord struct {
	Time  time.Time `json:"time"`  // when the run listed the repository (the mover's clock)
	RunID string    `json:"runID"` // the backup run that wrote the record
	// Repository is the key prefix of the kopia repository.
	Repository string `json:"repository"`
	// Manifests are the ids of the backups whose manifests were under the prefix before the
	// repository was listed: the backups the record judges.
	Manifests []string `json:"manifests"`
	// Snapshots are the complete snapshots of the repository, by snapshot ID.
	Snapshots map[string]RecordedSnapshot `json:"snapshots"`
	// Unlisted is why the snapshots could not be listed; then no backup of the repository can
	// be restored and Snapshots is empty.
	Unlisted string `json:"unlisted,omitempty"`
	// Damage says what in the repository is damaged, which backups depend on it and what to do;
	// empty when nothing is known to be.
	Damage string `json:"damage,omitempty"`
	// UnindexedPacks are the first (at most 20) packs in the bucket that no index lists, and
	// UnindexedCount how many there are: what a lost index blob held (or a killed run left).
	UnindexedPacks []string `json:"unindexedPacks,omitempty"`
	UnindexedCount int      `json:"unindexedCount,omitempty"`
}

// RecordedSnapshot is one snapshot of a RepositoryRecord.
type RecordedSnapshot struct {
	Backup  string `json:"backup,omitempty"`  // the id of the backup that made it (its tag)
	Problem string `json:"problem,omitempty"` // what it has lost, when it is damaged
}

// RepositoryRecordName is the name of the RepositoryRecord under a PVCBackup's prefix.
const RepositoryRecordName = "kopia-repository.json"

// Progress is what a running backup reports at EnvProgressKey.
type Progress struct {
	Time           time.Time `json:"time"`
	EstimatedBytes int64     `json:"estimatedBytes,omitempty"` // size of the volume: at the previous backup (kopia), or once scanned
	HashedBytes    int64     `json:"hashedBytes"`              // read and hashed so far
	CachedBytes    int64     `json:"cachedBytes,omitempty"`    // unchanged files not read again (kopia)
	UploadedBytes  int64     `json:"uploadedBytes"`            // written to the bucket so far
	// Phase is "maintenance" while kopia's repository maintenance runs after the backup.
	Phase string `json:"phase,omitempty"`
}

// ProgressEvery is how often a running backup writes its Progress.
const ProgressEvery = 15 * time.Second

// Succeeded reports whether the command succeeded.
func (r Result) Succeeded() bool { return r.Result == Succeeded }

// failure is an error with the Reason the mover reports for it.
type failure struct {
	reason Reason
	err    error
}

func (e *failure) Error() string { return e.err.Error() }
func (e *failure) Unwrap() error { return e.err }

// fail wraps err with reason.
func fail(reason Reason, format string, args ...any) error {
	return &failure{reason, fmt.Errorf(format, args...)}
}

// reasonOf is the Reason carried by err, or def.
func reasonOf(err error, def Reason) Reason {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return def
}

// failed is the Result of a command that failed with err.
func failed(err error, def Reason) Result {
	return Result{Result: Failed, Reason: reasonOf(err, def), Message: err.Error()}
}

// writeTerminationLog reports res where the kubelet reads the termination message.
func writeTerminationLog(getenv func(string) string, res *Result) {
	path := getenv(EnvTerminationLog)
	if path == "" {
		path = "/dev/termination-log"
	}
	data, _ := json.Marshal(res)
	if len(data) > 4000 { // the kubelet keeps at most 4096 bytes
		res.Message = res.Message[:min(len(res.Message), 1000)] + "..."
		data, _ = json.Marshal(res)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mover: write termination log:", err)
	}
}
