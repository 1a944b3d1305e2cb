package kopiarepo

import (
	"context"
	"errors"
	"fmt"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/kopia/kopia/snapshot/snapshotmaintenance"
)

// ErrMaintenanceNotOwned means another kopia client (a person's CLI) owns the maintenance of
// the repository; `kopia maintenance set --owner=okgoes@okgoes-operator` hands it back.
var ErrMaintenanceNotOwned = errors.New("repository maintenance is owned by another client")

// Safety chooses how cautious garbage collection is.
type Safety int

const (
	// SafetyFull is kopia's default (maintenance.SafetyFull), safe while other clients back up
	// to the repository: data unreferenced for less than 24 hours is kept, content is marked
	// deleted only by the second of two full runs at least 4 hours apart, and a pack is removed
	// only 24 hours after it became unused. Space comes back over days of daily full runs.
	SafetyFull Safety = iota
	// SafetyNone (maintenance.SafetyNone) reclaims everything unreferenced in one full run. It
	// is safe only when no other client writes to the repository meanwhile and the store is
	// strongly consistent (MinIO and AWS S3 are): a backup running concurrently can lose data.
	SafetyNone
)

// Maintenance runs quick maintenance (index compaction, removal of unused metadata packs), or,
// with full, full maintenance as well: snapshot garbage collection, rewriting of sparse packs,
// and deletion of unreferenced packs, within the margins of safety.
func (r *Repo) Maintenance(ctx context.Context, full bool, safety Safety) error {
	ctx = r.kopiaContext(ctx)
	mode, params := maintenance.ModeQuick, maintenance.SafetyFull
	if full {
		mode = maintenance.ModeFull
	}
	if safety == SafetyNone {
		params = maintenance.SafetyNone
	}
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return errors.New("maintenance needs a direct repository connection")
	}
	err := repo.DirectWriteSession(ctx, dr, repo.WriteSessionOptions{Purpose: "kopiarepo maintenance"},
		func(ctx context.Context, w repo.DirectRepositoryWriter) error {
			return snapshotmaintenance.Run(ctx, w, mode, false, params)
		})
	var notOwned maintenance.NotOwnedError
	if errors.As(err, &notOwned) {
		return fmt.Errorf("%w: %s", ErrMaintenanceNotOwned, notOwned.Owner)
	}
	if err != nil {
		return fmt.Errorf("%s maintenance: %w", mode, err)
	}
	return nil
}
