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
	passwordRotated  bool   // the backup changed the repository's password to the current one
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
		// A rotation stands even when the backup after it failed: say so, or nobody would know.
		res := mover.Result{ID: job.ID, PasswordRotated: kb.passwordRotated}
		res.RetentionMode, res.RetentionPeriod = retentionResult(kb.repo.Retention)
		return res, err
	}
	return result(m, kb), nil
}

// backupRun is one kopia backup: what its phases share.
type backupRun struct {
	ctx    context.Context // the caller's (ends on SIGTERM); the phases' own is w.Ctx
	w      *engine.Watch
	r      *kopiarepo.Repo
	store  Store
	prefix string
	job    engine.BackupJob
	// compression is kopia's name of the compressor of the new chunks (Options.Compression).
	compression string
	now         func() time.Time
	start       time.Time
	out         kopiaBackup
}

// backup is Backup of the repository opts names: its phases in order, the manifest it wrote and
// what it did besides.
func backup(ctx context.Context, store Store, cfg objectstore.Config, opts Options, job engine.BackupJob, now func() time.Time) (archive.Manifest, kopiaBackup, error) {
	b := &backupRun{ctx: ctx, store: store, prefix: opts.Prefix, job: job, compression: opts.Compression, now: now, start: now()}
	// The idle watchdog runs until the repository is closed (the defers run in reverse). A stall
	// cancels the backup (w.Ctx) and ends every S3 call of the repository (w.Stalled, the Guard),
	// closing included: kopia flushes its log blobs there under a context nothing cancels.
	b.w = engine.WatchRun(ctx, job.Idle())
	defer b.w.Stop()
	opts.guard = kopiarepo.Guard{Abort: b.w.Stalled, Call: b.w.Activity.Call}

	// List the volume while the repository opens: the key derivation keeps one core busy.
	ahead := kopiarepo.ReadAhead(job.SourceDir)
	defer ahead.Stop()
	var err error
	var withPrevious bool
	if b.r, withPrevious, err = openRepo(b.w.Ctx, cfg, opts, false); err != nil {
		return archive.Manifest{}, b.out, b.failed(err, mover.ReasonStorageFailed, "open")
	}
	defer b.r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to save: the manifest decided
	if has := b.r.Splitter(); opts.Splitter != "" && has != opts.Splitter {
		fmt.Fprintf(os.Stderr, "mover: the kopia repository at %s was created with the splitter %s, not %s: it keeps its own "+
			"(a splitter applies only when a repository is created)\n", opts.Prefix, has, opts.Splitter)
	}
	if b.out.repo.Retention, err = checkRetention(b.w.Ctx, b.r, opts); err != nil {
		return archive.Manifest{}, b.out, b.failed(err, mover.ReasonStorageFailed, "retention")
	}
	if withPrevious {
		if err := rotate(b.w.Ctx, b.r, opts); err != nil {
			return archive.Manifest{}, b.out, b.failed(err, mover.ReasonStorageFailed, "rotate")
		}
		b.out.passwordRotated = true
	}

	if err := b.heal(); err != nil {
		return archive.Manifest{}, b.out, err
	}
	snap, last, err := b.snapshot(ahead)
	if err != nil {
		return archive.Manifest{}, b.out, err
	}
	m, err := b.writeManifest(snap)
	if err != nil {
		return archive.Manifest{}, b.out, err
	}
	b.cleanUp(snap.ID, last)
	return m, b.out, nil
}

// failed is the error of a phase that failed with err: StorageStalled when the watchdog ended
// the run, Interrupted when the caller did, err itself when it carries a Reason, or reason.
func (b *backupRun) failed(err error, reason mover.Reason, format string, args ...any) error {
	switch {
	case b.w.HasStalled():
		return mover.Fail(mover.ReasonStorageStalled, "kopia repository %s: nothing moved for %v (S3 frozen or network stalled); the backup was abandoned",
			b.prefix, b.w.Idle)
	case b.ctx.Err() != nil:
		return mover.Fail(mover.ReasonInterrupted, "backup interrupted (%v) after %v", context.Cause(b.ctx), b.now().Sub(b.start).Round(time.Second))
	}
	var f *mover.Error
	if errors.As(err, &f) {
		return err
	}
	return mover.Fail(reason, format+": %w", append(args, err)...)
}

// heal reads back the day's sample of the repository and repairs what it can before the backup
// reads the volume (kopiarepo.Repo.Heal).
func (b *backupRun) heal() error {
	b.w.Activity.Touch(-1)
	healed, err := b.r.Heal(b.w.Ctx, kopiarepo.HealOptions{Now: b.now(), Progress: b.w.Activity.Touch})
	if err != nil {
		return b.failed(err, mover.ReasonStorageFailed, "check the kopia repository at %s before the backup", b.prefix)
	}
	b.out.sampledBytes = healed.ReadBytes
	fmt.Fprintf(os.Stderr, "mover: read back %d packs (%d bytes) of the kopia repository before the backup\n", healed.ReadPacks, healed.ReadBytes)
	if b.out.repair = healed.String(); b.out.repair != "" {
		fmt.Fprintln(os.Stderr, "mover: repaired the kopia repository:", b.out.repair)
	}
	return nil
}

