// Package mover is the program that runs inside a backup Job: it streams a volume as a tar+zstd
// archive into S3 and writes the manifest last. The controller configures it only through the
// environment variables below (credentials arrive as secretKeyRef variables, never as values in
// any object) and learns the result from the manifest in S3 and the pod's termination message.
package mover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
)

// Environment variables: the contract between the controller's Job and the mover.
const (
	EnvSourceDir       = "MOVER_SOURCE_DIR"
	EnvEndpoint        = "S3_ENDPOINT"
	EnvRegion          = "S3_REGION"
	EnvBucket          = "S3_BUCKET"
	EnvInsecure        = "S3_INSECURE"
	EnvCAFile          = "S3_CA_FILE"
	EnvAccessKey       = "AWS_ACCESS_KEY_ID"
	EnvSecretKey       = "AWS_SECRET_ACCESS_KEY"
	EnvBackupID        = "BACKUP_ID"
	EnvArchiveKey      = "BACKUP_ARCHIVE_KEY"
	EnvManifestKey     = "BACKUP_MANIFEST_KEY"
	EnvSourceNamespace = "BACKUP_SOURCE_NAMESPACE"
	EnvSourcePVC       = "BACKUP_SOURCE_PVC"
	EnvScheduledTime   = "BACKUP_SCHEDULED_TIME"
	EnvPartSize        = "S3_PART_SIZE"
	EnvTerminationLog  = "MOVER_TERMINATION_LOG"
	EnvIdleTimeout     = "S3_IDLE_TIMEOUT" // a Go duration; DefaultIdleTimeout when empty

	// EnvEngine chooses how a backup is stored: EngineKopia, or EngineArchive (also when empty).
	// restore and verify read the engine from the backup's manifest instead.
	EnvEngine = "MOVER_ENGINE"
	// EnvKopiaPrefix is the key prefix of the PVCBackup's kopia repository in the bucket.
	EnvKopiaPrefix = "KOPIA_PREFIX"
	// EnvKopiaPassword is the repository password (a secretKeyRef). It is also the variable the
	// stock kopia CLI reads, so the same Secret works with `kopia repository connect`.
	EnvKopiaPassword = "KOPIA_PASSWORD"
	// EnvKopiaCacheDir is kopia's cache and config directory (a size-limited emptyDir).
	EnvKopiaCacheDir = "KOPIA_CACHE_DIR"
	// EnvKopiaCacheLimit bounds kopia's content and metadata caches, in bytes.
	EnvKopiaCacheLimit = "KOPIA_CACHE_LIMIT_BYTES"
	// EnvKopiaKeyDerivation is kopia's name of the password key derivation of a repository a
	// backup creates (spec.kopia.keyDerivation); empty: kopia's default, scrypt.
	EnvKopiaKeyDerivation = "KOPIA_KEY_DERIVATION"
	// EnvProgressKey is where a running backup writes its Progress (JSON), about every
	// ProgressEvery; the controller shows it in status.activeRun.progress.
	EnvProgressKey = "BACKUP_PROGRESS_KEY"
	// EnvKopiaRecordKey is where a kopia backup records what it found in the repository
	// (RepositoryRecord): <prefix>RepositoryRecordName, next to the manifests it judges.
	EnvKopiaRecordKey = "KOPIA_RECORD_KEY"
)

// ManifestSuffix ends the key of every manifest: <prefix><backup id>.manifest.json.
const ManifestSuffix = ".manifest.json"

// Engines of a backup (PVCBackup spec.engine, Manifest.Engine).
const (
	EngineArchive = "archive"
	EngineKopia   = "kopia"
)

// DefaultPartSize is the multipart part size: the mover holds about one part in memory, so this
// bounds its memory whatever the volume size, and 10,000 parts of 16 MiB allow 156 GiB
// compressed archives.
const DefaultPartSize = 16 << 20

// DefaultIdleTimeout is how long an upload may send no byte to S3 before the mover gives up
// on it: long enough for one part on a slow link, short enough that a frozen server ends the run
// long before its deadline.
const DefaultIdleTimeout = 5 * time.Minute

// ObjectStore is what a backup needs from S3. Upload reads progress as bytes reach S3.
type ObjectStore interface {
	Upload(ctx context.Context, key string, r io.Reader, partSize uint64, progress io.Reader) (int64, error)
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
}

// BackupJob describes one backup run.
type BackupJob struct {
	ID              string
	SourceDir       string
	ArchiveKey      string
	ManifestKey     string
	Namespace       string
	PVC             string
	ScheduledTime   time.Time
	PartSize        uint64
	OperatorVersion string
	// IdleTimeout ends the upload when S3 takes no byte for this long (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// Engine is EngineKopia or EngineArchive; Kopia configures the former.
	Engine string
	Kopia  KopiaOptions
	// ProgressKey is where the running backup reports its Progress, every ProgressEvery (the
	// package's ProgressEvery when zero); empty: no report.
	ProgressKey   string
	ProgressEvery time.Duration
	// RecordKey is where a kopia backup writes its RepositoryRecord; empty: nowhere.
	RecordKey string
}

// idleTimeout is IdleTimeout, or DefaultIdleTimeout when unset.
func (j BackupJob) idleTimeout() time.Duration {
	if j.IdleTimeout <= 0 {
		return DefaultIdleTimeout
	}
	return j.IdleTimeout
}

