package mover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Reasons of the kopia engine only.
const (
	// ReasonRepositoryPasswordWrong: the repository exists and the password does not open it.
	ReasonRepositoryPasswordWrong Reason = "RepositoryPasswordWrong"
	// ReasonNotARepository: the repository's prefix holds objects that are not a kopia repository.
	ReasonNotARepository Reason = "NotARepository"
)

// MaintenanceTimeout bounds the repository maintenance that follows a kopia backup. The backup
// is complete (its manifest written) before maintenance starts, so a maintenance that runs out
// of time costs only space, which the next run's maintenance picks up again.
const MaintenanceTimeout = 30 * time.Minute

// Tags of a snapshot the mover makes: the backup it belongs to and that backup's manifest. A
// snapshot whose manifest is gone (pruned by the controller's retention, or never written
// because the run failed after the upload) is deleted by the next backup (sweep).
const (
	tagBackup   = "backup"
	tagManifest = "manifest"
)

// KopiaStore is what the kopia engine needs from S3 besides the repository itself: the
// manifests and the progress report.
type KopiaStore interface {
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (objectstore.ObjectInfo, error)
	ListTop(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error)
}

// KopiaOptions say where a PVCBackup's kopia repository is and how to open it.
type KopiaOptions struct {
	Prefix          string // key prefix of the repository in the bucket
	Password        string
	CacheDir        string
	CacheLimitBytes int64
	// KeyDerivation is kopia's name of the key derivation of a repository the backup creates
	// (kopiarepo.KeyDerivationScrypt or KeyDerivationPBKDF2); empty: kopia's default.
	KeyDerivation string

	guard kopiarepo.Guard // the idle watchdog of a backup over the repository's S3 calls
}

// kopiaBackup is what a kopia backup reports besides its manifest.
type kopiaBackup struct {
	repo             kopiarepo.Info
	repair           string // what the backup repaired first (kopiarepo.HealReport), or ""
	sampledBytes     int64  // what its sampled read of the repository read
	maintenance      string // "", "quick" or "full"
	maintenanceError string
	damage           string // what the run found damaged in the repository (damageMessage)
}

// openRepo opens the repository of opts in the bucket of cfg, with the mover's Reasons on
// failure. A connection for reading (restore, verify) never creates a repository, and caches
// nothing on disk: it reads every chunk once.
func openRepo(ctx context.Context, cfg objectstore.Config, opts KopiaOptions, forReading bool) (*kopiarepo.Repo, error) {
	r, err := kopiarepo.Open(ctx, kopiarepo.S3Config{Config: cfg, Prefix: opts.Prefix}, opts.Password,
		kopiarepo.Options{CacheDir: opts.CacheDir, CacheLimitBytes: opts.CacheLimitBytes,
			NoCreate: forReading, NoDiskCache: forReading, KeyDerivation: opts.KeyDerivation, Guard: opts.guard})
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, kopiarepo.ErrWrongPassword):
		return nil, fail(ReasonRepositoryPasswordWrong, "the repository password does not open the kopia repository at %s: "+
			"the credentials Secret holds another password than the one the repository was created with", opts.Prefix)
	case errors.Is(err, kopiarepo.ErrNotARepository):
		return nil, fail(ReasonNotARepository, "%s holds objects that are not a kopia repository: the operator neither uses nor overwrites them", opts.Prefix)
	case errors.Is(err, kopiarepo.ErrNoRepository):
		return nil, fail(ReasonBackupNotFound, "there is no kopia repository at %s", opts.Prefix)
	case kopiarepo.IsDamaged(err):
		return nil, fail(ReasonRepositoryDamaged, "the kopia repository at %s is damaged, it cannot be opened: %w; %s", opts.Prefix, err, repairAdvice)
	}
	return nil, fail(ReasonStorageFailed, "open the kopia repository at %s: %w", opts.Prefix, err)
}

