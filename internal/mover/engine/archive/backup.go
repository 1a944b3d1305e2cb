// Package archive is the mover's archive engine: a backup is one tar+zstd object (written by
// internal/archive) streamed to S3 while the volume is read, and its manifest written last; a
// restore or verify streams the object back and checks it against the manifest.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	tarzstd "github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
)

// Engine is the archive engine (mover.EngineArchive).
type Engine struct{}

// ObjectStore is what a backup needs from S3. Upload reads progress as bytes reach S3.
type ObjectStore interface {
	Upload(ctx context.Context, key string, r io.Reader, partSize uint64, progress io.Reader) (int64, error)
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
}

// Backup is Backup of the bucket's store, and the Result of the backup it made.
func (Engine) Backup(ctx context.Context, s3 engine.S3, job engine.BackupJob) (mover.Result, error) {
	m, err := Backup(ctx, s3.Store, job, time.Now)
	if err != nil {
		return mover.Result{ID: job.ID}, err
	}
	return mover.Result{ID: m.ID, ArchiveKey: m.Archive.Key, Bytes: m.Archive.Bytes,
		SHA256: m.Archive.SHA256, Files: m.Files, Skipped: m.Skipped}, nil
}

// Backup streams job.SourceDir into the archive object and then writes the manifest. When any
// step fails no manifest is written, so a partial upload can never pass for a backup. The
// error carries the failing side's Reason: the volume (VolumeReadFailed), S3 (StorageFailed,
// StorageStalled) or a stop request (Interrupted).
func Backup(ctx context.Context, store ObjectStore, job engine.BackupJob, now func() time.Time) (tarzstd.Manifest, error) {
	start := now()
	w := engine.WatchRun(ctx, job.Idle())
	defer w.Stop()
	uctx := w.Ctx
	progress := &progressReader{Activity: w.Activity}
	reporter := engine.NewProgressReporter(uctx, store, job.ProgressKey, job.ProgressEvery)
	stopReports := engine.KeepReporting(reporter, func() mover.Progress { return mover.Progress{UploadedBytes: progress.sent.Load()} })

	partSize := job.PartSize
	if partSize == 0 {
		partSize = mover.DefaultPartSize
	}
	// The archive is written while the previous part uploads (see pipeBuffer).
	pipe := newBufferedPipe(pipeBuffer)
	type written struct {
		stats tarzstd.Stats
		err   error
	}
	done := make(chan written, 1)
	var top []tarzstd.TreeEntry
	go func() {
		stats, err := tarzstd.Write(uctx, job.SourceDir, pipe, tarzstd.WriteOptions{Top: &top})
		pipe.CloseWrite(err) // nil closes normally: the upload sees EOF
		done <- written{stats, err}
	}()
	var uploaded int64
	upErr := progress.Do(func() (err error) {
		uploaded, err = store.Upload(uctx, job.ArchiveKey, pipe, partSize, progress)
		return err
	})
	pipe.CloseRead(upErrOrClosed(upErr)) // unblock the writer if the upload stopped early
	wr := <-done
	stopReports()
	switch {
	case w.HasStalled():
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonStorageStalled,
			"upload %s: S3 took no data for %v (server frozen or network stalled); the upload was abandoned", job.ArchiveKey, w.Idle)
	case ctx.Err() != nil:
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonInterrupted, "backup interrupted (%v) after %v", context.Cause(ctx), now().Sub(start).Round(time.Second))
	case wr.err != nil && !errors.Is(wr.err, errUploadStopped):
		// The volume failed first; the upload only saw its stream end with that error.
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonVolumeReadFailed, "read volume %s: %w", job.SourceDir, wr.err)
	case upErr != nil:
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonStorageFailed, "upload %s: %w", job.ArchiveKey, upErr)
	case uploaded != wr.stats.ArchiveBytes:
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonStorageFailed, "upload %s: stored %d bytes, archive has %d", job.ArchiveKey, uploaded, wr.stats.ArchiveBytes)
	}

	m := tarzstd.NewManifest(job.ID, job.Namespace, job.PVC, job.ArchiveKey, wr.stats)
	m.Source.PVCs = job.PVCs
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), start.UTC(), now().UTC()
	m.OperatorVersion = job.OperatorVersion
	m.SetTree(top) // read after done: the writer goroutine has finished with it
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return tarzstd.Manifest{}, err
	}
	if err := progress.Do(func() error { return store.PutBytes(uctx, job.ManifestKey, data, "application/json") }); err != nil {
		if w.HasStalled() {
			return tarzstd.Manifest{}, mover.Fail(mover.ReasonStorageStalled, "write manifest %s: S3 took no data for %v (server frozen or network stalled)", job.ManifestKey, w.Idle)
		}
		return tarzstd.Manifest{}, mover.Fail(mover.ReasonStorageFailed, "write manifest %s: %w", job.ManifestKey, err)
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

// progressReader is minio-go's progress hook: it is "read" as many bytes as were sent, each
// read a sign of life for the idle watchdog.
type progressReader struct {
	*engine.Activity
	sent atomic.Int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.sent.Add(int64(len(b)))
	p.Touch(-1)
	return len(b), nil
}
