package storagekit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// BackupEntry is one complete backup found in the bucket.
type BackupEntry struct {
	ID       string
	Time     time.Time
	Manifest archive.Manifest
}

// BrokenEntry is a manifest under the prefix that does not make a usable backup.
type BrokenEntry struct {
	ID      string
	Problem string
}

// Catalog is what a backup prefix holds: the complete backups (newest first), the broken ones,
// the archives without a manifest (failed runs, half-done prunes) and the progress reports of
// runs. The kopia repository under the prefix is not opened here: a kopia backup is its
// manifest, judged by the RepositoryRecord the last backup run wrote after listing the
// repository (Record, nil when no run has written one).
type Catalog struct {
	Valid    []BackupEntry
	Broken   []BrokenEntry
	Orphans  []string // archive keys
	Progress []string // progress report keys
	Record   *mover.RepositoryRecord
	// Lost are the kopia backups the record judged and found without their snapshot, or with
	// a snapshot that lost data: the repository is damaged (or the manifest was not made by a
	// run), whatever the mover found in the repository itself.
	Lost []string
}

// idTimeLayout is the time part of a backup id (RunID).
const idTimeLayout = "20060102T150405Z"

// parseID returns the time a backup id stands for.
func parseID(id string) (time.Time, error) {
	return time.Parse(idTimeLayout, strings.TrimSuffix(id, "-manual"))
}

// maxClockSkew is how far in the future a backup id may be and still count: ids are the times
// runs stand for, never later than the clock of the controller that started them, but a
// restore in another cluster reads them with another clock.
const maxClockSkew = 15 * time.Minute

// ReadCatalog lists prefix and reads every manifest in it. A backup counts as complete only when
// its manifest decodes, names its id and archive, and the archive is there with the declared size
// (mover.CheckBackup, the rule the mover applies before it restores); a kopia backup only when
// the repository record confirms its snapshot (checkKopia). Engine.check judges each. A backup whose id is later than now
// (a hand-made or copied manifest) is broken: it would hold a retention slot and "latest"
// forever. An S3 error is returned as is: a manifest that could not be read is never taken for
// a broken one.
func ReadCatalog(ctx context.Context, store ObjectStore, prefix string, now time.Time) (Catalog, error) {
	var c Catalog
	objects, err := store.ListTop(ctx, prefix)
	if err != nil {
		return c, fmt.Errorf("list backups: %w", err)
	}
	archives := map[string]int64{}
	var manifests []string
	for _, o := range objects {
		rest := strings.TrimPrefix(o.Key, prefix)
		if strings.Contains(rest, "/") {
			continue // not ours: backups are directly under the prefix
		}
		if id, ok := strings.CutSuffix(rest, ManifestSuffix); ok {
			manifests = append(manifests, id)
		} else if strings.HasSuffix(rest, ArchiveSuffix) {
			archives[o.Key] = o.Size
		} else if strings.HasSuffix(rest, progressSuffix) {
			c.Progress = append(c.Progress, o.Key)
		} else if rest == mover.RepositoryRecordName {
			rec, err := readRecord(ctx, store, o.Key)
			if err != nil {
				return c, err
			}
			c.Record = rec
		}
	}
	for _, id := range manifests {
		akey := prefix + id + ArchiveSuffix
		size, ok := archives[akey]
		if !ok {
			size = -1
		}
		delete(archives, akey)
		t, err := parseID(id)
		if err != nil {
			c.Broken = append(c.Broken, BrokenEntry{id, fmt.Sprintf("%q is not a backup id", id)})
			continue
		}
		if t.After(now.Add(maxClockSkew)) {
			c.Broken = append(c.Broken, BrokenEntry{id, fmt.Sprintf("dated %s, in the future (now %s): not made by a run of this PVCBackup",
				t.Format(time.RFC3339), now.UTC().Format(time.RFC3339))})
			continue
		}
		m, err := GetManifest(ctx, store, prefix+id+ManifestSuffix)
		switch {
		case objectstore.IsNotFound(err):
			continue // pruned meanwhile
		case errors.Is(err, mover.ErrBadManifest):
			c.Broken = append(c.Broken, BrokenEntry{id, err.Error()})
		case err != nil:
			return c, fmt.Errorf("read manifest of backup %s: %w", id, err)
		default:
			if err := ManifestEngine(m).check(m, id, akey, size, c.Record); err != nil {
				c.Broken = append(c.Broken, BrokenEntry{id, err.Error()})
				if errors.Is(err, errSnapshotLost) {
					c.Lost = append(c.Lost, id)
				}
				continue
			}
			c.Valid = append(c.Valid, BackupEntry{ID: id, Time: t, Manifest: m})
		}
	}
	for key := range archives {
		c.Orphans = append(c.Orphans, key)
	}
	sort.Slice(c.Valid, func(i, j int) bool { return c.Valid[i].ID > c.Valid[j].ID })
	sort.Strings(c.Orphans)
	return c, nil
}

