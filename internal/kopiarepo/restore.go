package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/snapshotfs"
	"golang.org/x/sys/unix"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
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
// already there are replaced (a file or symlink where a directory goes too, and an empty
// directory where a file goes; a directory with entries there is an error), others are left
// alone. Modes and modification times are restored,
// owners where the process may set them (silently not otherwise). Runs of zeros are written as
// holes, so a sparse file stays sparse. Hard links come back as separate files, and sockets,
// FIFOs and devices were never backed up: kopia records none of them.
//
// One walk of the snapshot's directories (planReads) lists everything; then, in this order:
// the directories are made, the small files and the chunks of the larger ones written pack by
// pack (packorder.go, largefiles.go), the other files (those whose chunks the walk could not
// list) and the symlinks written RestoreParallelism at a time, and last the directories get
// their owner, mode and times, deepest first. kopia's own restore (restore.Entry) walked the
// tree a second time, reading every directory again and asking the index and lstat about each
// file the pack pass had written.
//
// volumeRoots are directories of the snapshot's root (a group backup's members) that are volume
// roots in the target too: like the target's root, they keep their owner, and a refused mode or
// time is ignored.
func (r *Repo) Restore(ctx context.Context, snapshotID, targetDir string, volumeRoots ...string) (RestoreStats, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return RestoreStats{}, err
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return RestoreStats{}, err
	}
	if _, ok := root.(fs.Directory); !ok {
		return RestoreStats{}, fmt.Errorf("snapshot %s is of a single file, not of a volume", snapshotID)
	}
	target, err := filepath.Abs(targetDir)
	if err != nil {
		return RestoreStats{}, err
	}
	plan, err := planReads(ctx, r.rep, root, true)
	if err != nil {
		return RestoreStats{}, err
	}
	st, err := r.restorePlan(ctx, plan, target, true, volumeRoots...)
	if ctx.Err() != nil {
		return RestoreStats{}, ctx.Err()
	}
	if err != nil {
		return RestoreStats{}, fmt.Errorf("restore %s into %s: %w", snapshotID, target, err)
	}
	return st, nil
}

// restorePlan writes what plan lists into target. withRoot gives the target's root the
// snapshot root's mode and times (a restore of some paths leaves the root as it is).
func (r *Repo) restorePlan(ctx context.Context, plan *readPlan, target string, withRoot bool, volumeRoots ...string) (RestoreStats, error) {
	// A group restore's target is the directory the members' volumes are mounted in: the
	// container's (on a read-only root file system in a pod), left as it is.
	t := restoreTarget{root: target, keepRoot: !withRoot || len(volumeRoots) > 0, volumeRoots: map[string]bool{}}
	for _, rel := range volumeRoots {
		t.volumeRoots[rel] = true
	}
	if err := t.makeDirs(plan.dirs); err != nil {
		return RestoreStats{}, err
	}
	var files, symlinks, written atomic.Int64
	write := func(ctx context.Context, o planned) error {
		rel := plan.rel(o)
		var err error
		switch e := o.entry.(type) {
		case fs.File:
			if err = writeRestoredFile(ctx, t.path(rel), e); err == nil {
				files.Add(1)
				written.Add(e.Size())
			}
		case fs.Symlink:
			if err = t.symlink(ctx, rel, e); err == nil {
				symlinks.Add(1)
			}
		default:
			err = fmt.Errorf("an entry of type %T", e)
		}
		if err != nil {
			return fmt.Errorf("restore %q: %w", rel, err)
		}
		return nil
	}
	piece := func(ctx context.Context, pc piece) error {
		rel := plan.rel(pc.file.planned)
		finished, err := writePiece(ctx, r.rep, t.path(rel), pc)
		if err != nil {
			return fmt.Errorf("restore %q: %w", rel, err)
		}
		if finished {
			files.Add(1)
			written.Add(pc.file.entry.Size())
		}
		return nil
	}
	if err := plan.eachByPack(ctx, r.rep, r.packs, write, piece); err != nil {
		return RestoreStats{}, err
	}
	if err := each(ctx, plan.rest, write); err != nil {
		return RestoreStats{}, err
	}
	if err := t.finishDirs(plan.dirs, plan.dirEntries); err != nil {
		return RestoreStats{}, err
	}
	return RestoreStats{
		Files:    int(files.Load()),
		Dirs:     len(plan.dirs),
		Symlinks: int(symlinks.Load()),
		Bytes:    written.Load(),
	}, nil
}

// restoreTarget is the directory a restore writes into.
type restoreTarget struct {
	root     string
	keepRoot bool // finishDirs leaves the root's mode and times alone
	// volumeRoots are directories (rel) that are volume roots as the root is: a group's members.
	volumeRoots map[string]bool
}

// path is where the entry rel (slash-separated, under the snapshot's root) goes.
func (t restoreTarget) path(rel string) string {
	return filepath.Join(t.root, filepath.FromSlash(rel))
}

