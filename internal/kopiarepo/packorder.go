package kopiarepo

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync/atomic"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/object"
	"golang.org/x/sync/errgroup"
)

// Small files are read pack by pack, by Restore and by Verify.
//
// kopia reads every chunk with its own ranged GET of the pack holding it: 200,000 files of
// 4 KiB are 200,000 GETs, a restore 20 × slower than restic's, which downloads each pack once
// (docs/benchmarks.md). Fetching a pack whole when its first file is read does not help on its
// own: the backup's parallel uploads spread every directory over all the packs written
// meanwhile (measured: each of 21 packs of a 100,000-file tree was read from the first 10 % of
// the restore to its last), so a cache smaller than the whole snapshot evicts each pack long
// before its last file.
//
// So the files of up to smallChunkBytes whose chunks are in one pack (any file kopia's default
// splitter stored as one chunk, 1 MiB files included; with DefaultSplitter, files of a few
// chunks) are listed first, grouped by pack, and read
// pack after pack: each pack is fetched whole once and held in memory while its files are read
// (packWindow, storage.go; the next one is fetched meanwhile), and kopia reads each file's
// chunk from it, decrypting and checking it as usual. A restore reads the chunks of the larger
// files with their packs the same way, each written at its offset in its file (largefiles.go).
// The other files (a verify's larger files too) and the symlinks are read afterwards,
// RestoreParallelism at a time (restore.go).

// A file of one chunk up to smallChunkBytes is read with its pack: 8 MiB is the largest chunk
// of DYNAMIC-4M-BUZHASH, kopia's default splitter and the one of repositories created before
// DefaultSplitter (whose largest chunk is 2 MiB). Files of 1 MiB restored 1.5 × slower than
// restic's with a ranged GET each; 256 KiB was the bound before.
const smallChunkBytes = 8 << 20

// planned is an object of the snapshot to read: a file, or a symlink (whose target is an object).
// A plan holds one per file of the snapshot, 200,000 for a tree of 200,000 files, so it keeps
// only the entry kopia loaded anyway and the index of its directory's path (readPlan.dirs): its
// path and object ID are computed when it is read (the path and the IDs stored besides took
// about 40 MiB of live heap for such a tree, doubled by the garbage collector's headroom).
type planned struct {
	dir   int32 // index of the directory's path in readPlan.dirs
	entry fs.Entry
}

// readPlan is the snapshot's objects, the small ones grouped by pack.
type readPlan struct {
	dirs []string // slash-separated paths of the directories under the root ("" is the root)
	// dirEntries are the directories of dirs, for their owner, mode and times.
	dirEntries []fs.Entry
	byPack     map[blob.ID][]planned
	order      []blob.ID // packs in the order the walk met them
	// extent is the length of the start of each pack that holds the planned chunks.
	extent map[blob.ID]int64
	// pieces are the chunks of the larger files by pack (largefiles.go), when the plan was made
	// with them (a restore's; nil: such files are in rest).
	pieces map[blob.ID][]piece
	// rest are the other files and the symlinks.
	rest []planned
}

// rel is o's slash-separated path under the root, as kopia's restore names it.
func (p *readPlan) rel(o planned) string { return path.Join(p.dirs[o.dir], o.entry.Name()) }

// oid is o's object ID.
func (o planned) oid() object.ID {
	return o.entry.(object.HasObjectID).ObjectID() //nolint:forcetypeassert // the walk plans objects only
}

// newReadPlan is an empty plan; withPieces plans the chunks of the larger files by pack.
func newReadPlan(withPieces bool) *readPlan {
	p := &readPlan{byPack: map[blob.ID][]planned{}, extent: map[blob.ID]int64{}}
	if withPieces {
		p.pieces = map[blob.ID][]piece{}
	}
	return p
}

// planReads walks the tree under root; withPieces plans the chunks of the larger files by pack
// (a restore's plan: largefiles.go).
func planReads(ctx context.Context, rep repo.Repository, root fs.Entry, withPieces bool) (*readPlan, error) {
	p := newReadPlan(withPieces)
	if d, ok := root.(fs.Directory); ok {
		return p, p.walkDir(ctx, rep, d, "")
	}
	p.dirs, p.dirEntries = []string{""}, []fs.Entry{root}
	return p, p.plan(ctx, rep, root, 0)
}

