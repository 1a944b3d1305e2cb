package storage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// backupEntry is one complete backup found in the bucket.
type backupEntry struct {
	ID       string
	Time     time.Time
	Manifest archive.Manifest
}

// brokenEntry is a manifest under the prefix that does not make a usable backup.
type brokenEntry struct {
	ID      string
	Problem string
}

// catalog is what a backup prefix holds: the complete backups (newest first), the broken ones,
// the archives without a manifest (failed runs, half-done prunes) and the progress reports of
// runs. The kopia repository under the prefix is not listed: a kopia backup is its manifest.
type catalog struct {
	Valid    []backupEntry
	Broken   []brokenEntry
	Orphans  []string // archive keys
	Progress []string // progress report keys
}

// idTimeLayout is the time part of a backup id (runID).
const idTimeLayout = "20060102T150405Z"

// parseID returns the time a backup id stands for.
func parseID(id string) (time.Time, error) {
	return time.Parse(idTimeLayout, strings.TrimSuffix(id, "-manual"))
}

// readCatalog lists prefix and reads every manifest in it. A backup counts as complete only when
// its manifest decodes, names its id and archive, and the archive is there with the declared size
// (mover.CheckBackup, the rule the mover applies before it restores). An S3 error is returned as
// is: a manifest that could not be read is never taken for a broken one.
func readCatalog(ctx context.Context, store ObjectStore, prefix string) (catalog, error) {
	var c catalog
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
		if id, ok := strings.CutSuffix(rest, manifestSuffix); ok {
			manifests = append(manifests, id)
		} else if strings.HasSuffix(rest, archiveSuffix) {
			archives[o.Key] = o.Size
		} else if strings.HasSuffix(rest, progressSuffix) {
			c.Progress = append(c.Progress, o.Key)
		}
	}
	for _, id := range manifests {
		akey := prefix + id + archiveSuffix
		size, ok := archives[akey]
		if !ok {
			size = -1
		}
		delete(archives, akey)
		t, err := parseID(id)
		if err != nil {
			c.Broken = append(c.Broken, brokenEntry{id, fmt.Sprintf("%q is not a backup id", id)})
			continue
		}
		m, err := getManifest(ctx, store, prefix+id+manifestSuffix)
		switch {
		case objectstore.IsNotFound(err):
			continue // pruned meanwhile
		case errors.Is(err, mover.ErrBadManifest):
			c.Broken = append(c.Broken, brokenEntry{id, err.Error()})
		case err != nil:
			return c, fmt.Errorf("read manifest of backup %s: %w", id, err)
		default:
			if err := checkBackup(m, id, akey, size); err != nil {
				c.Broken = append(c.Broken, brokenEntry{id, err.Error()})
				continue
			}
			c.Valid = append(c.Valid, backupEntry{ID: id, Time: t, Manifest: m})
		}
	}
	for key := range archives {
		c.Orphans = append(c.Orphans, key)
	}
	sort.Slice(c.Valid, func(i, j int) bool { return c.Valid[i].ID > c.Valid[j].ID })
	sort.Strings(c.Orphans)
	return c, nil
}

// checkBackup is mover.CheckBackup for archives; a kopia backup's manifest must name its
// snapshot (whether the snapshot is readable only the mover, which holds the password, can tell:
// restore proves it before touching the target, verify reads it all).
func checkBackup(m archive.Manifest, id, archiveKey string, archiveSize int64) error {
	if m.Engine != mover.EngineKopia {
		return mover.CheckBackup(m, id, archiveKey, archiveSize)
	}
	switch {
	case m.FormatVersion != archive.FormatVersion:
		return fmt.Errorf("manifest format %d is not %d", m.FormatVersion, archive.FormatVersion)
	case m.ID != id:
		return fmt.Errorf("manifest names backup %q, not %q", m.ID, id)
	case m.Kopia == nil || m.Kopia.SnapshotID == "":
		return fmt.Errorf("kopia manifest names no snapshot")
	}
	return nil
}

// getManifest fetches and decodes one manifest.
func getManifest(ctx context.Context, store ObjectStore, key string) (archive.Manifest, error) {
	body, err := store.Get(ctx, key)
	if err != nil {
		return archive.Manifest{}, err
	}
	defer body.Close()
	return mover.ReadManifest(body)
}