// BackupKopia snapshots job.SourceDir into the PVCBackup's kopia repository (created on the
// first backup), then writes the manifest that makes the snapshot a backup, then deletes the
// snapshots whose manifests are gone and runs the maintenance that is due. Only the snapshot and
// the manifest decide the outcome; the clean-up after them is reported, never fatal.
func BackupKopia(ctx context.Context, store KopiaStore, cfg objectstore.Config, job BackupJob, now func() time.Time) (archive.Manifest, kopiaBackup, error) {
	start := now()
	var out kopiaBackup
	idle := job.idleTimeout()
	// The idle watchdog runs until the repository is closed (the defers run in reverse). A stall
	// cancels the backup (uctx) and ends every S3 call of the repository (stalled, the Guard),
	// closing included: kopia flushes its log blobs there under a context nothing cancels.
	watching, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	stalled, stall := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stall(nil)
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	act := watchActivity(watching, idle, func() { cancel(errStalled); stall(errStalled) })
	job.Kopia.guard = kopiarepo.Guard{Abort: stalled, Call: act.call}
	failed := func(err error, reason Reason, format string, args ...any) error {
		switch {
		case context.Cause(uctx) == errStalled:
			return fail(ReasonStorageStalled, "kopia repository %s: nothing moved for %v (S3 frozen or network stalled); the backup was abandoned",
				job.Kopia.Prefix, idle)
		case ctx.Err() != nil:
			return fail(ReasonInterrupted, "backup interrupted (%v) after %v", context.Cause(ctx), now().Sub(start).Round(time.Second))
		}
		var f *failure
		if errors.As(err, &f) {
			return err
		}
		return fail(reason, format+": %w", append(args, err)...)
	}

	// List the volume while the repository opens: the key derivation keeps one core busy.
	ahead := kopiarepo.ReadAhead(job.SourceDir)
	defer ahead.Stop()
	r, err := openRepo(uctx, cfg, job.Kopia, false)
	if err != nil {
		return archive.Manifest{}, out, failed(err, ReasonStorageFailed, "open")
	}
	defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to save: the manifest decided

	act.touch(-1)
	healed, err := r.Heal(uctx, kopiarepo.HealOptions{Now: now(), Progress: act.touch})
	if err != nil {
		return archive.Manifest{}, out, failed(err, ReasonStorageFailed, "check the kopia repository at %s before the backup", job.Kopia.Prefix)
	}
	out.sampledBytes = healed.ReadBytes
	fmt.Fprintf(os.Stderr, "mover: read back %d packs (%d bytes) of the kopia repository before the backup\n", healed.ReadPacks, healed.ReadBytes)
	if out.repair = healed.String(); out.repair != "" {
		fmt.Fprintln(os.Stderr, "mover: repaired the kopia repository:", out.repair)
	}

	act.touch(-1)
	reporter := newProgressReporter(uctx, store, job.ProgressKey, job.ProgressEvery)
	var last atomic.Pointer[Progress]
	source := job.Namespace + "/" + job.PVC
	snap, err := r.Backup(uctx, job.SourceDir, kopiarepo.BackupOptions{
		Source:      source,
		Description: "okgoes-operator backup " + job.ID,
		Tags:        map[string]string{tagBackup: job.ID, tagManifest: job.ManifestKey},
		ReadAhead:   ahead,
		Progress: func(p kopiarepo.BackupProgress) {
			act.touch(p.HashedBytes + p.CachedBytes + p.UploadedBytes)
			pr := Progress{EstimatedBytes: p.EstimatedBytes, HashedBytes: p.HashedBytes,
				CachedBytes: p.CachedBytes, UploadedBytes: p.UploadedBytes}
			last.Store(&pr)
			reporter.report(pr)
		},
	})
	reporter.stop()
	if err != nil {
		if kopiarepo.IsDamaged(err) && uctx.Err() == nil && !errors.Is(err, kopiarepo.ErrStorage) {
			return archive.Manifest{}, out, repositoryDamaged(ctx, r, store, job, now, err)
		}
		if backupFailureReason(ctx, err) == ReasonVolumeReadFailed {
			return archive.Manifest{}, out, fail(ReasonVolumeReadFailed, "read volume %s: %w", job.SourceDir, err)
		}
		return archive.Manifest{}, out, failed(err, ReasonStorageFailed, "kopia backup of %s", job.SourceDir)
	}

	m := archive.Manifest{FormatVersion: archive.FormatVersion, ID: job.ID, Engine: EngineKopia,
		Files: int64(snap.Files), Dirs: int64(snap.Dirs), Symlinks: int64(snap.Symlinks), ContentBytes: snap.TotalBytes, Skipped: int64(snap.Skipped),
		Kopia: &archive.KopiaSnapshot{Repository: job.Kopia.Prefix, SnapshotID: snap.ID, Source: source, UploadedBytes: snap.UploadedBytes}}
	m.Source.Namespace, m.Source.PVC = job.Namespace, job.PVC
	m.ScheduledTime, m.StartTime, m.CompletionTime = job.ScheduledTime.UTC(), start.UTC(), now().UTC()
	m.OperatorVersion = job.OperatorVersion
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return archive.Manifest{}, out, err
	}
	act.touch(-1)
	if err := act.do(func() error { return store.PutBytes(uctx, job.ManifestKey, data, "application/json") }); err != nil {
		return archive.Manifest{}, out, failed(err, ReasonStorageFailed, "write manifest %s", job.ManifestKey)
	}

	// Clean-up, bounded (by MaintenanceTimeout, and by the idle watchdog) and never fatal.
	act.touch(-1)
	mctx, mcancel := context.WithTimeout(ctx, MaintenanceTimeout)
	defer mcancel()
	defer context.AfterFunc(stalled, mcancel)()
	maintained := Progress{Phase: "maintenance"}
	if p := last.Load(); p != nil {
		maintained = *p
		maintained.Phase = "maintenance"
	}
	stopReports := keepReporting(newProgressReporter(mctx, store, job.ProgressKey, job.ProgressEvery), func() Progress { return maintained })
	defer stopReports()
	var problems []error
	health, err := checkRepository(mctx, r, store, job, now) // a failed record write still sweeps what it listed
	if err != nil {
		problems = append(problems, err)
	}
	if err := sweep(mctx, r, store, health, source, snap.ID); err != nil {
		problems = append(problems, err)
	}
	out.damage = damageMessage(job.Kopia.Prefix, health)
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
func backupFailureReason(ctx context.Context, err error) Reason {
	switch {
	case errors.Is(err, kopiarepo.ErrStorage):
		return ReasonStorageFailed
	case errors.Is(err, kopiarepo.ErrSourceUnreadable) && ctx.Err() == nil:
		return ReasonVolumeReadFailed
	}
	return ReasonStorageFailed
}

