// Package engine is what the mover's engines share: the description of a run they are given
// (BackupJob, RestoreJob, VerifyJob, the bucket as S3), the idle watchdog over S3 calls (Watch,
// Activity), the progress report of a backup, and the preparation of a restore's target. Each
// engine is a package of its own below this one (archive: tar+zstd; kopia: a kopia repository)
// implementing the Engine interface of internal/mover/run, which picks one per run; a new engine
// is a new package, not a branch in the others.
package engine

import (
	"context"
	"io"
	"time"

	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Store is what the engines need from the bucket: objectstore.Store, or a run's WatchedStore.
type Store interface {
	Upload(ctx context.Context, key string, r io.Reader, partSize uint64, progress io.Reader) (int64, error)
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (objectstore.ObjectInfo, error)
	ListTop(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error)
}

// S3 is the bucket of a run.
type S3 struct {
	Store Store
	// Config is where Store connects; an engine that opens connections of its own (kopia's
	// repository) opens them with it.
	Config objectstore.Config
	// Watch is the idle watchdog the run keeps over a restore or verify (nil for a backup,
	// whose engine watches its own calls): an engine that makes S3 calls besides Store's puts
	// them under it.
	Watch *Watch
}

// BackupJob describes one backup run.
type BackupJob struct {
	ID          string
	SourceDir   string
	ArchiveKey  string
	ManifestKey string
	Namespace   string
	PVC         string
	// PVCs are the members of a group backup, each in the directory of its name under
	// SourceDir; empty for the backup of one PVC.
	PVCs            []string
	ScheduledTime   time.Time
	PartSize        uint64 // archive engine: the multipart part size (mover.DefaultPartSize if 0)
	OperatorVersion string
	// IdleTimeout ends the backup when S3 moves no byte for this long (mover.DefaultIdleTimeout
	// if 0).
	IdleTimeout time.Duration
	// ProgressKey is where the running backup reports its mover.Progress, every ProgressEvery
	// (mover.ProgressEvery when zero); empty: no report.
	ProgressKey   string
	ProgressEvery time.Duration
	// RecordKey is where a kopia backup writes its mover.RepositoryRecord; empty: nowhere.
	RecordKey string
}

// Idle is IdleTimeout, or mover.DefaultIdleTimeout when unset.
func (j BackupJob) Idle() time.Duration {
	if j.IdleTimeout <= 0 {
		return mover.DefaultIdleTimeout
	}
	return j.IdleTimeout
}

// RestoreJob describes one restore.
type RestoreJob struct {
	TargetDir   string
	ArchiveKey  string // archive engine only
	ManifestKey string
	Overwrite   string // Refuse, Clean or Merge
	// Paths restores only these files or directories (mover.DecodePaths: checked, outermost
	// only, sorted); nil: the whole backup.
	Paths []string
	// Members makes the restore that of a group backup (target.go): each member's tree goes
	// into TargetDir/<Dir>, its own volume, with its own Overwrite policy; nil: one volume.
	Members []Member
}

// Member is one member of a group restore: the directory of its tree in the backup (its PVC's
// name), which is also where its target volume is mounted under TargetDir, and the overwrite
// policy of that volume.
type Member struct {
	Dir       string
	Overwrite string
}

// VerifyJob describes one verify: the backup to read back.
type VerifyJob struct {
	ArchiveKey  string // archive engine only
	ManifestKey string
}

// ListJob describes one listing of a backup's tree (`mover list`): nothing is restored.
type ListJob struct {
	ManifestKey string
	// Path is the directory to list, relative to the volume's root ("" the root); Depth how many
	// levels below it (1 to mover.MaxListDepth).
	Path  string
	Depth int
}