// snapshot reads the volume into a snapshot of the repository, reporting its Progress; it
// returns the snapshot and the last Progress (nil when none was reported).
func (b *backupRun) snapshot(ahead *kopiarepo.Listing) (kopiarepo.SnapshotInfo, *mover.Progress, error) {
	act, job := b.w.Activity, b.job
	act.Touch(-1)
	reporter := engine.NewProgressReporter(b.w.Ctx, b.store, job.ProgressKey, job.ProgressEvery)
	var last atomic.Pointer[mover.Progress]
	snap, err := b.r.Backup(b.w.Ctx, job.SourceDir, kopiarepo.BackupOptions{
		Source:      b.source(),
		Description: "okgoes-operator backup " + job.ID,
		Tags:        map[string]string{tagBackup: job.ID, tagManifest: job.ManifestKey},
		ReadAhead:   ahead,
		Compression: b.compression,
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
		if kopiarepo.IsDamaged(err) && b.w.Ctx.Err() == nil && !errors.Is(err, kopiarepo.ErrStorage) {
			return snap, nil, repositoryDamaged(b.ctx, b.r, b.store, b.prefix, job, b.now, err)
		}
		if backupFailureReason(b.ctx, err) == mover.ReasonVolumeReadFailed {
			return snap, nil, mover.Fail(mover.ReasonVolumeReadFailed, "read volume %s: %w", job.SourceDir, err)
		}
		return snap, nil, b.failed(err, mover.ReasonStorageFailed, "kopia backup of %s", job.SourceDir)
	}
	return snap, last.Load(), nil
}

// source is the snapshot source of the backup: the PVC it reads, or for a group the fixed
// source "<namespace>/group" (a member list that changes keeps the previous snapshot as the
// parent of the next: the repository is the PVCBackup's own).
func (b *backupRun) source() string {
	if len(b.job.PVCs) > 0 {
		return b.job.Namespace + "/group"
	}
	return b.job.Namespace + "/" + b.job.PVC
}

// writeManifest writes the manifest that makes snap a backup.
func (b *backupRun) writeManifest(snap kopiarepo.SnapshotInfo) (archive.Manifest, error) {
	job := b.job
	m := archive.Manifest{FormatVersion: archive.FormatVersion, ID: job.ID, Engine: name,
		Files: int64(snap.Files), Dirs: int64(snap.Dirs), Symlinks: int64(snap.Symlinks), ContentBytes: snap.TotalBytes, Skipped: int64(snap.Skipped),
		Kopia: &archive.KopiaSnapshot{Repository: b.prefix, SnapshotID: snap.ID, Source: b.source(), UploadedBytes: snap.UploadedBytes}}
	m.Source.Namespace, m.Source.PVC, m.Source.PVCs = job.Namespace, job.PVC, job.PVCs
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), b.start.UTC(), b.now().UTC()
	m.OperatorVersion = job.OperatorVersion
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return archive.Manifest{}, err
	}
	b.w.Activity.Touch(-1)
	if err := b.w.Activity.Do(func() error {
		return putManifest(b.w.Ctx, b.store, job.ManifestKey, data, b.out.repo.Retention, b.now())
	}); err != nil {
		return archive.Manifest{}, b.failed(err, mover.ReasonStorageFailed, "write manifest %s", job.ManifestKey)
	}
	return m, nil
}

// cleanUp runs after the backup is made (its manifest written): it records the repository's
// health, deletes the snapshots whose manifests are gone (except keep, the new one) and runs the
// maintenance that is due. Bounded (by MaintenanceTimeout, and by the idle watchdog) and never
// fatal: what fails is reported in out.maintenanceError. last is the backup's last Progress,
// reported on while it runs.
func (b *backupRun) cleanUp(keep string, last *mover.Progress) {
	b.w.Activity.Touch(-1)
	mctx, mcancel := context.WithTimeout(b.ctx, MaintenanceTimeout)
	defer mcancel()
	defer context.AfterFunc(b.w.Stalled, mcancel)()
	maintained := mover.Progress{Phase: "maintenance"}
	if last != nil {
		maintained = *last
		maintained.Phase = "maintenance"
	}
	stopReports := engine.KeepReporting(engine.NewProgressReporter(mctx, b.store, b.job.ProgressKey, b.job.ProgressEvery), func() mover.Progress { return maintained })
	defer stopReports()
	var problems []error
	health, err := checkRepository(mctx, b.r, b.store, b.prefix, b.job, b.now) // a failed record write still sweeps what it listed
	if err != nil {
		problems = append(problems, err)
	}
	if err := sweep(mctx, b.r, b.store, health, b.source(), keep); err != nil {
		problems = append(problems, err)
	}
	b.out.damage = damageMessage(b.prefix, health)
	if err := extendManifestLocks(mctx, b.store, b.job.RecordKey, b.out.repo.Retention, b.now()); err != nil {
		problems = append(problems, err)
	}
	b.out.maintenance, err = b.r.AutoMaintenance(mctx)
	if err != nil {
		problems = append(problems, err)
	}
	b.out.repo, err = b.r.Info(mctx)
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		b.out.maintenanceError = errors.Join(problems...).Error()
	}
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
		RepositoryBytes: kb.repo.Bytes, KeyDerivation: kb.repo.KeyDerivation, Splitter: kb.repo.Splitter, Maintenance: kb.maintenance, MaintenanceError: kb.maintenanceError,
		Repair: kb.repair, SampledBytes: kb.sampledBytes, PasswordRotated: kb.passwordRotated}
	res.RetentionMode, res.RetentionPeriod = retentionResult(kb.repo.Retention)
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

// retentionResult is a repository's object lock retention as a Result reports it.
func retentionResult(r kopiarepo.Retention) (mode, period string) {
	if !r.Enabled() {
		return "", ""
	}
	return r.Mode, r.Period.String()
}