// errStalled is the cause of a context the idle watchdog cancelled.
var errStalled = errors.New("S3 stalled")

// Backup streams job.SourceDir into the archive object and then writes the manifest. When any
// step fails no manifest is written, so a partial upload can never pass for a backup. The
// error carries the failing side's Reason: the volume (VolumeReadFailed), S3 (StorageFailed,
// StorageStalled) or a stop request (Interrupted).
func Backup(ctx context.Context, store ObjectStore, job BackupJob, now func() time.Time) (archive.Manifest, error) {
	start := now()
	idle := job.idleTimeout()
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	progress := watchIdle(uctx, idle, func() { cancel(errStalled) })
	reporter := newProgressReporter(uctx, store, job.ProgressKey, job.ProgressEvery)
	stopReports := keepReporting(reporter, func() Progress { return Progress{UploadedBytes: progress.sent.Load()} })

	partSize := job.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	// The archive is written while the previous part uploads (see pipeBuffer).
	pipe := newBufferedPipe(pipeBuffer)
	type written struct {
		stats archive.Stats
		err   error
	}
	done := make(chan written, 1)
	go func() {
		stats, err := archive.Write(uctx, job.SourceDir, pipe, archive.WriteOptions{})
		pipe.CloseWrite(err) // nil closes normally: the upload sees EOF
		done <- written{stats, err}
	}()
	var uploaded int64
	upErr := progress.do(func() (err error) {
		uploaded, err = store.Upload(uctx, job.ArchiveKey, pipe, partSize, progress)
		return err
	})
	pipe.CloseRead(upErrOrClosed(upErr)) // unblock the writer if the upload stopped early
	w := <-done
	stopReports()
	switch {
	case context.Cause(uctx) == errStalled:
		return archive.Manifest{}, fail(ReasonStorageStalled,
			"upload %s: S3 took no data for %v (server frozen or network stalled); the upload was abandoned", job.ArchiveKey, idle)
	case ctx.Err() != nil:
		return archive.Manifest{}, fail(ReasonInterrupted, "backup interrupted (%v) after %v", context.Cause(ctx), now().Sub(start).Round(time.Second))
	case w.err != nil && !errors.Is(w.err, errUploadStopped):
		// The volume failed first; the upload only saw its stream end with that error.
		return archive.Manifest{}, fail(ReasonVolumeReadFailed, "read volume %s: %w", job.SourceDir, w.err)
	case upErr != nil:
		return archive.Manifest{}, fail(ReasonStorageFailed, "upload %s: %w", job.ArchiveKey, upErr)
	case uploaded != w.stats.ArchiveBytes:
		return archive.Manifest{}, fail(ReasonStorageFailed, "upload %s: stored %d bytes, archive has %d", job.ArchiveKey, uploaded, w.stats.ArchiveBytes)
	}

	m := archive.NewManifest(job.ID, job.Namespace, job.PVC, job.ArchiveKey, w.stats)
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), start.UTC(), now().UTC()
	m.OperatorVersion = job.OperatorVersion
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return archive.Manifest{}, err
	}
	if err := progress.do(func() error { return store.PutBytes(uctx, job.ManifestKey, data, "application/json") }); err != nil {
		if context.Cause(uctx) == errStalled {
			return archive.Manifest{}, fail(ReasonStorageStalled, "write manifest %s: S3 took no data for %v (server frozen or network stalled)", job.ManifestKey, idle)
		}
		return archive.Manifest{}, fail(ReasonStorageFailed, "write manifest %s: %w", job.ManifestKey, err)
	}
	return m, nil
}

// errUploadStopped is what the archive writer sees when the upload ended before the stream.
var errUploadStopped = errors.New("the upload stopped")

func upErrOrClosed(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", errUploadStopped, err)
	}
	return errUploadStopped
}

// watchIdle returns the progress reader of an upload and calls onStall when it has not been read
// for idle while an S3 call was in flight. It stops when ctx ends.
func watchIdle(ctx context.Context, idle time.Duration, onStall func()) *progressReader {
	return &progressReader{activity: watchActivity(ctx, idle, onStall)}
}

// keepReporting feeds progress() to the reporter once a second, until the returned function is
// called: the report of a phase that reports nothing by itself (an archive upload, kopia's
// maintenance), so that its age keeps meaning "the mover is stuck or S3 takes no request".
func keepReporting(reporter *progressReporter, progress func() Progress) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				reporter.report(progress())
				return
			case <-t.C:
				reporter.report(progress())
			}
		}
	}()
	return func() { close(stop); <-done; reporter.stop() }
}

// progressReader is minio-go's progress hook: it is "read" as many bytes as were sent.
type progressReader struct {
	*activity
	sent atomic.Int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.sent.Add(int64(len(b)))
	p.touch(-1)
	return len(b), nil
}

// ErrBadManifest is wrapped by the error of ReadManifest when the object was read but is not a
// manifest; any other error is the reader's (S3's).
var ErrBadManifest = errors.New("not a valid manifest")

// ReadManifest decodes a manifest object.
func ReadManifest(r io.Reader) (archive.Manifest, error) {
	var m archive.Manifest
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return m, err
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	return m, nil
}
