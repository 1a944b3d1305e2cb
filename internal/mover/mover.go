// Package mover is the program that runs inside a backup Job: it streams a volume as a tar+zstd
// archive into S3 and writes the manifest last. The controller configures it only through the
// environment variables below (credentials arrive as secretKeyRef variables, never as values in
// any object) and learns the result from the manifest in S3 and the pod's termination message.
package mover

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
)

// DefaultPartSize is the multipart part size: the mover holds about one part in memory, so this
// bounds its memory whatever the volume size, and 10,000 parts of 16 MiB allow 156 GiB
// compressed archives.
const DefaultPartSize = 16 << 20

// ObjectStore is what a backup needs from S3.
type ObjectStore interface {
	Upload(ctx context.Context, key string, r io.Reader, partSize uint64) (int64, error)
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
}

// Backup streams job.SourceDir into the archive object and then writes the manifest. When any
// step fails no manifest is written, so a partial upload can never pass for a backup.
func Backup(ctx context.Context, store ObjectStore, job BackupJob, now func() time.Time) (archive.Manifest, error) {
	start := now()
	pr, pw := io.Pipe()
	type written struct {
		stats archive.Stats
		err   error
	}
	done := make(chan written, 1)
	go func() {
		stats, err := archive.Write(ctx, job.SourceDir, pw, archive.WriteOptions{})
		pw.CloseWithError(err) // nil closes normally: the upload sees EOF
		done <- written{stats, err}
	}()
	partSize := job.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	uploaded, upErr := store.Upload(ctx, job.ArchiveKey, pr, partSize)
	pr.CloseWithError(upErr) // unblock the writer if the upload stopped early
	w := <-done
	switch {
	case w.err != nil:
		return archive.Manifest{}, fmt.Errorf("read volume %s: %w", job.SourceDir, w.err)
	case upErr != nil:
		return archive.Manifest{}, fmt.Errorf("upload %s: %w", job.ArchiveKey, upErr)
	case uploaded != w.stats.ArchiveBytes:
		return archive.Manifest{}, fmt.Errorf("upload %s: stored %d bytes, archive has %d", job.ArchiveKey, uploaded, w.stats.ArchiveBytes)
	}

	m := archive.NewManifest(job.ID, job.Namespace, job.PVC, job.ArchiveKey, w.stats)
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), start.UTC(), now().UTC()
	m.OperatorVersion = job.OperatorVersion
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return archive.Manifest{}, err
	}
	if err := store.PutBytes(ctx, job.ManifestKey, data, "application/json"); err != nil {
		return archive.Manifest{}, fmt.Errorf("write manifest %s: %w", job.ManifestKey, err)
	}
	return m, nil
}

// ReadManifest decodes a manifest object.
func ReadManifest(r io.Reader) (archive.Manifest, error) {
	var m archive.Manifest
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return m, err
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return m, fmt.Errorf("decode manifest: %w", err)
	}
	return m, nil
}
