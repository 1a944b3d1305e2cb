package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot/snapshotfs"
)

// IsDamaged tells whether err means that the repository itself is damaged (S3 answered, but a
// blob or a content the repository refers to is not there), as opposed to an S3 outage, a
// wrong password or an unreadable source. It is the one place kopia's errors for damage are
// recognized. What kopia v0.22.3 gives for each kind (health_test.go, mover/kopia_test.go):
//   - a DamageError (ErrDamaged): what Verify and Heal found lost or not decrypting;
//   - a lost metadata pack (q…) that holds kopia's manifests: kopia alone fails every manifest
//     lookup ("unable to load manifest contents: … BLOB not found", blob.ErrBlobNotFound); this
//     package makes it skip that content (heal.go), so only the manifests it held are missing;
//   - a lost pack (p… or q…) that holds file data or directories: reading them fails with
//     blob.ErrBlobNotFound;
//   - a content no index lists any more fails with content.ErrContentNotFound;
//   - a lost index blob (x…) gives no error at all: the snapshots whose manifests it listed are
//     gone from the list (a restore of one fails ErrSnapshotNotFound), and their packs are in
//     no index (Health.UnindexedPacks). The catalog finds their manifests without snapshots.
func IsDamaged(err error) bool {
	return errors.Is(err, ErrDamaged) || errors.Is(err, blob.ErrBlobNotFound) || errors.Is(err, content.ErrContentNotFound)
}

// LostBlob is a pack the repository's index refers to that the bucket does not hold.
type LostBlob struct {
	ID       string
	Contents int  // contents of the index that lived in it
	Metadata bool // a q… pack: directories and manifests; otherwise file data (p…)
}

// Health is what one look at the whole repository found (Repo.Health).
type Health struct {
	// Snapshots are the complete snapshots, as List returns them; nil when ListError is set.
	Snapshots []SnapshotInfo
	// ListError is why the snapshots could not be listed (a lost manifest pack): then no
	// snapshot of the repository can be restored.
	ListError error
	// Problems names, by snapshot ID, what each damaged snapshot has lost.
	Problems map[string]string
	// LostBlobs are the packs the index refers to and the bucket does not hold, by ID.
	LostBlobs []LostBlob
	// UnindexedPacks are packs in the bucket that no index lists, by ID: a lost index blob
	// leaves them, and so does a run killed before it wrote its index (maintenance removes
	// those). Not damage by themselves; a hint at what a lost index held.
	UnindexedPacks []string
}

// Damaged tells whether the repository is known to be damaged.
func (h Health) Damaged() bool {
	return h.ListError != nil || len(h.LostBlobs) > 0 || len(h.Problems) > 0
}

// Health looks at the whole repository with one listing of its packs, one pass over its index
// (in memory) and one listing of its snapshots: the packs the index refers to that the bucket
// does not hold, and for each snapshot whether its root directory is still in the index.
// Only when packs are lost does it walk the snapshots' directory trees (each directory object
// once, however many snapshots share it; no file data is read) to name the snapshots that
// depend on them. A content an index blob took with it is found only at the root: a lost
// directory or file deeper in the tree is found by a restore or a verify.
//
// The error is S3's or the context's; what is damaged is in Health.
func (r *Repo) Health(ctx context.Context) (Health, error) {
	ctx = r.kopiaContext(ctx)
	var h Health
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return h, errors.New("the health check needs a direct repository connection")
	}
	lost, unindexed, err := scanPacks(ctx, dr)
	if err != nil {
		return h, err
	}
	h.UnindexedPacks = unindexed
	for _, b := range lost {
		h.LostBlobs = append(h.LostBlobs, *b)
	}
	sort.Slice(h.LostBlobs, func(i, j int) bool { return h.LostBlobs[i].ID < h.LostBlobs[j].ID })

	h.Snapshots, err = r.List(ctx)
	switch {
	case err != nil && IsDamaged(err):
		h.Snapshots, h.ListError = nil, err
		return h, nil
	case err != nil:
		return h, err
	}
	deps := &dependencies{rep: r.rep, cr: dr.ContentReader(), lost: lost, seen: map[object.ID]string{}}
	for _, s := range h.Snapshots {
		problem, err := deps.ofSnapshot(ctx, s)
		if err != nil {
			return h, err
		}
		if problem != "" {
			if h.Problems == nil {
				h.Problems = map[string]string{}
			}
			h.Problems[s.ID] = problem
		}
	}
	return h, nil
}

