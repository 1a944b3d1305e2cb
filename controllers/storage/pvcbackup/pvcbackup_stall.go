package pvcbackup

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// stallAfter is how old the running mover's progress report may be before the run shows
// Stalled: the mover writes one to S3 every mover.ProgressEvery while it runs, so this is four
// reports missed.
const stallAfter = 4 * mover.ProgressEvery

// stalledMessage tells whether the active run's last progress report is older than stallAfter,
// and says what that means, no more: the controller knows only that no report arrived. No
// report at all (a mover that has not written its first one) says nothing.
func stalledMessage(p *storagev1.RunProgress, now time.Time, idle time.Duration) (string, bool) {
	if p == nil {
		return "", false
	}
	age := now.Sub(p.Time.Time)
	if age <= stallAfter {
		return "", false
	}
	return fmt.Sprintf("the mover's last progress report is from %s, %s ago (it writes one to S3 every %s): S3 may not be "+
		"taking its requests (frozen or unreachable), or the mover is stuck; the mover ends the run with StorageStalled "+
		"after spec.mover.storageIdleTimeout (%s) without progress on S3, the Job's deadline ends it otherwise",
		p.Time.UTC().Format(time.RFC3339), age.Round(time.Second), mover.ProgressEvery, idle), true
}

// recordSkipped records in rec what the backup found and could not keep, and warns about it.
func (r *PVCBackupReconciler) recordSkipped(pb *storagev1.PVCBackup, id string, rec *storagev1.RunStatus, skipped int64) {
	if skipped <= 0 {
		return
	}
	rec.SkippedEntries = skipped
	rec.Message = fmt.Sprintf("%d entries of the volume were not backed up: the %s engine cannot keep them (sockets and devices; "+
		"FIFOs with kopia); see docs/backup-restore.md, What each engine keeps", skipped, engineName(rec.Engine))
	if r.Recorder != nil {
		r.Recorder.Eventf(pb, corev1.EventTypeWarning, "EntriesSkipped", "backup %s: %s", id, rec.Message)
	}
}

// engineName is the engine of a record, Archive when empty (a run of an older operator).
func engineName(e storagev1.BackupEngine) storagev1.BackupEngine {
	if e == "" {
		return storagev1.EngineArchive
	}
	return e
}