// sweep deletes the snapshots of source whose manifests no longer exist, except keep: a backup
// is its manifest, so such a snapshot is a backup the controller pruned or one that never
// became a backup. Only a manifest S3 says is missing counts; any doubt keeps the snapshot.
// The snapshots are those of the run's one listing (checkRepository).
func sweep(ctx context.Context, r *kopiarepo.Repo, store KopiaStore, health kopiarepo.Health, source, keep string) error {
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
// (RepositoryRecord). The manifests under the prefix are listed first: the record judges only
// manifests that existed before the repository was listed.
func checkRepository(ctx context.Context, r *kopiarepo.Repo, store KopiaStore, job BackupJob, now func() time.Time) (kopiarepo.Health, error) {
	var manifests []string
	prefix := job.RecordKey[:strings.LastIndex(job.RecordKey, "/")+1]
	if job.RecordKey != "" {
		objs, err := store.ListTop(ctx, prefix)
		if err != nil {
			return kopiarepo.Health{}, fmt.Errorf("check the repository: list the manifests under %s: %w", prefix, err)
		}
		for _, o := range objs {
			if id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ManifestSuffix); ok && !strings.Contains(id, "/") {
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
	rec := RepositoryRecord{Time: now().UTC(), RunID: job.ID, Repository: job.Kopia.Prefix, Manifests: manifests,
		Snapshots: map[string]RecordedSnapshot{}, Damage: damageMessage(job.Kopia.Prefix, h)}
	for _, s := range h.Snapshots {
		rec.Snapshots[s.ID] = RecordedSnapshot{Backup: s.Tags[tagBackup], Problem: h.Problems[s.ID]}
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
func repositoryDamaged(ctx context.Context, r *kopiarepo.Repo, store KopiaStore, job BackupJob, now func() time.Time, cause error) error {
	cctx, cancel := context.WithTimeout(ctx, MaintenanceTimeout)
	defer cancel()
	h, err := checkRepository(cctx, r, store, job, now)
	msg := damageMessage(job.Kopia.Prefix, h)
	if err != nil || msg == "" {
		msg = fmt.Sprintf("the kopia repository at %s is damaged; %s", job.Kopia.Prefix, repairAdvice)
		if err != nil {
			msg += fmt.Sprintf(" (the repository check failed too: %v)", err)
		}
	}
	return fail(ReasonRepositoryDamaged, "backup %s was not made: %s (kopia: %w)", job.ID, msg, cause)
}

// activity is the idle watchdog of a backup. It watches the S3 calls in flight (call, do): S3
// is stalled when a call is in flight and nothing moved for the idle timeout. What moves: the
// archive engine touches it for every byte sent to S3; kopia talks to S3 itself, so for it the
// mover watches the progress kopia reports and every S3 call of the repository that succeeds.
// Work without an S3 call in flight (reading the volume, hashing) is never a stall.
type activity struct {
	last     atomic.Int64 // unix nanoseconds of the last change
	count    atomic.Int64
	inFlight atomic.Int64 // S3 calls
}

// watchActivity calls onStall, once, when an S3 call was in flight and touch saw no change for
// idle. It stops when ctx ends.
func watchActivity(ctx context.Context, idle time.Duration, onStall func()) *activity {
	a := &activity{}
	a.last.Store(time.Now().UnixNano())
	tick := min(idle/4, time.Second)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if a.inFlight.Load() > 0 && time.Since(time.Unix(0, a.last.Load())) > idle {
					onStall()
					return
				}
			}
		}
	}()
	return a
}

// call records an S3 call in flight until the returned function is called with its error; one
// that succeeded is progress.
func (a *activity) call() func(error) {
	if a.inFlight.Add(1) == 1 {
		a.touch(-1) // the idle time counts from the first call in flight
	}
	return func(err error) {
		if err == nil {
			a.touch(-1)
		}
		a.inFlight.Add(-1)
	}
}

// do runs the S3 call f as a call in flight.
func (a *activity) do(f func() error) error {
	done := a.call()
	err := f()
	done(err)
	return err
}

// touch records progress: a total that changed since the last call, or -1 (a new phase).
func (a *activity) touch(total int64) {
	if total < 0 || a.count.Swap(total) != total {
		a.last.Store(time.Now().UnixNano())
	}
}

// progressReporter writes the Progress of a running backup to S3, at most once per interval,
// from its own goroutine: a slow S3 never slows the backup, and a failed write is only skipped.
type progressReporter struct {
	mu       sync.Mutex
	latest   *Progress
	stopping atomic.Bool
	wake     chan struct{}
	done     chan struct{}
}

func newProgressReporter(ctx context.Context, store interface {
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
}, key string, every time.Duration) *progressReporter {
	p := &progressReporter{wake: make(chan struct{}, 1), done: make(chan struct{})}
	if key == "" || store == nil {
		close(p.done)
		return p
	}
	if every <= 0 {
		every = ProgressEvery
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			case <-t.C:
			}
			p.mu.Lock()
			latest := p.latest
			p.latest = nil
			p.mu.Unlock()
			if latest != nil {
				data, _ := json.Marshal(latest)
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := store.PutBytes(wctx, key, data, "application/json"); err != nil {
					fmt.Fprintln(os.Stderr, "mover: progress report:", err)
				}
				cancel()
			}
			if p.stopping.Load() {
				return
			}
		}
	}()
	return p
}