// scanPacks lists the repository's packs and reads its index (in memory): the packs the index
// refers to that are not in the bucket, with the number of live contents each held, and the
// packs in the bucket that no index entry (deleted ones included) refers to.
func scanPacks(ctx context.Context, dr repo.DirectRepository) (map[blob.ID]*LostBlob, []string, error) {
	packs := map[blob.ID]bool{} // in the bucket → referenced by the index
	for _, prefix := range content.PackBlobIDPrefixes {
		err := dr.BlobReader().ListBlobs(ctx, prefix, func(m blob.Metadata) error {
			packs[m.BlobID] = false
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("list the repository's packs: %w", err)
		}
	}
	lost := map[blob.ID]*LostBlob{}
	// With the deleted contents: kopia's pack GC keeps a pack while any entry names it, deleted
	// or not, so a missing pack named by a deleted entry is lost too. Heal drops the contents of
	// a lost pack from the index (marks them deleted), and a snapshot that still names one has
	// lost it all the same. A dropped manifest content is not: no snapshot names one, and what
	// it held is listed or not (a policy Heal wrote again, a snapshot the catalog finds missing).
	err := dr.ContentReader().IterateContents(ctx, content.IterateOptions{IncludeDeleted: true}, func(ci content.Info) error {
		if _, inBucket := packs[ci.PackBlobID]; inBucket {
			packs[ci.PackBlobID] = true
			return nil
		}
		if ci.Deleted && ci.ContentID.Prefix() == manifest.ContentPrefix {
			return nil
		}
		b := lost[ci.PackBlobID]
		if b == nil {
			b = &LostBlob{ID: string(ci.PackBlobID), Metadata: strings.HasPrefix(string(ci.PackBlobID), string(content.PackBlobIDPrefixSpecial))}
			lost[ci.PackBlobID] = b
		}
		b.Contents++
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the repository's index: %w", err)
	}
	var unindexed []string
	for id, referenced := range packs {
		if !referenced {
			unindexed = append(unindexed, string(id))
		}
	}
	sort.Strings(unindexed)
	return lost, unindexed, nil
}

// dependencies finds what a snapshot has lost, remembering each directory object it looked at.
type dependencies struct {
	rep  repo.Repository
	cr   content.Reader
	lost map[blob.ID]*LostBlob
	seen map[object.ID]string // directory object → what its tree lost ("" nothing)
}

// ofSnapshot is what snapshot s has lost: its root directory (always looked at), or, when packs
// are lost, anything in its tree.
func (d *dependencies) ofSnapshot(ctx context.Context, s SnapshotInfo) (string, error) {
	root, err := object.ParseID(s.RootID)
	if err != nil {
		return fmt.Sprintf("its root directory %q is not a kopia object ID", s.RootID), nil
	}
	if problem := d.ofObject(ctx, root); problem != "" || len(d.lost) == 0 {
		return prefixed("its root directory", problem), nil
	}
	problem, err := d.ofTree(ctx, root, "")
	return problem, err
}

// ofTree walks the directory object oid (path rel) and returns the first loss below it.
func (d *dependencies) ofTree(ctx context.Context, oid object.ID, rel string) (string, error) {
	if p, ok := d.seen[oid]; ok {
		return p, nil
	}
	problem := ""
	dir := snapshotfs.DirectoryEntry(d.rep, oid, nil)
	err := fs.IterateEntries(ctx, dir, func(ctx context.Context, e fs.Entry) error {
		h, ok := e.(object.HasObjectID)
		if !ok {
			return nil
		}
		path := strings.TrimPrefix(rel+"/"+e.Name(), "/")
		if p := d.ofObject(ctx, h.ObjectID()); p != "" {
			problem = prefixed(path, p)
			return errStopWalk
		}
		if e.IsDir() {
			p, err := d.ofTree(ctx, h.ObjectID(), path)
			if err != nil || p != "" {
				problem = p
				return errors.Join(err, errStopWalk)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errStopWalk):
		err = nil
	case err != nil && IsDamaged(err):
		problem, err = prefixed(strings.TrimPrefix(rel, "/")+"/", err.Error()), nil
	}
	if err != nil {
		return "", err
	}
	d.seen[oid] = problem
	return problem, nil
}

var errStopWalk = errors.New("stop the walk")

// ofObject is what object oid has lost: a content that is not in the index, or one in a lost
// pack. Only an indirect object's index is read (VerifyObject); no data is.
func (d *dependencies) ofObject(ctx context.Context, oid object.ID) string {
	ids, err := object.VerifyObject(ctx, noPrefetch{d.cr}, oid)
	if err != nil {
		return fmt.Sprintf("object %v cannot be read: %v", oid, err)
	}
	for _, id := range ids {
		ci, err := d.cr.ContentInfo(ctx, id)
		if err != nil {
			return fmt.Sprintf("content %v is not in the index: %v", id, err)
		}
		if b := d.lost[ci.PackBlobID]; b != nil {
			return fmt.Sprintf("content %v was in blob %s, which is lost", id, b.ID)
		}
	}
	return ""
}

func prefixed(what, problem string) string {
	if problem == "" {
		return ""
	}
	return what + ": " + problem
}

// noPrefetch is a content.Reader as object.VerifyObject wants one: it reads one index at a time.
type noPrefetch struct{ content.Reader }

func (noPrefetch) PrefetchContents(context.Context, []content.ID, string) []content.ID { return nil }