// makeDirs makes the directories (rels in walk order: each after its parent), mode 0700 until
// finishDirs sets their own. A directory there already is kept; a file or symlink in the way
// is replaced, so nothing is written through a link.
func (t restoreTarget) makeDirs(rels []string) error {
	if err := os.MkdirAll(t.root, 0o700); err != nil {
		return err //nolint:wrapcheck // names the path
	}
	for _, rel := range rels[1:] { // rels[0] is the root
		p := t.path(rel)
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, os.ErrExist) {
			var st os.FileInfo
			if st, err = os.Lstat(p); err == nil && !st.IsDir() {
				if err = os.Remove(p); err == nil {
					err = os.Mkdir(p, 0o700)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("create directory %q: %w", rel, err)
		}
	}
	return nil
}

// symlink makes the symlink e at rel, replacing a file or symlink there, with e's owner (where
// the process may) and times.
func (t restoreTarget) symlink(ctx context.Context, rel string, e fs.Symlink) error {
	link, err := e.Readlink(ctx)
	if err != nil {
		return fmt.Errorf("read the symlink's target: %w", err)
	}
	p := t.path(rel)
	err = os.Symlink(link, p)
	if errors.Is(err, os.ErrExist) {
		if err = replaceable(p); err == nil {
			err = os.Symlink(link, p)
		}
	}
	if err != nil {
		return err //nolint:wrapcheck // names the path
	}
	if err := os.Lchown(p, int(e.Owner().UserID), int(e.Owner().GroupID)); err != nil && !isPermission(err) {
		return err //nolint:wrapcheck // names the path
	}
	return setTimes(p, e.ModTime(), unix.AT_SYMLINK_NOFOLLOW)
}

// finishDirs gives the directories their owner, mode and times, deepest first: after their
// contents (which change a directory's times), and each before its parent (whose mode may
// forbid reaching it). The root of the target may be a volume's mount point that a non-root
// mover neither owns nor may change: it keeps its owner, and a refused mode or time is
// ignored; its files are what matters.
func (t restoreTarget) finishDirs(rels []string, entries []fs.Entry) error {
	for i := len(rels) - 1; i >= 0; i-- {
		p, e := t.path(rels[i]), entries[i]
		var err error
		switch {
		case i == 0 && t.keepRoot:
		case i == 0 || t.volumeRoots[rels[i]]:
			err = errors.Join(ignorePermission(os.Chmod(p, e.Mode()&fs.ModBits)), ignorePermission(setTimes(p, e.ModTime(), 0)))
		default:
			err = setDirAttributes(p, e)
		}
		if err != nil {
			return fmt.Errorf("directory %q: %w", rels[i], err)
		}
	}
	return nil
}

func setDirAttributes(p string, e fs.Entry) error {
	if err := os.Lchown(p, int(e.Owner().UserID), int(e.Owner().GroupID)); err != nil && !isPermission(err) {
		return err //nolint:wrapcheck // names the path
	}
	if err := os.Chmod(p, e.Mode()&fs.ModBits); err != nil {
		return err //nolint:wrapcheck // names the path
	}
	return setTimes(p, e.ModTime(), 0)
}

func ignorePermission(err error) error {
	if isPermission(err) {
		return nil
	}
	return err
}

// VerifyStats count what Verify read: the files and symlinks (whose targets are objects too).
type VerifyStats struct {
	Objects int64
	Bytes   int64
}

// Verify reads back every file and symlink of the snapshot, as `kopia snapshot verify
// --verify-files-percent=100` does: each object's chunks must be in the index and in packs the
// bucket lists, and each chunk is fetched, decrypted and checked against its hash. The small
// files are read pack by pack (packorder.go), the rest RestoreParallelism at a time. A file that
// cannot be read does not stop the walk: the contents to blame are collected, and the error is
// then a *DamageError naming them, their packs and the files (Drop drops them from the index).
// An error of S3 stops it.
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
	plan, err := planReads(ctx, r.rep, root, false)
	if err != nil {
		return VerifyStats{}, fmt.Errorf("verify %s: %w", snapshotID, err)
	}
	var objects, bytes atomic.Int64
	damage := &DamageError{}
	var damageMu sync.Mutex
	read := func(ctx context.Context, o planned) error {
		n, err := r.verifyObject(ctx, o.oid(), packs)
		if err == nil {
			objects.Add(1)
			bytes.Add(n)
			return nil
		}
		if ctx.Err() != nil || objectstore.IsNetworkError(err) {
			return fmt.Errorf("%q: %w", plan.rel(o), err)
		}
		damageMu.Lock()
		defer damageMu.Unlock()
		if found := r.blame(ctx, o.oid(), packs, damage, plan.rel(o)); !found {
			return fmt.Errorf("%q: %w", plan.rel(o), err) // damage no content explains: as it is
		}
		return nil
	}
	err = plan.eachByPack(ctx, r.rep, r.packs, read, nil)
	if err == nil {
		err = each(ctx, plan.rest, read)
	}
	if err == nil && len(damage.Contents) > 0 {
		err = damage
	}
	if err != nil {
		return VerifyStats{}, fmt.Errorf("verify %s: %w", snapshotID, err)
	}
	return VerifyStats{Objects: objects.Load(), Bytes: bytes.Load()}, nil
}

// blame adds to damage the contents of the object that are lost (their pack is not in packs)
// or cannot be read, with path, and says whether it found any. The chunk list of a large
// object is a content too.
func (r *Repo) blame(ctx context.Context, oid object.ID, packs map[blob.ID]blob.Metadata, damage *DamageError, path string) bool {
	var cids []content.ID
	for id, ok := oid, true; ok; id, ok = id.IndexObjectID() {
		if cid, _, direct := id.ContentID(); direct {
			cids = append(cids, cid)
		}
	}
	if more, err := r.rep.VerifyObject(ctx, oid); err == nil {
		cids = append(cids, more...)
	}
	dr, direct := r.rep.(repo.DirectRepository)
	found := false
	for _, cid := range cids {
		info, err := r.rep.ContentInfo(ctx, cid)
		if err != nil {
			continue // not in the index: nothing to drop
		}
		if _, ok := packs[info.PackBlobID]; packs != nil && !ok {
			damage.add(info, true, path)
			found = true
			continue
		}
		if direct {
			one := &DamageError{}
			if err := readContent(ctx, dr, info, one); err == nil && len(one.Contents) > 0 {
				damage.add(info, one.Missing, path)
				found = true
			}
		}
	}
	return found
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
