package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/restore"
	"github.com/kopia/kopia/snapshot/snapshotfs"
)

// RestoreParallelism is how many files a restore writes at once.
const RestoreParallelism = 8

// ErrSnapshotNotFound means no snapshot has the ID.
var ErrSnapshotNotFound = errors.New("snapshot not found")

// EnvRestoreParallelism overrides RestoreParallelism: a knob for bench/engines to measure other
// values with, not a setting of the mover.
const EnvRestoreParallelism = "KOPIAREPO_RESTORE_PARALLELISM"

func restoreParallelism() int {
	if n, err := strconv.Atoi(os.Getenv(EnvRestoreParallelism)); err == nil && n > 0 {
		return n
	}
	return RestoreParallelism
}

// RestoreStats count what a restore wrote.
type RestoreStats struct {
	Files    int
	Dirs     int
	Symlinks int
	Bytes    int64
}

// Restore writes the tree of the snapshot into targetDir, creating it if needed. Entries
// already there are overwritten, others are left alone. Modes and modification times are
// restored, owners where the process may set them (silently not otherwise). Runs of zeros are
// written as holes, so a sparse file stays sparse. Hard links come back as separate files, and
// sockets, FIFOs and devices were never backed up: kopia records none of them.
func (r *Repo) Restore(ctx context.Context, snapshotID, targetDir string) (RestoreStats, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return RestoreStats{}, err
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return RestoreStats{}, err
	}
	target, err := filepath.Abs(targetDir)
	if err != nil {
		return RestoreStats{}, err
	}
	out := &restore.FilesystemOutput{
		TargetPath:             target,
		OverwriteDirectories:   true,
		OverwriteFiles:         true,
		OverwriteSymlinks:      true,
		IgnorePermissionErrors: true, // a non-root mover cannot chown; kopia then skips owners only
		WriteSparseFiles:       true,
	}
	if err := out.Init(ctx); err != nil {
		return RestoreStats{}, fmt.Errorf("restore target %s: %w", target, err)
	}
	done, err := r.restoreSmallFilesByPack(ctx, root, out)
	if ctx.Err() != nil {
		return RestoreStats{}, ctx.Err()
	}
	if err != nil {
		return RestoreStats{}, fmt.Errorf("restore %s into %s: %w", snapshotID, target, err)
	}
	cancel := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(cancel) })
	defer stop()
	st, err := restore.Entry(ctx, r.rep, volumeOutput{out, done}, root, restore.Options{
		RestoreDirEntryAtDepth: math.MaxInt32, // full depth
		// kopia restores one file at a time by default; each file waits on S3 round trips, so a
		// tree of small files restores several times faster with several in flight.
		Parallel: restoreParallelism(),
		Cancel:   cancel,
	})
	if ctx.Err() != nil {
		return RestoreStats{}, ctx.Err()
	}
	if err != nil {
		return RestoreStats{}, fmt.Errorf("restore %s into %s: %w", snapshotID, target, err)
	}
	return RestoreStats{
		Files:    int(st.RestoredFileCount),
		Dirs:     int(st.RestoredDirCount),
		Symlinks: int(st.RestoredSymlinkCount),
		Bytes:    st.RestoredTotalFileSize,
	}, nil
}

// VerifyStats count what Verify read: the files and symlinks (whose targets are objects too).
type VerifyStats struct {
	Objects int64
	Bytes   int64
}

// Verify reads back every file of the snapshot, as `kopia snapshot verify
// --verify-files-percent=100` does: each chunk is fetched, decrypted and checked against its
// hash, and each pack it lives in must be listed in the bucket. Chunks already in the local
// cache are read from it (a backup does not fill it; a restore or an earlier Verify does).
func (r *Repo) Verify(ctx context.Context, snapshotID string) (VerifyStats, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return VerifyStats{}, err
	}
	rep := r.packPrefetching()
	root, err := snapshotfs.SnapshotRoot(rep, man)
	if err != nil {
		return VerifyStats{}, err
	}
	opts := snapshotfs.VerifierOptions{VerifyFilesPercent: 100, MaxErrors: 1}
	if dr, ok := r.rep.(repo.DirectRepository); ok {
		if opts.BlobMap, err = blob.ReadBlobMap(ctx, dr.BlobReader()); err != nil {
			return VerifyStats{}, fmt.Errorf("list the repository's blobs: %w", err)
		}
	}
	v := snapshotfs.NewVerifier(ctx, rep, opts)
	res, err := v.InParallel(ctx, func(tw *snapshotfs.TreeWalker) error {
		return tw.Process(ctx, root, ".")
	})
	if err == nil && res.ErrorCount > 0 {
		err = errors.Join(res.Errors...)
	}
	if err != nil {
		return VerifyStats{}, fmt.Errorf("verify %s: %w", snapshotID, err)
	}
	return VerifyStats{Objects: res.Stats.ReadFileCount, Bytes: res.Stats.ReadBytes}, nil
}