// acrossDirectories orders the objects of a pack so that consecutive ones are in different
// directories where it can: one of each directory in turn. A pack holds runs of files of one
// directory (the backup uploads a directory's files one after the other), and the parallel
// readers then created their files in the same directory at once, where each create takes
// the directory's lock: in a CPU profile of a restore of 200,000 files of 4 KiB, the creates
// took a third of its CPU. Reading them across directories made that restore 13 % faster with
// 18 % less CPU (two interleaved pairs of runs, loaded machine: 27.3 and 20.6 s against 28.7
// and 26.5 s). eachByPack orders each pack just before reading it.
func acrossDirectories(objs []planned) []planned {
	byDir := map[int32][]planned{}
	var dirs []int32 // in the order they first appear
	for _, o := range objs {
		if _, seen := byDir[o.dir]; !seen {
			dirs = append(dirs, o.dir)
		}
		byDir[o.dir] = append(byDir[o.dir], o)
	}
	if len(dirs) < 2 {
		return objs
	}
	out := objs[:0]
	for len(dirs) > 0 {
		left := dirs[:0]
		for _, d := range dirs {
			out = append(out, byDir[d][0])
			if byDir[d] = byDir[d][1:]; len(byDir[d]) > 0 {
				left = append(left, d)
			}
		}
		dirs = left
	}
	return out
}

