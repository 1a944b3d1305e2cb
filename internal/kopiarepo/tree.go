package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/kopia/kopia/fs"
)

// TreeEntry is one entry of a snapshot's tree as Tree lists it: a directory with the totals of
// everything under it (from its summary in the parent directory object), a file with its size.
type TreeEntry struct {
	Path  string // slash-separated, relative to the snapshot's root
	Type  string // "dir", "file", "symlink" or "other"
	Bytes int64  // a file's size; a directory's total file size
	Files int64  // a directory's total file count; 1 for a file
	// Known is false for a directory without a summary (its Bytes and Files are not known).
	Known bool
}

// ErrNotADirectory: the path given to Tree is a file (or something else) in the snapshot.
var ErrNotADirectory = errors.New("not a directory")

// Tree lists the entries of directory dir of snapshot snapshotID (dir "" is the root) down to
// depth levels (1: dir's own entries). It reads only directory objects: the directories on the
// way to dir and those it lists, never the content of a file. The sizes of a directory's entries
// are the summaries kopia keeps in their parent's directory object. A dir the snapshot lacks is
// a *PathsNotFoundError.
func (r *Repo) Tree(ctx context.Context, snapshotID, dir string, depth int) ([]TreeEntry, error) {
	ctx = r.kopiaContext(ctx)
	start, err := r.directoryAt(ctx, snapshotID, dir)
	if err != nil {
		return nil, err
	}
	var out []TreeEntry
	err = listTree(ctx, start, dir, depth, &out)
	return out, err
}

// directoryAt walks from the root of snapshotID to dir, reading only the directories on the way.
func (r *Repo) directoryAt(ctx context.Context, snapshotID, dir string) (fs.Directory, error) {
	sel, err := r.Select(ctx, snapshotID, nil) // the snapshot's root, no path
	if err != nil {
		return nil, err
	}
	cur := sel.root
	if dir == "" {
		return cur, nil
	}
	for _, name := range strings.Split(dir, "/") {
		child, err := cur.Child(ctx, name)
		if errors.Is(err, fs.ErrEntryNotFound) {
			return nil, &PathsNotFoundError{SnapshotID: snapshotID, Paths: []string{dir}}
		}
		if err != nil {
			return nil, fmt.Errorf("read %q of snapshot %s: %w", dir, snapshotID, err)
		}
		d, ok := child.(fs.Directory)
		if !ok {
			return nil, fmt.Errorf("%q of snapshot %s: %w", dir, snapshotID, ErrNotADirectory)
		}
		cur = d
	}
	return cur, nil
}

// listTree appends the entries of d (at rel) and, while depth allows, of its subdirectories.
func listTree(ctx context.Context, d fs.Directory, rel string, depth int, out *[]TreeEntry) error {
	var subdirs []fs.Directory
	var subrels []string
	err := fs.IterateEntries(ctx, d, func(ctx context.Context, e fs.Entry) error {
		te := TreeEntry{Path: path.Join(rel, e.Name()), Type: "other", Known: true}
		switch e := e.(type) {
		case fs.Directory:
			te.Type, te.Known = "dir", false
			if ds, ok := e.(fs.DirectoryWithSummary); ok {
				if sum, err := ds.Summary(ctx); err == nil && sum != nil {
					te.Bytes, te.Files, te.Known = sum.TotalFileSize, sum.TotalFileCount, true
				}
			}
			subdirs, subrels = append(subdirs, e), append(subrels, te.Path)
		case fs.Symlink:
			te.Type = "symlink"
		case fs.File:
			te.Type, te.Bytes, te.Files = "file", e.Size(), 1
		}
		*out = append(*out, te)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read directory %q: %w", rel, err)
	}
	if depth <= 1 {
		return nil
	}
	for i, sd := range subdirs {
		if err := listTree(ctx, sd, subrels[i], depth-1, out); err != nil {
			return err
		}
	}
	return nil
}
