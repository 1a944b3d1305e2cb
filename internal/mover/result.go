package mover

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
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
	// ReasonRepositoryPasswordWrong (kopia): the repository exists and the password does not
	// open it (nor the previous password, when one is given).
	ReasonRepositoryPasswordWrong Reason = "RepositoryPasswordWrong"
	// ReasonPathNotInBackup: a path of the restore's EnvRestorePaths (PVCRestore spec.paths) is
	// not in the backup, or cannot be restored alone; the message names it. Found before the
	// target is touched.
	ReasonPathNotInBackup Reason = "PathNotInBackup"
	// ReasonTreeNotRecorded (mover list, archive engine): the archive backup was made before
	// archive manifests recorded their top level; listing it would read the whole archive.
	ReasonTreeNotRecorded Reason = "TreeNotRecorded"
	// ReasonNotARepository (kopia): the repository's prefix holds objects that are not a kopia
	// repository.
	ReasonNotARepository Reason = "NotARepository"
	// ReasonBucketNotLockable (kopia, EnvKopiaRetentionMode): the bucket refused a locked
	// object (it was created without object lock); nothing was written.
	ReasonBucketNotLockable Reason = "BucketNotLockable"
	// ReasonImmutabilityMismatch (kopia): the existing repository's object lock retention is not
	// the one the backup asks for (EnvKopiaRetentionMode, EnvKopiaRetentionPeriod); kopia cannot
	// change it, so the backup changed nothing. The message says what the repository has.
	ReasonImmutabilityMismatch Reason = "ImmutabilityMismatch"
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
	// A restore of some paths (EnvRestorePaths) only: the bytes of the files it restored (Files
	// counts them), and the files and bytes of the whole backup.
	RestoredBytes int64 `json:"restoredBytes,omitempty"`
	TotalFiles    int64 `json:"totalFiles,omitempty"`
	TotalBytes    int64 `json:"totalBytes,omitempty"`
	// Entries are what `mover list` found (the largest entries that fit the termination message,
	// largest first) and EntriesMore what it left out.
	Entries     []archive.TreeEntry `json:"entries,omitempty"`
	EntriesMore *archive.TreeMore   `json:"entriesMore,omitempty"`
	// Skipped counts what a backup found in the volume and could not hold (manifest's skipped):
	// sockets and devices, and FIFOs with kopia. The controller warns about them.
	Skipped int64 `json:"skipped,omitempty"`

	// Kopia engine only: the snapshot of the backup, the repository's size in the bucket after
	// the run, its password key derivation, and its maintenance (what ran after this backup,
	// when each kind last ran, and an error that did not fail the backup).
	SnapshotID      string `json:"snapshotID,omitempty"`
	RepositoryBytes int64  `json:"repositoryBytes,omitempty"`
	KeyDerivation   string `json:"keyDerivation,omitempty"` // kopia's name, e.g. scrypt-65536-8-1
	// Splitter is kopia's name of the splitter the repository was created with, e.g.
	// DYNAMIC-1M-BUZHASH: the one every backup into it uses, whatever EnvKopiaSplitter asked.
	Splitter string `json:"splitter,omitempty"`
	// RetentionMode and RetentionPeriod (a Go duration) are the repository's object lock
	// retention (empty: none); also on a backup that failed with ReasonImmutabilityMismatch.
	RetentionMode        string     `json:"retentionMode,omitempty"`
	RetentionPeriod      string     `json:"retentionPeriod,omitempty"`
	Maintenance          string     `json:"maintenance,omitempty"` // "", "quick" or "full"
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
	// PasswordRotated: the repository opened only with the previous password
	// (EnvKopiaPreviousPassword) and the backup changed its password to the current one; also
	// on a failed backup, whose rotation stands.
	PasswordRotated bool `json:"passwordRotated,omitempty"`
}

// Succeeded reports whether the command succeeded.
func (r Result) Succeeded() bool { return r.Result == Succeeded }

// Error is an error with the Reason the mover reports for it: an engine says which side failed
// where it knows (Fail), and the run turns the error into the Result (ReasonOf).
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Fail is an *Error of reason with a formatted message (%w wraps as in fmt.Errorf).
func Fail(reason Reason, format string, args ...any) error {
	return &Error{reason, fmt.Errorf(format, args...)}
}

// ReasonOf is the Reason carried by err, or def when it carries none.
func ReasonOf(err error, def Reason) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return def
}

// ListBudget is how many bytes of the termination message the entries of `mover list` may take:
// the kubelet keeps 4096 bytes, and the rest of the Result needs some.
const ListBudget = 3000

// BoundEntries is what of entries a Result can carry: the largest first (by bytes, then path)
// while their JSON fits budget bytes, and the count and bytes of the rest (nil when none is left
// out).
func BoundEntries(entries []archive.TreeEntry, budget int) ([]archive.TreeEntry, *archive.TreeMore) {
	sorted := slices.Clone(entries)
	archive.LargestFirst(sorted)
	used := 0
	for i, e := range sorted {
		data, _ := json.Marshal(e)
		if used += len(data) + 1; used > budget {
			more := &archive.TreeMore{Entries: int64(len(sorted) - i)}
			for _, r := range sorted[i:] {
				more.Bytes += r.Bytes
			}
			return sorted[:i], more
		}
	}
	return sorted, nil
}
