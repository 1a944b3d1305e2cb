package kopia

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// kopiaBackup is what a kopia backup reports besides its manifest.
type kopiaBackup struct {
	repo             kopiarepo.Info
	repair           string // what the backup repaired first (kopiarepo.HealReport), or ""
	sampledBytes     int64  // what its sampled read of the repository read
	maintenance      string // "", "quick" or "full"
	maintenanceError string
	damage           string // what the run found damaged in the repository (damageMessage)
}

// Backup snapshots job.SourceDir into the PVCBackup's kopia repository (created on the first
// backup), then writes the manifest that makes the snapshot a backup, then deletes the snapshots
// whose manifests are gone and runs the maintenance that is due. Only the snapshot and the
// manifest decide the outcome; the clean-up after them is reported, never fatal.
func (e Engine) Backup(ctx context.Context, s3 engine.S3, job engine.BackupJob) (mover.Result, error) {
	now := e.Now
	if now == nil {
		now = time.Now
	}
	m, kb, err := backup(ctx, s3.Store, s3.Config, e.Options, job, now)
	if err != nil {
		return mover.Result{ID: job.ID}, err
	}
	return result(m, kb), nil
}

// backup is Backup of the repository opts names, its manifest and what it did besides.
func backup(ctx context.Context, store Store, cfg objectstore.Config, opts Options, job engine.BackupJob, now func() time.Time) (archive.Manifest, kopiaBackup, error) {
	start := now()
	var out kopiaBackup
	prefix := opts.Prefix
	// The idle watchdog runs until the repository is closed (the defers run in reverse). A stall
	// cancels the backup (uctx) and ends every S3 call of the repository (w.Stalled, the Guard),
	// closing included: kopia flushes its log blobs there under a context nothing cancels.
	w := engine.WatchRun(ctx, job.Idle())
	defer w.Stop()
	uctx, act := w.Ctx, w.Activity
	opts.guard = kopiarepo.Guard{Abort: w.Stalled, Call: act.Call}
	failed := func(err error, reason mover.Reason, format string, args ...any) error {
		switch {
		case w.HasStalled():
			return mover.Fail(mover.ReasonStorageStalled, "kopia repository %s: nothing moved for %v (S3 frozen or network stalled); the backup was abandoned",
				prefix, w.Idle)
		case ctx.Err() != nil:
			return mover.Fail(mover.ReasonInterrupted, "backup interrupted (%v) after %v", context.Cause(ctx), now().Sub(start).Round(time.Second))
		}
		var f *mover.Error
		if errors.As(err, &f) {
			return err
		}
		return mover.Fail(reason, format+": %w", append(args, err)...)
	}

	// List the volume while the repository opens: the key derivation keeps one core busy.
	ahead := kopiarepo.ReadAhead(job.SourceDir)
	defer ahead.Stop()
	r, err := openRepo(uctx, cfg, opts, false)
	if err != nil {
		return archive.Manifest{}, out, failed(err, mover.ReasonStorageFailed, "open")
	}
	defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to save: the manifest decided

	act.Touch(-1)
	healed, err := r.Heal(uctx, kopiarepo.HealOptions{Now: now(), Progress: act.Touch})
	if err != nil {
		return archive.Manifest{}, out, failed(err, mover.ReasonStorageFailed, "check the kopia repository at %s before the backup", prefix)
	}
	out.sampledBytes = healed.ReadBytes
	fmt.Fprintf(os.Stderr, "mover: read back %d packs (%d bytes) of the kopia repository before the backup\n", healed.ReadPacks, healed.ReadBytes)
	if out.repair = healed.String(); out.repair != "" {
		fmt.Fprintln(os.Stderr, "mover: repaired the kopia repository:", out.repair)
	}

	act.Touch(-1)
	reporter := engine.NewProgressReporter(uctx, store, job.ProgressKey, job.ProgressEvery)
	var last atomic.Pointer[mover.Progress]
	source := job.Namespace + "/" + job.PVC
	snap, err := r.Backup(uctx, job.SourceDir, kopiarepo.BackupOptions{
		Source:      source,
		Description: "okgoes-operator backup " + job.ID,
		Tags:        map[string]string{tagBackup: job.ID, tagManifest: job.ManifestKey},
		ReadAhead:   ahead,
		Progress: func(p kopiarepo.BackupProgress) {
			act.Touch(p.HashedBytes + p.CachedBytes + p.UploadedBytes)
			pr := mover.Progress{EstimatedBytes: p.EstimatedBytes, HashedBytes: p.HashedBytes,
				CachedBytes: p.CachedBytes, UploadedBytes: p.UploadedBytes}
			last.Store(&pr)
			reporter.Report(pr)
		},
	})
	reporter.Stop()
	if err != nil {
		if kopiarepo.IsDamaged(err) && uctx.Err() == nil && !errors.Is(err, kopiarepo.ErrStorage) {
			return archive.Manifest{}, out, repositoryDamaged(ctx, r, store, prefix, job, now, err)
		}
		if backupFailureReason(ctx, err) == mover.ReasonVolumeReadFailed {
			return archive.Manifest{}, out, mover.Fail(mover.ReasonVolumeReadFailed, "read volume %s: %w", job.SourceDir, err)
		}
		return archive.Manifest{}, out, failed(err, mover.ReasonStorageFailed, "kopia backup of %s", job.SourceDir)
	}

	m := archive.Manifest{FormatVersion: archive.FormatVersion, ID: job.ID, Engine: name,
		Files: int64(snap.Files), Dirs: int64(snap.Dirs), Symlinks: int64(snap.Symlinks), ContentBytes: snap.TotalBytes, Skipped: int64(snap.Skipped),
		Kopia: &archive.KopiaSnapshot{Repository: prefix, SnapshotID: snap.ID, Source: source, UploadedBytes: snap.UploadedBytes}}
	m.Source.Namespace, m.Source.PVC = job.Namespace, job.PVC
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), start.UTC(), now().UTC()
	m.OperatorVersion = job.OperatorVersion
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return archive.Manifest{}, out, err
	}
	act.Touch(-1)
	if err := act.Do(func() error { return store.PutBytes(uctx, job.ManifestKey, data, "application/json") }); err != nil {
		return archive.Manifest{}, out, failed(err, mover.ReasonStorageFailed, "write manifest %s", job.ManifestKey)
	}

	// Clean-up, bounded (by MaintenanceTimeout, and by the idle watchdog) and never fatal.
	act.Touch(-1)
	mctx, mcancel := context.WithTimeout(ctx, MaintenanceTimeout)
	defer mcancel()
	defer context.AfterFunc(w.Stalled, mcancel)()
	maintained := mover.Progress{Phase: "maintenance"}
	if p := last.Load(); p != nil {
		maintained = *p
		maintained.Phase = "maintenance"
	}
	stopReports := engine.KeepReporting(engine.NewProgressReporter(mctx, store, job.ProgressKey, job.ProgressEvery), func() mover.Progress { return maintained })
	defer stopReports()
	var problems []error
	health, err := checkRepository(mctx, r, store, prefix, job, now) // a failed record write still sweeps what it listed
	if err != nil {
		problems = append(problems, err)
	}
	if err := sweep(mctx, r, store, health, source, snap.ID); err != nil {
		problems = append(problems, err)
	}
	out.damage = damageMessage(prefix, health)
	out.maintenance, err = r.AutoMaintenance(mctx)
	if err != nil {
		problems = append(problems, err)
	}
	out.repo, err = r.Info(mctx)
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		out.maintenanceError = errors.Join(problems...).Error()
	}
	return m, out, nil
}

