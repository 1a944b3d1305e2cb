package pvcbackup

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/retention"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

const (
	maxListedBackups = 50
	maxListedBroken  = 20
)

// housekeeping runs after each finished run. It always removes what failed or killed runs left
// in the bucket (incomplete multipart uploads, archives without a manifest); with prune (after a
// successful, verified run) it also applies spec.retention. A failure is reported as an event and
// retried after the next run; it never fails the run itself.
func (r *PVCBackupReconciler) housekeeping(ctx context.Context, s *scope, prune bool) {
	pb := s.backup
	if err := r.tidy(ctx, s, prune); err != nil {
		log.FromContext(ctx).Error(err, "pruning backups")
		if r.Recorder != nil {
			r.Recorder.Eventf(pb, corev1.EventTypeWarning, "PruneFailed", "%v", err)
		}
	}
}

// tidy lists the backups (ReadCatalog: only complete ones count), records them in status, and
// deletes: the backups spec.retention does not keep (manifest first, so a half-pruned backup is
// never listed as restorable), then orphaned archives and abandoned uploads of runs that are
// over. Broken backups are reported, never counted and never deleted.
func (r *PVCBackupReconciler) tidy(ctx context.Context, s *scope, prune bool) error {
	pb := s.backup
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	prefix := storagekit.BackupPrefix(pb)
	cat, err := storagekit.ReadCatalog(cctx, store, prefix, s.now)
	if err != nil {
		return err
	}
	recordCheck(pb, cat, s.now)
	cat = storagekit.WithoutUnverified(cat, pb.Status.History)

	backups := make([]retention.Backup, 0, len(cat.Valid))
	for _, b := range cat.Valid {
		backups = append(backups, retention.Backup{ID: b.ID, Time: b.Time})
	}
	keep, drop := retention.Select(backups, retention.Policy{}, time.UTC) // newest first
	if rp := pb.Spec.Retention; rp != nil && prune {
		loc, err := schedule.Location(pb.Spec.Schedule, ptr.Deref(pb.Spec.TimeZone, ""))
		if err != nil {
			loc = time.UTC
		}
		keep, drop = retention.Select(backups, retention.Policy{Last: int(rp.KeepLast), Daily: int(rp.KeepDaily),
			Weekly: int(rp.KeepWeekly), Monthly: int(rp.KeepMonthly)}, loc)
	}
	// Status first: what is kept does not depend on whether the deletions below succeed.
	manifests := map[string]archive.Manifest{}
	for _, b := range cat.Valid {
		manifests[b.ID] = b.Manifest
	}
	pb.Status.Backups = nil
	for _, b := range keep[:min(len(keep), maxListedBackups)] {
		m := manifests[b.ID]
		engine := storagekit.ManifestEngine(m)
		ref := storagev1.BackupRef{ID: b.ID, Time: metav1.NewTime(b.Time), ObjectKey: engine.BackupKey(prefix, b.ID), Engine: engine.Name(),
			SnapshotID: engine.SnapshotID(m), PVCs: m.Source.PVCs}
		pb.Status.Backups = append(pb.Status.Backups, ref)
	}
	r.reportBroken(pb, cat.Broken)

	// A kopia backup goes with its manifest: the next kopia run deletes the snapshot of a
	// manifest that is gone, and maintenance then reclaims its data (days later, see docs).
	for _, b := range drop {
		for _, key := range []string{storagekit.ManifestKey(pb, b.ID), storagekit.ArchiveKey(pb, b.ID)} {
			if err := store.Delete(cctx, key); err != nil {
				return fmt.Errorf("prune backup %s: delete %s: %w", b.ID, key, err)
			}
		}
	}
	if len(drop) > 0 && r.Recorder != nil {
		r.Recorder.Eventf(pb, corev1.EventTypeNormal, "Pruned", "pruned %d backups, %d kept", len(drop), len(keep))
	}
	active := ""
	if run := pb.Status.ActiveRun; run != nil {
		active = storagekit.ArchiveKey(pb, run.ID)
	}
	for _, key := range cat.Orphans {
		if key == active {
			continue
		}
		if err := store.Delete(cctx, key); err != nil {
			return fmt.Errorf("delete archive without manifest %s: %w", key, err)
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(pb, corev1.EventTypeNormal, "OrphanDeleted", "deleted %s: an archive without a manifest (a failed run or an unfinished prune)", key)
		}
	}
	for _, key := range cat.Progress {
		if run := pb.Status.ActiveRun; run != nil && key == storagekit.ProgressKey(prefix, run.ID) {
			continue
		}
		if err := store.Delete(cctx, key); err != nil {
			return fmt.Errorf("delete progress report %s: %w", key, err)
		}
	}
	uploads, err := store.IncompleteUploads(cctx, prefix, failedRunArchives(pb)...)
	if err != nil {
		return fmt.Errorf("list incomplete uploads: %w", err)
	}
	for _, key := range uploads {
		if key == active {
			continue
		}
		if err := store.AbortUploads(cctx, key); err != nil && !objectstore.IsNotFound(err) {
			return fmt.Errorf("abort incomplete upload of %s: %w", key, err)
		}
	}
	return nil
}