// report keeps pr as the latest Progress; the goroutine writes it on its next turn.
func (p *progressReporter) report(pr Progress) {
	pr.Time = time.Now().UTC()
	p.mu.Lock()
	p.latest = &pr
	p.mu.Unlock()
}

// stop ends the reporter once it has written what it holds.
func (p *progressReporter) stop() {
	p.stopping.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.done
}

// readKopiaManifest fetches the manifest of a kopia backup and checks that it names a snapshot.
func readKopiaManifest(ctx context.Context, store KopiaStore, key string) (archive.Manifest, error) {
	body, err := store.Get(ctx, key)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return archive.Manifest{}, fail(ReasonBackupNotFound, "manifest %s does not exist: the backup is incomplete or was pruned", key)
		}
		return archive.Manifest{}, fail(ReasonStorageFailed, "read manifest %s: %w", key, err)
	}
	m, err := ReadManifest(body)
	body.Close()
	switch {
	case errors.Is(err, ErrBadManifest):
		return m, fail(ReasonVerificationFailed, "manifest %s: %w", key, err)
	case err != nil:
		return m, fail(ReasonStorageFailed, "read manifest %s: %w", key, err)
	case m.FormatVersion != archive.FormatVersion:
		return m, fail(ReasonVerificationFailed, "manifest %s: format %d is not %d", key, m.FormatVersion, archive.FormatVersion)
	case m.Engine != EngineKopia || m.Kopia == nil || m.Kopia.SnapshotID == "":
		return m, fail(ReasonVerificationFailed, "manifest %s does not describe a kopia snapshot", key)
	}
	return m, nil
}