// checkKopia judges a kopia backup's manifest by the record of the last run that listed the
// repository. Without any record (no run of this version has listed the repository yet) the
// manifest counts as before, on the strength of naming a snapshot: the restore proves the
// snapshot before it touches the target. With a record, only a manifest the record judged
// counts, and only when the snapshot it names was in the repository, belongs to this backup
// and lost nothing: a manifest written after the listing is not confirmed by it (a stale
// record never vouches for a backup it did not see); the next run judges it.
func checkKopia(m archive.Manifest, rec *mover.RepositoryRecord) error {
	if rec == nil {
		return nil
	}
	id, snap := m.ID, m.Kopia.SnapshotID
	switch s, found := rec.Snapshots[snap]; {
	case rec.RunID == "": // a record that does not decode
		return errors.New(rec.Unlisted)
	case !slices.Contains(rec.Manifests, id):
		return fmt.Errorf("not checked against the kopia repository yet: the manifest is newer than the last listing (run %s at %s); the next backup run checks it",
			rec.RunID, rec.Time.UTC().Format(time.RFC3339))
	case rec.Unlisted != "":
		return fmt.Errorf("the kopia repository's snapshots cannot be read (run %s at %s): %s", rec.RunID, rec.Time.UTC().Format(time.RFC3339), rec.Unlisted)
	case !found:
		return fmt.Errorf("%w: kopia snapshot %s is not in the repository (run %s listed it at %s): the manifest names a snapshot that was deleted, lost with an index blob, or never made",
			errSnapshotLost, snap, rec.RunID, rec.Time.UTC().Format(time.RFC3339))
	case s.Backup != "" && s.Backup != id:
		return fmt.Errorf("kopia snapshot %s belongs to backup %s, not %s", snap, s.Backup, id)
	case s.Problem != "":
		return fmt.Errorf("%w: kopia snapshot %s lost data (run %s at %s): %s", errSnapshotLost, snap, rec.RunID, rec.Time.UTC().Format(time.RFC3339), s.Problem)
	}
	return nil
}

// errSnapshotLost starts the problem of a kopia backup whose snapshot the repository does not
// hold, or holds damaged.
var errSnapshotLost = errors.New("not restorable")

// readRecord fetches the repository record. One that does not decode is an empty record: it
// confirms no backup.
func readRecord(ctx context.Context, store ObjectStore, key string) (*mover.RepositoryRecord, error) {
	body, err := store.Get(ctx, key)
	if objectstore.IsNotFound(err) {
		return nil, nil // deleted meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("read the repository record %s: %w", key, err)
	}
	defer body.Close()
	rec := &mover.RepositoryRecord{}
	data, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the repository record %s: %w", key, err)
	}
	if err := json.Unmarshal(data, rec); err != nil {
		return &mover.RepositoryRecord{Unlisted: fmt.Sprintf("the repository record %s does not decode (%v)", key, err)}, nil
	}
	return rec, nil
}

// GetManifest fetches and decodes one manifest.
func GetManifest(ctx context.Context, store ObjectStore, key string) (archive.Manifest, error) {
	body, err := store.Get(ctx, key)
	if err != nil {
		return archive.Manifest{}, err
	}
	defer body.Close()
	return mover.ReadManifest(body)
}

// GetManifestAt reads the manifest at key as the versioned bucket held it at t (PVCRestore
// spec.source.pointInTime).
func GetManifestAt(ctx context.Context, store ObjectStore, key string, t time.Time) (archive.Manifest, error) {
	body, err := store.GetAt(ctx, key, t)
	if err != nil {
		return archive.Manifest{}, err
	}
	defer body.Close()
	return mover.ReadManifest(body)
}

// WithoutUnverified moves backups whose verification failed (as history records) from the valid
// to the broken ones: a backup known to be damaged never takes a good one's place.
func WithoutUnverified(cat Catalog, history []storagev1.RunStatus) Catalog {
	cat.Valid = slices.DeleteFunc(cat.Valid, func(b BackupEntry) bool {
		for _, h := range history {
			if h.ID == b.ID && h.Verified != nil && !*h.Verified {
				cat.Broken = append(cat.Broken, BrokenEntry{b.ID, "failed verification: " + h.VerificationMessage})
				return true
			}
		}
		return false
	})
	return cat
}
