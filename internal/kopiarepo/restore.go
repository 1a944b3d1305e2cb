package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
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
	err = r.restoreSmallFilesByPack(ctx, root, out)
	if ctx.Err() != nil {
		return RestoreStats{}, ctx.Err()
	}
	if err != nil {
		return RestoreStats{}, fmt.Errorf("restore %s into %s: %w", snapshotID, target, err)
	}
	cancel := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(cancel) })
	defer stop()
	st, err := restore.Entry(ctx, r.rep, volumeOutput{out, r.rep}, root, restore.Options{
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

// Verify reads back every file and symlink of the snapshot, as `kopia snapshot verify
// --verify-files-percent=100` does: each object's chunks must be in the index and in packs the
// bucket lists, and each chunk is fetched, decrypted and checked against its hash. The small
// files are read pack by pack (packorder.go), the rest RestoreParallelism at a time.
func (r *Repo) Verify(ctx context.Context, snapshotID string) (VerifyStats, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return VerifyStats{}, err
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return VerifyStats{}, err
	}
	var packs map[blob.ID]blob.Metadata
	if dr, ok := r.rep.(repo.DirectRepository); ok {
		if packs, err = blob.ReadBlobMap(ctx, dr.BlobReader()); err != nil {
			return VerifyStats{}, fmt.Errorf("list the repository's blobs: %w", err)
		}
	}
	plan, err := planReads(ctx, r.rep, root, true)
	if err != nil {
		return VerifyStats{}, fmt.Errorf("verify %s: %w", snapshotID, err)
	}
	var objects, bytes atomic.Int64
	read := func(ctx context.Context, o planned) error {
		n, err := r.verifyObject(ctx, o.oid(), packs)
		if err != nil {
			return fmt.Errorf("%q: %w", plan.rel(o), err)
		}
		objects.Add(1)
		bytes.Add(n)
		return nil
	}
	err = plan.eachByPack(ctx, r.rep, r.packs, read)
	if err == nil {
		err = each(ctx, plan.rest, read)
	}
	if err != nil {
		return VerifyStats{}, fmt.Errorf("verify %s: %w", snapshotID, err)
	}
	return VerifyStats{Objects: objects.Load(), Bytes: bytes.Load()}, nil
}

// verifyObject checks that the chunks of the object are indexed and stored in packs listed in
// packs (when not nil), reads the object whole and returns its length.
func (r *Repo) verifyObject(ctx context.Context, oid object.ID, packs map[blob.ID]blob.Metadata) (int64, error) {
	cids, err := r.rep.VerifyObject(ctx, oid)
	if err != nil {
		return 0, fmt.Errorf("verify object %v: %w", oid, err)
	}
	if packs != nil {
		for _, cid := range cids {
			info, err := r.rep.ContentInfo(ctx, cid)
			if err != nil {
				return 0, fmt.Errorf("chunk %v of object %v: %w", cid, oid, err)
			}
			if _, ok := packs[info.PackBlobID]; !ok {
				return 0, fmt.Errorf("object %v is backed by missing pack %v", oid, info.PackBlobID)
			}
		}
	}
	rd, err := r.rep.OpenObject(ctx, oid)
	if err != nil {
		return 0, fmt.Errorf("open object %v: %w", oid, err)
	}
	defer rd.Close() //nolint:errcheck // read only
	n, err := io.Copy(io.Discard, rd)
	if err != nil {
		return n, fmt.Errorf("read object %v: %w", oid, err)
	}
	return n, nil
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
	rep repo.Repository
}

// WriteFile writes the file with writeRestoredFile (filewriter.go), unless restoreSmallFilesByPack
// wrote it already: it writes the small ones (smallObject), and a restore runs it first. Asking
// smallObject again (an index lookup) replaced a set of the paths it wrote, 14 MiB for 200,000
// files; a small file missing from the target, or of another length, is written all the same.
func (o volumeOutput) WriteFile(ctx context.Context, relativePath string, f fs.File, progress restore.FileWriteProgress) error {
	path := filepath.Join(o.TargetPath, filepath.FromSlash(relativePath))
	if _, small := smallObject(ctx, o.rep, f); small {
		if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Size() == f.Size() {
			return nil
		}
	}
	return writeRestoredFile(ctx, path, f, progress)
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