func (p *readPlan) walkDir(ctx context.Context, rep repo.Repository, d fs.Directory, rel string) error {
	entries, err := fs.GetAllEntries(ctx, d)
	if err != nil {
		return fmt.Errorf("list %q: %w", rel, err)
	}
	dir := int32(len(p.dirs)) //nolint:gosec // a snapshot of more than 2^31 directories does not fit in memory anyway
	p.dirs = append(p.dirs, rel)
	p.dirEntries = append(p.dirEntries, d)
	for _, child := range entries {
		if sub, ok := child.(fs.Directory); ok {
			err = p.walkDir(ctx, rep, sub, path.Join(rel, child.Name()))
		} else {
			err = p.plan(ctx, rep, child, dir)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// plan adds e, an entry of directory dir, to the plan if it is an object.
func (p *readPlan) plan(ctx context.Context, rep repo.Repository, e fs.Entry, dir int32) error {
	if _, ok := e.(object.HasObjectID); !ok {
		return nil
	}
	o := planned{dir: dir, entry: e}
	// The list of chunks of a file of several is a GET of its own (without a disk cache): read
	// once, for both questions.
	var chunks []object.IndirectObjectEntry
	listed := false
	if _, file := e.(fs.File); file && e.Size() > 0 && (e.Size() <= smallChunkBytes || p.pieces != nil) {
		chunks, listed = chunksOf(ctx, rep, o.oid(), e.Size())
	}
	if pack, end, small := smallObject(ctx, rep, e, chunks); listed && small {
		if _, seen := p.byPack[pack]; !seen {
			p.order = append(p.order, pack)
		}
		p.byPack[pack] = append(p.byPack[pack], o)
		p.extent[pack] = max(p.extent[pack], end)
	} else if !listed || p.pieces == nil || !p.planPieces(ctx, rep, o, chunks) {
		p.rest = append(p.rest, o)
	}
	return nil
}

// smallObject says whether e is a file of at most smallChunkBytes whose chunks are all in one
// data pack, and returns that pack and where its last chunk ends in it. A file of one chunk
// needs the index only. A file of several (with DefaultSplitter, most files over 512 KiB: 40
// files of 1 MiB were 34 ranged GETs instead of 2 pack reads) needs its list of chunks too, the
// small metadata content that opening the file reads anyway; a file whose chunks straddle two
// packs is read with its packs too, by pieces (a restore's plan, largefiles.go), or by ranges
// after the packs. chunks are e's (chunksOf).
func smallObject(ctx context.Context, rep repo.Repository, e fs.Entry, chunks []object.IndirectObjectEntry) (pack blob.ID, end int64, small bool) {
	if e.Size() > smallChunkBytes {
		return "", 0, false
	}
	for i, c := range chunks {
		cid, _, direct := c.Object.ContentID()
		if !direct {
			return "", 0, false
		}
		info, err := rep.ContentInfo(ctx, cid)
		if err != nil || !strings.HasPrefix(string(info.PackBlobID), string(content.PackBlobIDPrefixRegular)) {
			return "", 0, false // reading it reports what is wrong with it
		}
		if i > 0 && info.PackBlobID != pack {
			return "", 0, false
		}
		pack, end = info.PackBlobID, max(end, int64(info.PackOffset)+int64(info.PackedLength))
	}
	return pack, end, len(chunks) > 0
}

// chunksOf is the chunks of oid, an object of size bytes: oid itself when it is one chunk, else
// the entries of its index (kopia reads an index of indexes as one index).
func chunksOf(ctx context.Context, rep repo.Repository, oid object.ID, size int64) ([]object.IndirectObjectEntry, bool) {
	index, indirect := oid.IndexObjectID()
	if !indirect {
		return []object.IndirectObjectEntry{{Start: 0, Length: size, Object: oid}}, true
	}
	dr, ok := rep.(repo.DirectRepository)
	if !ok {
		return nil, false
	}
	entries, err := object.LoadIndexObject(ctx, noPrefetch{dr.ContentReader()}, index)
	if err != nil {
		return nil, false // reading the file reports it
	}
	return entries, true
}

// packsHeld bounds the packs eachByPack holds in memory: one being read (its last objects, and
// the first of the next), one being fetched: about 40 MiB with kopia's 20 MiB packs. Three
// restored 1 GiB of 1 MiB files no faster (9.6–9.9 s vs 9.3–9.5 s, one run each, loaded) and
// held 20 MiB more, which the collector's headroom made 60–80 MiB of RSS (docs/benchmarks.md).
const packsHeld = 2

// eachByPack calls fn for the small objects, pack after pack, RestoreParallelism at a time. The
// start of each pack that holds their chunks is fetched with one GET and held in memory until
// its last object is read (best effort: a pack that could not be fetched is read by ranges,
// which report what is wrong with it), while the next packs are fetched (packsHeld). No
// barrier between packs: the readers start on the next pack while the last objects of one are
// still read (with 1 MiB files, about 20 a pack, waiting for each pack's last reader idled a
// fifth of them).
//
// The pieces of the larger files (when planned) are read with their packs the same way, by
// writePiece.
func (p *readPlan) eachByPack(ctx context.Context, rep repo.Repository, w *packWindow, fn func(context.Context, planned) error,
	writePiece func(context.Context, piece) error,
) error {
	dr, direct := rep.(repo.DirectRepository)
	slots := make(chan struct{}, packsHeld)
	release := func(pack blob.ID) {
		w.release(pack)
		<-slots
	}
	fetched := make(chan blob.ID)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(fetched)
		for _, pack := range p.order {
			select {
			case slots <- struct{}{}:
			case <-gctx.Done():
				return gctx.Err()
			}
			if direct {
				_ = w.hold(gctx, dr.BlobReader(), pack, p.extent[pack]) //nolint:errcheck // best effort, see above
			}
			select {
			case fetched <- pack:
			case <-gctx.Done():
				release(pack)
				return gctx.Err()
			}
		}
		return nil
	})
	g.Go(func() error {
		readers, rctx := errgroup.WithContext(gctx)
		readers.SetLimit(restoreParallelism())
		for pack := range fetched {
			if rctx.Err() != nil {
				break // a reader failed: fetch and read no more
			}
			objs, pieces := acrossDirectories(p.byPack[pack]), p.pieces[pack]
			left := atomic.Int64{}
			left.Store(int64(len(objs) + len(pieces)))
			read := func(fn func() error) {
				readers.Go(func() error {
					defer func() {
						if left.Add(-1) == 0 {
							release(pack)
						}
					}()
					if err := rctx.Err(); err != nil {
						return err
					}
					return fn()
				})
			}
			for _, o := range objs {
				read(func() error { return fn(rctx, o) })
			}
			for _, pc := range pieces {
				read(func() error { return writePiece(rctx, pc) })
			}
		}
		return readers.Wait()
	})
	return g.Wait()
}

// each calls fn for every object, RestoreParallelism at a time.
func each(ctx context.Context, objs []planned, fn func(context.Context, planned) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(restoreParallelism())
	for _, o := range objs {
		g.Go(func() error { return fn(gctx, o) })
	}
	return g.Wait()
}
