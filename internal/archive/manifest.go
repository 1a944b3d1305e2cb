package archive

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// FormatVersion is the manifest format this package writes and reads.
const FormatVersion = 1

// Manifest describes one backup. It is stored as JSON next to its archive and written last:
// a backup exists only if its manifest does, so an upload that failed half-way never passes
// for a backup.
type Manifest struct {
	FormatVersion int    `json:"formatVersion"`
	ID            string `json:"id"`
	Source        struct {
		Namespace string `json:"namespace"`
		PVC       string `json:"pvc"`
		// PVCs are the members of a group backup, each backed up under the directory of its
		// name; empty for the backup of one PVC.
		PVCs []string `json:"pvcs,omitempty"`
	} `json:"source"`
	ScheduledTime  time.Time `json:"scheduledTime"`
	StartTime      time.Time `json:"startTime"`
	CompletionTime time.Time `json:"completionTime"`
	Archive        struct {
		Key         string `json:"key"`
		Compression string `json:"compression"` // "zstd"
		Format      string `json:"format"`      // "tar-pax"
		Bytes       int64  `json:"bytes"`
		SHA256      string `json:"sha256"`
	} `json:"archive"`
	Files     int64 `json:"files"`
	Dirs      int64 `json:"dirs"`
	Symlinks  int64 `json:"symlinks"`
	HardLinks int64 `json:"hardLinks"`
	FIFOs     int64 `json:"fifos,omitempty"`
	// Skipped counts what the volume held and the backup could not: sockets and devices (and,
	// with kopia, FIFOs). Informational: a restore has nothing to compare it with.
	Skipped         int64  `json:"skipped,omitempty"`
	ContentBytes    int64  `json:"contentBytes"`
	OperatorVersion string `json:"operatorVersion,omitempty"`
	// Engine is "kopia" for a backup kept as a snapshot in the PVCBackup's kopia repository
	// (Kopia says which); empty for a tar+zstd archive (Archive says which). Manifests written
	// before kopia existed have no engine: they stay archives.
	Engine string         `json:"engine,omitempty"`
	Kopia  *KopiaSnapshot `json:"kopia,omitempty"`
	// Tree is the top level of an archive backup's volume, each entry with the totals under it
	// (Stats.Top, at most MaxTreeEntries, the largest; TreeMore counts the rest), so that the
	// backup can be listed without reading the archive. Archive backups made before it existed
	// have none (TreeRecorded false). Kopia backups have none: their directory objects say the
	// same.
	Tree         []TreeEntry `json:"tree,omitempty"`
	TreeMore     *TreeMore   `json:"treeMore,omitempty"`
	TreeRecorded bool        `json:"treeRecorded,omitempty"`
}

// TreeEntry is one entry of a backup's tree: a directory with the totals of everything under it,
// or a file, symlink or other entry.
type TreeEntry struct {
	Path  string `json:"path"`            // slash-separated, relative to the volume's root
	Type  string `json:"type"`            // "dir", "file", "symlink" or "other"
	Bytes int64  `json:"bytes"`           // a file's size; a directory's total file size
	Files int64  `json:"files,omitempty"` // a directory's total file count; 1 for a file
}

// TreeMore counts the entries of a tree listing that were left out, and their bytes.
type TreeMore struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// MaxTreeEntries bounds Manifest.Tree: a volume with a million files at its root keeps a
// manifest of a sensible size.
const MaxTreeEntries = 1000

// KopiaSnapshot names the kopia snapshot that holds a backup.
type KopiaSnapshot struct {
	// Repository is the key prefix of the repository in the bucket.
	Repository string `json:"repository"`
	SnapshotID string `json:"snapshotID"`
	// Source is the snapshot's source path (user and host are kopiarepo's ClientUser@ClientHost).
	Source string `json:"source"`
	// UploadedBytes is what the backup added to the repository (new chunks, packed, encrypted).
	UploadedBytes int64 `json:"uploadedBytes"`
}

// NewManifest describes the archive stored at key, whose Write returned s. The caller fills
// in the times and OperatorVersion.
func NewManifest(id, namespace, pvc, key string, s Stats) Manifest {
	var m Manifest
	m.FormatVersion, m.ID = FormatVersion, id
	m.Source.Namespace, m.Source.PVC = namespace, pvc
	m.Archive.Key, m.Archive.Compression, m.Archive.Format = key, "zstd", "tar-pax"
	m.Archive.Bytes, m.Archive.SHA256 = s.ArchiveBytes, s.SHA256
	m.Files, m.Dirs, m.Symlinks, m.HardLinks, m.FIFOs, m.Skipped = s.Files, s.Dirs, s.Symlinks, s.HardLinks, s.FIFOs, s.Skipped
	m.ContentBytes = s.ContentBytes
	return m
}

// ErrMismatch is wrapped by the error of Verify, so callers can tell a damaged or foreign
// archive from a failed download.
var ErrMismatch = errors.New("archive does not match its manifest")

// Verify checks the Stats that Read returned against the manifest. Its error wraps ErrMismatch
// and names the first field that differs; the hash comes first, as any damage shows there.
func (m Manifest) Verify(s Stats) error {
	checks := []struct {
		field     string
		want, got any
	}{
		{"archive.sha256", m.Archive.SHA256, s.SHA256},
		{"archive.bytes", m.Archive.Bytes, s.ArchiveBytes},
		{"files", m.Files, s.Files},
		{"dirs", m.Dirs, s.Dirs},
		{"symlinks", m.Symlinks, s.Symlinks},
		{"hardLinks", m.HardLinks, s.HardLinks},
		{"fifos", m.FIFOs, s.FIFOs},
		{"contentBytes", m.ContentBytes, s.ContentBytes},
	}
	for _, c := range checks {
		if c.want != c.got {
			return fmt.Errorf("%w: %s: manifest has %v, archive has %v", ErrMismatch, c.field, c.want, c.got)
		}
	}
	return nil
}

// LargestFirst sorts tree entries by bytes, largest first, then by path.
func LargestFirst(entries []TreeEntry) {
	slices.SortStableFunc(entries, func(a, b TreeEntry) int {
		if a.Bytes != b.Bytes {
			return cmp.Compare(b.Bytes, a.Bytes)
		}
		return cmp.Compare(a.Path, b.Path)
	})
}

// SetTree records top (Stats of WriteOptions.Top) as the manifest's Tree: the MaxTreeEntries
// largest entries, in path order, and what was left out.
func (m *Manifest) SetTree(top []TreeEntry) {
	kept := slices.Clone(top)
	if len(kept) > MaxTreeEntries {
		LargestFirst(kept)
		more := &TreeMore{Entries: int64(len(kept) - MaxTreeEntries)}
		for _, e := range kept[MaxTreeEntries:] {
			more.Bytes += e.Bytes
		}
		kept, m.TreeMore = kept[:MaxTreeEntries], more
		slices.SortFunc(kept, func(a, b TreeEntry) int { return cmp.Compare(a.Path, b.Path) })
	}
	m.Tree, m.TreeRecorded = kept, true // an empty volume too: recorded, and empty
}