// load returns the complete snapshot with the ID.
func (r *Repo) load(ctx context.Context, id string) (*snapshot.Manifest, error) {
	man, err := snapshot.LoadSnapshot(ctx, r.rep, manifest.ID(id))
	if errors.Is(err, snapshot.ErrSnapshotNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", id, err)
	}
	if man.IncompleteReason != "" {
		return nil, fmt.Errorf("%w: %s is incomplete (%s)", ErrSnapshotNotFound, id, man.IncompleteReason)
	}
	return man, nil
}

// volumeOutput is kopia's FilesystemOutput for a target that may be a mount point: after the
// root directory, kopia removes a leftover shallow-restore placeholder next to it ("<target>.kopia-entry"),
// in the parent directory, which for a volume is the mover's read-only root filesystem (EROFS:
// found on real pods). A restore here never writes placeholders, so the root's attributes are
// set without that step.
type volumeOutput struct {
	*restore.FilesystemOutput
	// done are the files restoreSmallFilesByPack wrote already (relative paths).
	done map[string]struct{}
}

func (o volumeOutput) WriteFile(ctx context.Context, relativePath string, f fs.File, progress restore.FileWriteProgress) error {
	if _, written := o.done[relativePath]; written {
		return nil
	}
	return o.FilesystemOutput.WriteFile(ctx, relativePath, f, progress) //nolint:wrapcheck // kopia's own
}

// packFetchesInFlight bounds the packs packPrefetching fetches at a time (kopia holds a whole
// pack in memory twice while it caches it: 8 workers fetching 8 packs of 20 MiB would add
// ~300 MiB to the mover's peak).
const packFetchesInFlight = 2

// packPrefetching is the repository Verify reads a snapshot's files through: before a file of
// one small chunk (smallChunkBytes) is read, the whole pack holding that chunk is brought into
// kopia's content cache, once. Each pack is then one GET instead of one per file, as long as
// the cache holds the packs the files are spread over (see packorder.go: a restore orders its
// reads by pack instead; verify does not, yet). Larger chunks are read by ranges as before.
// Without a content cache (a bench knob) nothing is prefetched.
type packPrefetching struct {
	repo.Repository
	asked sync.Map      // pack blob ID → struct{}: fetched once (a pack evicted since is read by ranges)
	slots chan struct{} // packFetchesInFlight
}

func (r *Repo) packPrefetching() repo.Repository {
	if r.contentCacheBytes <= 0 {
		return r.rep
	}
	return &packPrefetching{Repository: r.rep, slots: make(chan struct{}, packFetchesInFlight)}
}

func (p *packPrefetching) OpenObject(ctx context.Context, id object.ID) (object.Reader, error) {
	p.prefetch(ctx, id)
	return p.Repository.OpenObject(ctx, id) //nolint:wrapcheck // kopia's own
}

func (p *packPrefetching) prefetch(ctx context.Context, id object.ID) {
	cid, _, direct := id.ContentID()
	if !direct {
		return
	}
	info, err := p.ContentInfo(ctx, cid)
	if err != nil || info.OriginalLength > smallChunkBytes ||
		!strings.HasPrefix(string(info.PackBlobID), string(content.PackBlobIDPrefixRegular)) {
		return // reading reports an error; metadata packs are always cached whole by kopia
	}
	if _, done := p.asked.Load(info.PackBlobID); done {
		return // fetched, or being fetched under kopia's lock of the pack, which reading waits for
	}
	// Wait for a slot before claiming the pack: a pack claimed but not yet locked by kopia would
	// let the other workers read its files by ranges meanwhile (and fill the cache with them).
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.slots }()
	if _, done := p.asked.LoadOrStore(info.PackBlobID, struct{}{}); done {
		return
	}
	p.PrefetchContents(ctx, []content.ID{cid}, prefetchWholePacks) // best effort: a miss reads the range
}

func (o volumeOutput) FinishDirectory(ctx context.Context, relativePath string, e fs.Directory) error {
	if relativePath != "" {
		return o.FilesystemOutput.FinishDirectory(ctx, relativePath, e) //nolint:wrapcheck // kopia's own
	}
	path := o.TargetPath
	ignore := func(err error) error {
		if err != nil && (errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EPERM)) {
			return nil // a non-root mover may not own the volume's root; its files are what matters
		}
		return err
	}
	if err := ignore(os.Chmod(path, e.Mode()&fs.ModBits)); err != nil {
		return fmt.Errorf("set the mode of %s: %w", path, err)
	}
	if err := ignore(os.Chtimes(path, e.ModTime(), e.ModTime())); err != nil {
		return fmt.Errorf("set the times of %s: %w", path, err)
	}
	return nil
}
