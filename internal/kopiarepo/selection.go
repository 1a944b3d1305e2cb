package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/snapshot/snapshotfs"
)

// PathsNotFoundError names the paths of a Select that the snapshot does not hold.
type PathsNotFoundError struct {
	SnapshotID string
	Paths      []string
}

func (e *PathsNotFoundError) Error() string {
	return fmt.Sprintf("snapshot %s holds no %s", e.SnapshotID, strings.Join(quoted(e.Paths), " or "))
}

func quoted(ps []string) []string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = fmt.Sprintf("%q", p)
	}
	return q
}

// Selection is some paths of a snapshot, found by Select: the entries at those paths and the
// directories above them. Only the directories on the way were read, no file.
type Selection struct {
	snapshotID string
	root       fs.Directory
	above      []selected // the directories above the paths, each after its parent; no root
	at         []selected // the entries at the paths
	// Files and Bytes are what a restore of the selection writes, from the snapshot's directory
	// summaries (RestoreSelection must write as much); Known is false when a directory of the
	// selection has no summary.
	Files, Bytes int64
	Known        bool
	// TotalFiles and TotalBytes are the whole snapshot's.
	TotalFiles, TotalBytes int64
}

type selected struct {
	rel   string
	entry fs.Entry
}

// Select finds paths (slash-separated, relative to the snapshot's root, none under another)
// in snapshot snapshotID, reading only the directories on the way to each: a
// *PathsNotFoundError names those it does not hold.
func (r *Repo) Select(ctx context.Context, snapshotID string, paths []string) (*Selection, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return nil, err
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return nil, err
	}
	dir, ok := root.(fs.Directory)
	if !ok {
		return nil, fmt.Errorf("snapshot %s is of a single file, not of a volume", snapshotID)
	}
	info := snapshotInfo(man)
	sel := &Selection{snapshotID: snapshotID, root: dir, Known: true, TotalFiles: int64(info.Files), TotalBytes: info.TotalBytes}
	seen := map[string]bool{}
	var missing []string
	for _, p := range paths {
		found, err := sel.find(ctx, p, seen)
		if err != nil {
			return nil, err
		}
		if !found {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return nil, &PathsNotFoundError{SnapshotID: snapshotID, Paths: missing}
	}
	return sel, nil
}

// find walks from the root to p, adding the directories on the way (once: seen) and the entry
// at p; false when the snapshot does not hold p.
func (s *Selection) find(ctx context.Context, p string, seen map[string]bool) (bool, error) {
	var cur fs.Directory = s.root
	var above []selected
	names := strings.Split(p, "/")
	for i, name := range names {
		child, err := cur.Child(ctx, name)
		if errors.Is(err, fs.ErrEntryNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read %q: %w", path.Join(names[:i]...), err)
		}
		rel := path.Join(names[:i+1]...)
		if i == len(names)-1 {
			s.add(ctx, rel, child)
			break
		}
		d, ok := child.(fs.Directory)
		if !ok {
			return false, nil // a file where p needs a directory
		}
		above = append(above, selected{rel, d})
		cur = d
	}
	for _, a := range above {
		if !seen[a.rel] {
			seen[a.rel] = true
			s.above = append(s.above, a)
		}
	}
	return true, nil
}

// add adds the entry e at rel, counting what it holds.
func (s *Selection) add(ctx context.Context, rel string, e fs.Entry) {
	s.at = append(s.at, selected{rel, e})
	switch e := e.(type) {
	case fs.DirectoryWithSummary:
		sum, err := e.Summary(ctx)
		if err != nil || sum == nil {
			s.Known = false
			return
		}
		s.Files += sum.TotalFileCount
		s.Bytes += sum.TotalFileSize
	case fs.Directory:
		s.Known = false
	case fs.File:
		s.Files++
		s.Bytes += e.Size()
	}
}

// Paths are the paths of the selection.
func (s *Selection) Paths() []string {
	ps := make([]string, len(s.at))
	for i, a := range s.at {
		ps[i] = a.rel
	}
	return ps
}

// RestoreSelection writes the selection into targetDir as Restore writes a whole snapshot: the
// entries at its paths with everything under them, and the directories above them (made when
// missing, given the snapshot's owner, mode and times). Nothing else of the target is touched,
// its root included. Only the directories of the selection and the contents of its files are
// read from the repository.
func (r *Repo) RestoreSelection(ctx context.Context, sel *Selection, targetDir string) (RestoreStats, error) {
	ctx = r.kopiaContext(ctx)
	target, err := filepath.Abs(targetDir)
	if err != nil {
		return RestoreStats{}, err
	}
	plan, err := r.planSelection(ctx, sel)
	if err == nil {
		var st RestoreStats
		st, err = r.restorePlan(ctx, plan, target, false)
		if err == nil {
			st.Dirs -= 1 + len(sel.above) // count only the directories at or under the paths
			return st, nil
		}
	}
	if ctx.Err() != nil {
		return RestoreStats{}, ctx.Err()
	}
	return RestoreStats{}, fmt.Errorf("restore %s of %s into %s: %w", strings.Join(quoted(sel.Paths()), ", "), sel.snapshotID, target, err)
}

// planSelection is the readPlan of a selection: the root and the directories above the paths
// first (each after its parent, as makeDirs needs), then the tree under each path.
func (r *Repo) planSelection(ctx context.Context, sel *Selection) (*readPlan, error) {
	p := newReadPlan(true)
	p.dirs, p.dirEntries = []string{""}, []fs.Entry{sel.root}
	index := map[string]int32{"": 0}
	for _, a := range sel.above {
		index[a.rel] = int32(len(p.dirs)) //nolint:gosec // at most 100 paths deep
		p.dirs, p.dirEntries = append(p.dirs, a.rel), append(p.dirEntries, a.entry)
	}
	for _, a := range sel.at {
		var err error
		if d, ok := a.entry.(fs.Directory); ok {
			err = p.walkDir(ctx, r.rep, d, a.rel)
		} else {
			parent := path.Dir(a.rel)
			if parent == "." {
				parent = ""
			}
			err = p.plan(ctx, r.rep, a.entry, index[parent])
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}