// recordCheck shows what the last backup run found in the kopia repository (its record, nil
// when none has written one) in status.repository.check, from which computeStatus decides the
// RepositoryHealthy condition: the damage the mover found (lost blobs, snapshots that cannot be
// listed or lost data), and the backups whose snapshots the listing did not hold (a lost index
// blob takes them with it; the mover cannot tell that from a snapshot never made).
func recordCheck(pb *storagev1.PVCBackup, cat storagekit.Catalog, now time.Time) {
	rec := cat.Record
	if rec == nil {
		return
	}
	if pb.Status.Repository == nil {
		pb.Status.Repository = &storagev1.RepositoryStatus{UpdateTime: metav1.NewTime(now)}
	}
	check := &storagev1.RepositoryCheck{Time: metav1.NewTime(rec.Time.Truncate(time.Second)), RunID: rec.RunID,
		Snapshots: int32(min(len(rec.Snapshots), math.MaxInt32)), Damage: storagekit.Truncate(rec.Damage, 2048)}
	if rec.RunID == "" { // a record that does not decode (readRecord)
		check.Time, check.Damage = metav1.NewTime(now), storagekit.Truncate(rec.Unlisted, 2048)
	}
	if len(cat.Lost) > 0 && rec.Damage == "" && rec.Unlisted == "" {
		check.Damage = storagekit.Truncate(fmt.Sprintf("backups %s name kopia snapshots that the repository at %s does not hold, or that lost data "+
			"(an index blob x… lost from the bucket takes the snapshots it listed with it; a manifest copied or edited by hand may name one never made): they cannot be restored and are listed in "+
			"status.brokenBackups; put the lost objects back from bucket versioning or a replica if you have them, or restore an older backup",
			strings.Join(cat.Lost, ", "), rec.Repository)+unindexedHint(rec), 2048)
	}
	pb.Status.Repository.Check = check
}

// unindexedHint names the packs no index lists, which a lost index blob leaves behind.
func unindexedHint(rec *mover.RepositoryRecord) string {
	if rec.UnindexedCount == 0 {
		return ""
	}
	return fmt.Sprintf("; the bucket holds %d packs that no index lists (%s): what a lost index held, or what a killed run left",
		rec.UnindexedCount, strings.Join(rec.UnindexedPacks[:min(len(rec.UnindexedPacks), 5)], ", "))
}

// failedRunArchives are the archive keys of the runs in history that did not succeed: a mover
// killed mid-upload leaves its multipart upload there, and some S3 servers (MinIO) list an
// upload only when asked for its key.
func failedRunArchives(pb *storagev1.PVCBackup) []string {
	var keys []string
	for _, h := range pb.Status.History {
		if h.Result != storagev1.RunSucceeded && h.ID != "" {
			keys = append(keys, storagekit.ArchiveKey(pb, h.ID))
		}
	}
	return keys
}

// reportBroken records the broken backups in status and warns when the set changes.
func (r *PVCBackupReconciler) reportBroken(pb *storagev1.PVCBackup, broken []storagekit.BrokenEntry) {
	before := pb.Status.BrokenBackups
	pb.Status.BrokenBackups = nil
	var ids []string
	for _, b := range broken[:min(len(broken), maxListedBroken)] {
		pb.Status.BrokenBackups = append(pb.Status.BrokenBackups, storagev1.BrokenBackup{ID: b.ID, Problem: storagekit.Truncate(b.Problem, 1024)})
		ids = append(ids, b.ID)
	}
	changed := len(before) != len(pb.Status.BrokenBackups)
	for i := 0; !changed && i < len(before); i++ {
		changed = before[i] != pb.Status.BrokenBackups[i]
	}
	if changed && len(broken) > 0 && r.Recorder != nil {
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, "BrokenBackups",
			"%d backups under %s are not usable and are neither counted nor pruned: %s (see status.brokenBackups)",
			len(broken), storagekit.BackupPrefix(pb), strings.Join(ids, ", "))
	}
}