// backupFailureReason is the side a failed kopia backup blames, decided here once: S3 when one
// of its calls failed after kopia's retries (kopiarepo.ErrStorage), whatever the backup saw
// next (kopia records the files it could not upload as entries it could not back up); the
// volume when kopia could not read it; S3 otherwise.
func backupFailureReason(ctx context.Context, err error) mover.Reason {
	switch {
	case errors.Is(err, kopiarepo.ErrStorage):
		return mover.ReasonStorageFailed
	case errors.Is(err, kopiarepo.ErrSourceUnreadable) && ctx.Err() == nil:
		return mover.ReasonVolumeReadFailed
	}
	return mover.ReasonStorageFailed
}

// sweep deletes the snapshots of source whose manifests no longer exist, except keep: a backup
// is its manifest, so such a snapshot is a backup the controller pruned or one that never
// became a backup. Only a manifest S3 says is missing counts; any doubt keeps the snapshot.
// The snapshots are those of the run's one listing (checkRepository).
func sweep(ctx context.Context, r *kopiarepo.Repo, store Store, health kopiarepo.Health, source, keep string) error {
	var errs []error
	for _, s := range health.Snapshots {
		key := s.Tags[tagManifest]
		if s.Source != source || s.ID == keep || key == "" {
			continue
		}
		_, err := store.Stat(ctx, key)
		switch {
		case ctx.Err() != nil:
			return errors.Join(append(errs, fmt.Errorf("sweep: %w", context.Cause(ctx)))...)
		case err == nil:
			continue
		case !objectstore.IsNotFound(err):
			errs = append(errs, fmt.Errorf("sweep: stat %s: %w", key, err))
			continue
		}
		if err := r.Delete(ctx, s.ID); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkRepository is the run's one look at the whole repository (kopiarepo.Health: one
// listing of its packs and one of its snapshots), recorded at job.RecordKey for the controller
// (mover.RepositoryRecord). The manifests under the prefix are listed first: the record judges only
// manifests that existed before the repository was listed.
func checkRepository(ctx context.Context, r *kopiarepo.Repo, store Store, repoPrefix string, job engine.BackupJob, now func() time.Time) (kopiarepo.Health, error) {
	var manifests []string
	records := job.RecordKey[:strings.LastIndex(job.RecordKey, "/")+1]
	if job.RecordKey != "" {
		objs, err := store.ListTop(ctx, records)
		if err != nil {
			return kopiarepo.Health{}, fmt.Errorf("check the repository: list the manifests under %s: %w", records, err)
		}
		for _, o := range objs {
			if id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, records), mover.ManifestSuffix); ok && !strings.Contains(id, "/") {
				manifests = append(manifests, id)
			}
		}
	}
	h, err := r.Health(ctx)
	if err != nil {
		return h, fmt.Errorf("check the repository: %w", err)
	}
	if job.RecordKey == "" {
		return h, nil
	}
	rec := mover.RepositoryRecord{Time: now().UTC(), RunID: job.ID, Repository: repoPrefix, Manifests: manifests,
		Snapshots: map[string]mover.RecordedSnapshot{}, Damage: damageMessage(repoPrefix, h)}
	for _, s := range h.Snapshots {
		rec.Snapshots[s.ID] = mover.RecordedSnapshot{Backup: s.Tags[tagBackup], Problem: h.Problems[s.ID]}
	}
	if h.ListError != nil {
		rec.Unlisted = h.ListError.Error()
	}
	rec.UnindexedPacks, rec.UnindexedCount = h.UnindexedPacks[:min(len(h.UnindexedPacks), 20)], len(h.UnindexedPacks)
	data, err := json.Marshal(rec)
	if err != nil {
		return h, err
	}
	if err := store.PutBytes(ctx, job.RecordKey, data, "application/json"); err != nil {
		return h, fmt.Errorf("check the repository: write %s: %w", job.RecordKey, err)
	}
	return h, nil
}

