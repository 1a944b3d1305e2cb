package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/kopia/kopia/snapshot/snapshotfs"
	"github.com/kopia/kopia/snapshot/snapshotmaintenance"
)

// Info describes the repository as a whole.
type Info struct {
	Bytes int64 // the size of every blob under the prefix: what the repository costs in the bucket
	Blobs int
	// KeyDerivation is kopia's name of the algorithm the repository derives its key from the
	// password with, as its format blob says (KeyDerivationScrypt, KeyDerivationPBKDF2).
	KeyDerivation string
	// Splitter is kopia's name of the splitter the repository was created with (Repo.Splitter).
	Splitter string
	// Retention is the repository's S3 Object Lock retention (kopia.blobcfg); zero: none.
	Retention Retention
	// LastQuickMaintenance and LastFullMaintenance are when each kind of maintenance last
	// started and succeeded, from the runs kopia's schedule records; zero when none did (a new
	// repository's first quick maintenance is an hour after its creation, its first full one a
	// day after).
	LastQuickMaintenance time.Time
	LastFullMaintenance  time.Time
}

// Info lists the repository's blobs and reads its maintenance schedule.
func (r *Repo) Info(ctx context.Context) (Info, error) {
	ctx = r.kopiaContext(ctx)
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return Info{}, errors.New("info needs a direct repository connection")
	}
	info := Info{KeyDerivation: r.keyDerivation, Splitter: r.splitter}
	var err error
	if info.Retention, err = r.Retention(ctx); err != nil {
		return Info{}, err
	}
	err = dr.BlobReader().ListBlobs(ctx, "", func(m blob.Metadata) error {
		info.Bytes += m.Length
		info.Blobs++
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("list the repository's blobs: %w", err)
	}
	sched, err := maintenance.GetSchedule(ctx, dr)
	if err != nil {
		return Info{}, fmt.Errorf("maintenance schedule: %w", err)
	}
	// From the successful runs kopia records (not from the next times: a new repository's
	// schedule points ahead before any run, populate): every run, quick or full, records its
	// quick tasks; only a full one records snapshot garbage collection.
	for task, runs := range sched.Runs {
		for _, run := range runs {
			if !run.Success {
				continue
			}
			if run.Start.After(info.LastQuickMaintenance) {
				info.LastQuickMaintenance = run.Start
			}
			if task == maintenance.TaskSnapshotGarbageCollection && run.Start.After(info.LastFullMaintenance) {
				info.LastFullMaintenance = run.Start
			}
		}
	}
	return info, nil
}

// AutoMaintenance runs the maintenance that kopia's schedule says is due (by default quick
// every hour, full every 24 hours), with SafetyFull, and says which ran: "", "quick" or "full".
// It is what a client that backs up on a schedule runs after each backup, as `kopia snapshot
// create` does.
func (r *Repo) AutoMaintenance(ctx context.Context) (string, error) {
	ctx = r.kopiaContext(ctx)
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return "", errors.New("maintenance needs a direct repository connection")
	}
	before, err := maintenance.GetSchedule(ctx, dr)
	if err != nil {
		return "", fmt.Errorf("maintenance schedule: %w", err)
	}
	err = repo.DirectWriteSession(ctx, dr, repo.WriteSessionOptions{Purpose: "kopiarepo auto maintenance"},
		func(ctx context.Context, w repo.DirectRepositoryWriter) error {
			return snapshotmaintenance.Run(ctx, w, maintenance.ModeAuto, false, maintenance.SafetyFull)
		})
	var notOwned maintenance.NotOwnedError
	if errors.As(err, &notOwned) {
		return "", fmt.Errorf("%w: %s", ErrMaintenanceNotOwned, notOwned.Owner)
	}
	if err != nil {
		return "", fmt.Errorf("auto maintenance: %w", err)
	}
	after, err := maintenance.GetSchedule(ctx, dr)
	if err != nil {
		return "", fmt.Errorf("maintenance schedule: %w", err)
	}
	switch {
	case !after.NextFullMaintenanceTime.Equal(before.NextFullMaintenanceTime):
		return "full", nil
	case !after.NextQuickMaintenanceTime.Equal(before.NextQuickMaintenanceTime):
		return "quick", nil
	}
	return "", nil
}

// Check proves that the snapshot can be read back without reading its files: its manifest
// loads (decrypted with the password) and its root directory lists. A restore runs it before it
// touches the target.
func (r *Repo) Check(ctx context.Context, snapshotID string) (SnapshotInfo, error) {
	ctx = r.kopiaContext(ctx)
	man, err := r.load(ctx, snapshotID)
	if err != nil {
		return SnapshotInfo{}, err
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("root of snapshot %s: %w", snapshotID, err)
	}
	dir, ok := root.(fs.Directory)
	if !ok {
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: the root is not a directory", snapshotID)
	}
	if err := fs.IterateEntries(ctx, dir, func(context.Context, fs.Entry) error { return nil }); err != nil {
		return SnapshotInfo{}, fmt.Errorf("read the root directory of snapshot %s: %w", snapshotID, err)
	}
	return snapshotInfo(man), nil
}