// openSnapshot opens the repository the manifest names (opts.Prefix when it names none) and
// proves the snapshot readable and matching the manifest, reading no file.
func openSnapshot(ctx context.Context, cfg objectstore.Config, opts KopiaOptions, m archive.Manifest) (*kopiarepo.Repo, error) {
	if m.Kopia.Repository != "" {
		opts.Prefix = m.Kopia.Repository
	}
	r, err := openRepo(ctx, cfg, opts, true)
	if err != nil {
		return nil, err
	}
	id := m.Kopia.SnapshotID
	info, err := r.Check(ctx, id)
	switch {
	case errors.Is(err, kopiarepo.ErrSnapshotNotFound):
		err = fail(ReasonBackupNotFound, "backup %s: kopia snapshot %s is not in the repository at %s", m.ID, id, opts.Prefix)
	case err != nil && ctx.Err() != nil:
		err = fail(ReasonInterrupted, "interrupted: %w", err)
	case err != nil && objectstore.IsNetworkError(err):
		err = fail(ReasonStorageFailed, "backup %s: %w", m.ID, err)
	case err != nil:
		err = fail(ReasonVerificationFailed, "backup %s: kopia snapshot %s cannot be read: %w", m.ID, id, err)
	case int64(info.Files) != m.Files || info.TotalBytes != m.ContentBytes:
		err = fail(ReasonVerificationFailed, "backup %s: kopia snapshot %s holds %d files (%d bytes), its manifest says %d (%d bytes)",
			m.ID, id, info.Files, info.TotalBytes, m.Files, m.ContentBytes)
	}
	if err != nil {
		r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the error above says what matters
		return nil, err
	}
	return r, nil
}

// RestoreKopia restores the kopia backup whose manifest is job.ManifestKey into job.TargetDir.
// As with an archive, nothing in the target is touched before the backup proved readable (the
// manifest, the repository opened with the password, the snapshot and its root directory
// decrypted and matching the manifest). Every chunk is checked against its hash as it is read,
// and the restored counts against the manifest.
func RestoreKopia(ctx context.Context, store KopiaStore, cfg objectstore.Config, job RestoreJob, opts KopiaOptions) (archive.Manifest, kopiarepo.RestoreStats, error) {
	var st kopiarepo.RestoreStats
	prepared := false
	m, err := readKopiaManifest(ctx, store, job.ManifestKey)
	if err == nil {
		var r *kopiarepo.Repo
		if r, err = openSnapshot(ctx, cfg, opts, m); err == nil {
			defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
			err = proveBeforeClean(ctx, r, m, job)
			if err == nil {
				err = prepareTarget(job.TargetDir, job.Overwrite)
			}
			if err == nil {
				prepared = true
				st, err = r.Restore(ctx, m.Kopia.SnapshotID, job.TargetDir)
				err = restoreError(ctx, m, st, err)
			}
		}
	}
	if err != nil {
		err = &failure{reasonOf(err, ReasonStorageFailed), fmt.Errorf("%w; %s", err, targetState(prepared, job.Overwrite))}
	}
	return m, st, err
}

// proveBeforeClean reads the whole snapshot back before a Clean restore empties a target that
// holds data (Repo.Verify: every chunk fetched, decrypted and checked against its hash): a backup
// that cannot be read in full must not cost the user the data it would replace. It costs one
// more read of the backup (docs/backup-restore.md has the measured time); a Merge or Refuse
// restore, or one into an empty target, destroys nothing and skips it.
func proveBeforeClean(ctx context.Context, r *kopiarepo.Repo, m archive.Manifest, job RestoreJob) error {
	if job.Overwrite != "Clean" {
		return nil
	}
	names, err := targetData(job.TargetDir)
	if err != nil || len(names) == 0 {
		return err
	}
	_, err = r.Verify(ctx, m.Kopia.SnapshotID)
	return readError(ctx, m, "restore (the check before overwrite: Clean empties the target)", err)
}

// readError classifies an error of reading back the snapshot of backup m (verify, or the check
// before a Clean restore): damage is RepositoryDamaged, naming the lost or corrupt contents, their
// packs and the files that need them.
func readError(ctx context.Context, m archive.Manifest, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fail(ReasonInterrupted, "%s of backup %s interrupted: %w", what, m.ID, err)
	case kopiarepo.IsDamaged(err): // a *kopiarepo.DamageError among others
		return fail(ReasonRepositoryDamaged, "%s of backup %s: the backup cannot be read: %v", what, m.ID, err)
	case objectstore.IsNetworkError(err):
		return fail(ReasonStorageFailed, "%s of backup %s: %w", what, m.ID, err)
	}
	return fail(ReasonVerificationFailed, "%s: backup %s is damaged: %v", what, m.ID, err)
}