// repairAdvice is what to do about a damaged repository.
const repairAdvice = "put the lost objects back from bucket versioning or a replica if you have them " +
	"(`kopia snapshot verify` with the repository password lists every damaged file); " +
	"the backups that depend on them cannot be restored and are listed in status.brokenBackups"

// damageMessage says what health found damaged in the repository at prefix, which backups
// depend on it and what to do; "" when nothing is.
func damageMessage(prefix string, h kopiarepo.Health) string {
	if !h.Damaged() {
		return ""
	}
	var parts []string
	if n := len(h.LostBlobs); n > 0 {
		var blobs []string
		for _, b := range h.LostBlobs[:min(n, 10)] {
			kind := "file data"
			if b.Metadata {
				kind = "directories and manifests"
			}
			blobs = append(blobs, fmt.Sprintf("%s (%s, %d contents)", b.ID, kind, b.Contents))
		}
		if n > 10 {
			blobs = append(blobs, fmt.Sprintf("and %d more", n-10))
		}
		parts = append(parts, "the index refers to blobs the bucket does not hold: "+strings.Join(blobs, ", "))
	}
	if h.ListError != nil {
		parts = append(parts, fmt.Sprintf("its snapshots cannot be listed (%v): no backup can be restored from it and none can be made", h.ListError))
	}
	if len(h.Problems) > 0 {
		var backups []string
		for _, s := range h.Snapshots {
			if p := h.Problems[s.ID]; p != "" {
				backups = append(backups, fmt.Sprintf("%s (snapshot %s: %s)", s.Tags[tagBackup], s.ID, p))
			}
		}
		parts = append(parts, "backups that depend on lost data: "+strings.Join(backups[:min(len(backups), 10)], "; "))
	}
	msg := fmt.Sprintf("the kopia repository at %s is damaged: %s; %s", prefix, strings.Join(parts, "; "), repairAdvice)
	if len(msg) > 2000 {
		msg = msg[:1997] + "..."
	}
	return msg
}

