package kopiarepo

import (
	"context"
	"fmt"
	"sort"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/snapshot"
)

// List returns the complete snapshots of every source, oldest first.
func (r *Repo) List(ctx context.Context) ([]SnapshotInfo, error) {
	ctx = r.kopiaContext(ctx)
	ids, err := snapshot.ListSnapshotManifests(ctx, r.rep, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	mans, err := snapshot.LoadSnapshots(ctx, r.rep, ids)
	if err != nil {
		return nil, fmt.Errorf("load snapshots: %w", err)
	}
	infos := make([]SnapshotInfo, 0, len(mans))
	for _, m := range mans {
		if m.IncompleteReason == "" {
			infos = append(infos, snapshotInfo(m))
		}
	}
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].StartTime.Before(infos[j].StartTime) })
	return infos, nil
}

// Delete removes the snapshot. Its data stays in the bucket until maintenance finds it
// unreferenced (see Maintenance).
func (r *Repo) Delete(ctx context.Context, snapshotID string) error {
	ctx = r.kopiaContext(ctx)
	if _, err := r.load(ctx, snapshotID); err != nil {
		return err
	}
	return repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "kopiarepo delete"},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			if err := w.DeleteManifest(ctx, manifest.ID(snapshotID)); err != nil {
				return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
			}
			return nil
		})
}