// restoreError classifies the outcome of a kopia restore.
func restoreError(ctx context.Context, m archive.Manifest, st kopiarepo.RestoreStats, err error) error {
	switch {
	case err == nil && (int64(st.Files) != m.Files || st.Bytes != m.ContentBytes):
		return fail(ReasonVerificationFailed, "restored %d files (%d bytes), the manifest of backup %s says %d (%d bytes)",
			st.Files, st.Bytes, m.ID, m.Files, m.ContentBytes)
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fail(ReasonInterrupted, "restore of backup %s interrupted: %w", m.ID, err)
	case archive.IsTargetError(err):
		return fail(ReasonTargetNotWritable, "the target refused a write (%v): the mover runs as uid %d and needs a writable volume with room for the backup",
			err, os.Getuid())
	case objectstore.IsNetworkError(err):
		return fail(ReasonStorageFailed, "restore of backup %s: %w", m.ID, err)
	}
	return fail(ReasonVerificationFailed, "backup %s is damaged: %v", m.ID, err)
}

// VerifyKopia reads back every file of the kopia backup whose manifest is manifestKey, each
// chunk checked against its hash and each pack against the bucket's listing, writing nothing.
func VerifyKopia(ctx context.Context, store KopiaStore, cfg objectstore.Config, manifestKey string, opts KopiaOptions) (archive.Manifest, kopiarepo.VerifyStats, error) {
	var st kopiarepo.VerifyStats
	m, err := readKopiaManifest(ctx, store, manifestKey)
	if err != nil {
		return m, st, err
	}
	r, err := openSnapshot(ctx, cfg, opts, m)
	if err != nil {
		return m, st, err
	}
	defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	// Verify reads each distinct object once: hard links and files of equal content are one
	// object, so its counts are not the manifest's (openSnapshot compared those already).
	st, err = r.Verify(ctx, m.Kopia.SnapshotID)
	var damage *kopiarepo.DamageError
	if errors.As(err, &damage) && ctx.Err() == nil {
		err = dropDamage(ctx, r, damage, err)
	}
	return m, st, readError(ctx, m, "verify", err)
}

// dropDamage drops the contents a verify found lost or damaged from the repository's index
// (kopiarepo.Repo.Drop), so that the next backup uploads again those its volume still holds,
// and says so in err.
func dropDamage(ctx context.Context, r *kopiarepo.Repo, damage *kopiarepo.DamageError, err error) error {
	if derr := r.Drop(ctx, damage); derr != nil {
		return fmt.Errorf("%w; dropping the damaged contents from the index failed (%v): the next backup tries again", err, derr)
	}
	return fmt.Errorf("%w; they were dropped from the repository's index: the next backup reads every file and uploads them "+
		"again where the volume still holds them (backups that need contents the volume no longer holds stay unreadable)", err)
}

// kopiaOptionsFromEnv reads the kopia variables of the environment.
func kopiaOptionsFromEnv(getenv func(string) string) (KopiaOptions, error) {
	o := KopiaOptions{Prefix: getenv(EnvKopiaPrefix), Password: getenv(EnvKopiaPassword), CacheDir: getenv(EnvKopiaCacheDir)}
	if o.Password == "" {
		return o, fmt.Errorf("missing environment: %s (the repository password)", EnvKopiaPassword)
	}
	if s := getenv(EnvKopiaCacheLimit); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("%s: %q is not a positive number of bytes", EnvKopiaCacheLimit, s)
		}
		o.CacheLimitBytes = n
	}
	switch o.KeyDerivation = getenv(EnvKopiaKeyDerivation); o.KeyDerivation {
	case "", kopiarepo.KeyDerivationScrypt, kopiarepo.KeyDerivationPBKDF2:
	default:
		return o, fmt.Errorf("%s: %q is not %s or %s", EnvKopiaKeyDerivation, o.KeyDerivation,
			kopiarepo.KeyDerivationScrypt, kopiarepo.KeyDerivationPBKDF2)
	}
	return o, nil
}

// kopiaResult is the Result of a successful kopia backup.
func kopiaResult(m archive.Manifest, kb kopiaBackup) Result {
	res := Result{Result: Succeeded, ID: m.ID, Bytes: m.Kopia.UploadedBytes, Files: m.Files, Skipped: m.Skipped, SnapshotID: m.Kopia.SnapshotID,
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