// repositoryDamaged is the failure of a backup that kopia could not make because the repository
// is damaged (kopiarepo.IsDamaged): the run still looks at the repository and records what it
// found, so that the backups depending on the damage are listed as broken.
func repositoryDamaged(ctx context.Context, r *kopiarepo.Repo, store Store, prefix string, job engine.BackupJob, now func() time.Time, cause error) error {
	cctx, cancel := context.WithTimeout(ctx, MaintenanceTimeout)
	defer cancel()
	h, err := checkRepository(cctx, r, store, prefix, job, now)
	msg := damageMessage(prefix, h)
	if err != nil || msg == "" {
		msg = fmt.Sprintf("the kopia repository at %s is damaged; %s", prefix, repairAdvice)
		if err != nil {
			msg += fmt.Sprintf(" (the repository check failed too: %v)", err)
		}
	}
	return mover.Fail(mover.ReasonRepositoryDamaged, "backup %s was not made: %s (kopia: %w)", job.ID, msg, cause)
}

// result is the Result of a successful kopia backup.
func result(m archive.Manifest, kb kopiaBackup) mover.Result {
	res := mover.Result{ID: m.ID, Bytes: m.Kopia.UploadedBytes, Files: m.Files, Skipped: m.Skipped, SnapshotID: m.Kopia.SnapshotID,
		RepositoryBytes: kb.repo.Bytes, KeyDerivation: kb.repo.KeyDerivation, Maintenance: kb.maintenance, MaintenanceError: kb.maintenanceError,
		Repair: kb.repair, SampledBytes: kb.sampledBytes}
	if t := kb.repo.LastQuickMaintenance; !t.IsZero() {
		res.LastQuickMaintenance = &t
	}
	if t := kb.repo.LastFullMaintenance; !t.IsZero() {
		res.LastFullMaintenance = &t
	}
	res.RepositoryDamage = kb.damage
	if len(res.RepositoryDamage) > 1000 {
		res.RepositoryDamage = res.RepositoryDamage[:1000] + "..."
	}
	if len(res.Repair) > 1000 {
		res.Repair = res.Repair[:1000] + "..."
	}
	if len(res.MaintenanceError) > 1000 {
		res.MaintenanceError = res.MaintenanceError[:1000] + "..."
	}
	return res
}
