package kopiarepo

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot/restore"
	"golang.org/x/sync/errgroup"
)

// Small files are restored pack by pack, before kopia's restore walks the tree.
//
// kopia's restore reads every chunk with its own ranged GET of the pack holding it: 200,000
// files of 4 KiB are 200,000 GETs, a restore 20 × slower than restic's, which downloads each
// pack once (docs/benchmarks.md). Fetching a pack whole when its first file is read does not
// help on its own: the backup's parallel uploads spread every directory over all the packs
// written meanwhile (measured: each of 21 packs of a 100,000-file tree was read from the first
// 10 % of the restore to its last), so a cache smaller than the whole snapshot evicts each
// pack long before its last file.
//
// So the files of one small chunk (smallChunkBytes) are listed first, grouped by pack, and
// written pack after pack: each pack is fetched whole into kopia's content cache once (the next
// one is fetched while the current one is written), its files are written by kopia's own
// FilesystemOutput, and kopia's restore then skips them (volumeOutput.done). Directories,
// symlinks and larger files are restored by kopia's restore as before, which also sets the
// directories' modes and times after their contents.

// Bounds of the pack-ordered pass: a file of one chunk up to smallChunkBytes is written in it.
const smallChunkBytes = 256 << 10

// prefetchWholePacks is kopia's prefetch hint for "fetch every pack whole" (content_prefetch.go).
const prefetchWholePacks = "blobs"

// smallFile is a file the pack-ordered pass writes.
type smallFile struct {
	rel  string // slash-separated path under the target, as kopia's restore names it
	file fs.File
	cid  content.ID
}

// restoreSmallFilesByPack writes the small files of the tree under root into out, pack by
// pack, and returns their relative paths. Nothing is written when the repository has no
// content cache to hold a pack in (a bench knob).
func (r *Repo) restoreSmallFilesByPack(ctx context.Context, root fs.Entry, out *restore.FilesystemOutput) (map[string]struct{}, error) {
	if r.contentCacheBytes <= 0 {
		return nil, nil
	}
	byPack := map[blob.ID][]smallFile{}
	var order []blob.ID // packs in the order the walk met them
	if err := collectSmallFiles(ctx, r.rep, root, "", byPack, &order); err != nil {
		return nil, err
	}

	// The fetcher runs at most one pack ahead of the writers.
	fetched := make(chan blob.ID, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(fetched)
		for _, pack := range order {
			// Best effort: a pack that could not be fetched whole (or was evicted) is read by
			// ranges, file by file, and a pack that cannot be read fails the file's write.
			r.rep.PrefetchContents(gctx, []content.ID{byPack[pack][0].cid}, prefetchWholePacks)
			select {
			case fetched <- pack:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	done := map[string]struct{}{}
	g.Go(func() error {
		dirs := &parentDirs{target: out.TargetPath, made: map[string]bool{}}
		for pack := range fetched {
			if err := writeFiles(gctx, out, dirs, byPack[pack]); err != nil {
				return err
			}
			for _, f := range byPack[pack] {
				done[f.rel] = struct{}{}
			}
			delete(byPack, pack)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return done, nil
}

// collectSmallFiles adds the small files under dir (at rel) to byPack.
func collectSmallFiles(ctx context.Context, rep repo.Repository, e fs.Entry, rel string, byPack map[blob.ID][]smallFile, order *[]blob.ID) error {
	switch e := e.(type) {
	case fs.Directory:
		entries, err := fs.GetAllEntries(ctx, e)
		if err != nil {
			return fmt.Errorf("list %q: %w", rel, err)
		}
		for _, child := range entries {
			if err := collectSmallFiles(ctx, rep, child, path.Join(rel, child.Name()), byPack, order); err != nil {
				return err
			}
		}
	case fs.File:
		h, ok := e.(object.HasObjectID)
		if !ok || e.Size() == 0 || e.Size() > smallChunkBytes {
			return nil
		}
		cid, _, direct := h.ObjectID().ContentID()
		if !direct {
			return nil
		}
		info, err := rep.ContentInfo(ctx, cid)
		if err != nil || !strings.HasPrefix(string(info.PackBlobID), string(content.PackBlobIDPrefixRegular)) {
			return nil //nolint:nilerr // kopia's restore reads it, and reports what is wrong with it
		}
		pack := info.PackBlobID
		if _, seen := byPack[pack]; !seen {
			*order = append(*order, pack)
		}
		byPack[pack] = append(byPack[pack], smallFile{rel: rel, file: e, cid: cid})
	}
	return nil
}

// writeFiles writes files with kopia's FilesystemOutput, RestoreParallelism at a time.
func writeFiles(ctx context.Context, out *restore.FilesystemOutput, dirs *parentDirs, files []smallFile) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(restoreParallelism())
	for _, f := range files {
		if err := dirs.ensure(path.Dir(f.rel)); err != nil {
			return err
		}
		g.Go(func() error {
			if err := out.WriteFile(gctx, f.rel, f.file, func(int64) {}); err != nil {
				return fmt.Errorf("restore %q: %w", f.rel, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// parentDirs creates the directories the pass writes into, as kopia's restore creates them
// (mode 0700 until kopia's restore sets their own mode after their contents).
type parentDirs struct {
	target string
	mu     sync.Mutex
	made   map[string]bool
}

func (d *parentDirs) ensure(rel string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.made[rel] {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(d.target, filepath.FromSlash(rel)), 0o700); err != nil {
		return fmt.Errorf("create directory %q: %w", rel, err)
	}
	d.made[rel] = true
	return nil
}
