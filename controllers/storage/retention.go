package storage

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/retention"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

const maxListedBackups = 50

// pruneBackups runs after each successful backup: it lists the restorable backups (those with a
// manifest), deletes those spec.retention does not keep — manifest first, so a half-pruned backup
// is never listed as restorable — and records the rest in status.backups. A failure is reported
// as an event and retried after the next successful run; it never fails the run itself.
func (r *PVCBackupReconciler) pruneBackups(ctx context.Context, s *scope) {
	pb := s.backup
	if err := r.prune(ctx, s); err != nil {
		log.FromContext(ctx).Error(err, "pruning backups")
		if r.Recorder != nil {
			r.Recorder.Eventf(pb, corev1.EventTypeWarning, "PruneFailed", "%v", err)
		}
	}
}

func (r *PVCBackupReconciler) prune(ctx context.Context, s *scope) error {
	pb := s.backup
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	objects, err := store.List(cctx, backupPrefix(pb))
	if err != nil {
		return fmt.Errorf("list backups: %w", err)
	}
	var backups []retention.Backup
	for _, o := range objects {
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, backupPrefix(pb)), ".manifest.json")
		if !ok || strings.Contains(id, "/") {
			continue
		}
		t, err := time.Parse("20060102T150405Z", strings.TrimSuffix(id, "-manual"))
		if err != nil {
			continue // not one of ours
		}
		backups = append(backups, retention.Backup{ID: id, Time: t})
	}
	keep, drop := backups, []retention.Backup(nil)
	if rp := pb.Spec.Retention; rp != nil {
		loc, err := schedule.Location(pb.Spec.Schedule, ptr.Deref(pb.Spec.TimeZone, ""))
		if err != nil {
			loc = time.UTC
		}
		keep, drop = retention.Select(backups, retention.Policy{Last: int(rp.KeepLast), Daily: int(rp.KeepDaily),
			Weekly: int(rp.KeepWeekly), Monthly: int(rp.KeepMonthly)}, loc)
	} else {
		keep, _ = retention.Select(backups, retention.Policy{}, time.UTC) // newest first
	}
	for _, b := range drop {
		for _, key := range []string{manifestKey(pb, b.ID), archiveKey(pb, b.ID)} {
			if err := store.Delete(cctx, key); err != nil {
				return fmt.Errorf("prune backup %s: delete %s: %w", b.ID, key, err)
			}
		}
	}
	if len(drop) > 0 && r.Recorder != nil {
		r.Recorder.Eventf(pb, corev1.EventTypeNormal, "Pruned", "pruned %d backups, %d kept", len(drop), len(keep))
	}
	pb.Status.Backups = nil
	for _, b := range keep[:min(len(keep), maxListedBackups)] {
		pb.Status.Backups = append(pb.Status.Backups, storagev1.BackupRef{ID: b.ID, Time: metav1.NewTime(b.Time), ObjectKey: archiveKey(pb, b.ID)})
	}
	return nil
}
