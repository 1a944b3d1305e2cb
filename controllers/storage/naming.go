package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"
	"strings"
	"time"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Labels put on every temporary object of a run, so they can be found and removed.
const (
	labelBackup = "storage.okgoes.com/pvcbackup"
	labelRun    = "storage.okgoes.com/run"
)

// Annotations on the first object of a run (its Job, or its VolumeSnapshot): what the status
// records of the run when it starts. A run is started before it is recorded (reconcileNextRun);
// the reconcile that records it reads them back (adoptStartedRun).
const (
	annotationScheduledTime = "storage.okgoes.com/scheduled-time"
	annotationStartTime     = "storage.okgoes.com/start-time"
	annotationEngine        = "storage.okgoes.com/engine"
	// annotationManualTrigger is spec.trigger.manual of a manual run.
	annotationManualTrigger = "storage.okgoes.com/manual-trigger"
)

// runAnnotations are the annotations of a run's first object.
func runAnnotations(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) map[string]string {
	a := map[string]string{
		annotationScheduledTime: run.ScheduledTime.UTC().Format(time.RFC3339),
		annotationStartTime:     run.StartTime.UTC().Format(time.RFC3339),
	}
	if run.Engine != "" {
		a[annotationEngine] = string(run.Engine)
	}
	if run.Manual && pb.Spec.Trigger != nil {
		a[annotationManualTrigger] = pb.Spec.Trigger.Manual
	}
	return a
}

// runID names one run after the time it stands for. It is deterministic, so a reconcile that
// crashed after creating a run's Job finds that Job again instead of creating a second one.
func runID(scheduled time.Time, manual bool) string {
	id := scheduled.UTC().Format("20060102T150405Z")
	if manual {
		id += "-manual"
	}
	return id
}

// runObjectName is the name of the Job, VolumeSnapshot and temporary PVC of a run: at most 61
// characters (a Job's name becomes a pod label value, at most 63, and the verify Job adds "-v"),
// unique per PVCBackup and run.
func runObjectName(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) string {
	suffix := strconv.FormatInt(run.ScheduledTime.Unix(), 10)
	if run.Manual {
		suffix += "-m"
	}
	name := pb.Name
	if max := 61 - len(suffix) - 1; len(name) > max {
		sum := sha256.Sum256([]byte(pb.Name))
		name = name[:max-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return name + "-" + suffix
}

// backupPrefix is where every object of one PVCBackup lives in the bucket.
func backupPrefix(pb *storagev1.PVCBackup) string {
	return pb.Spec.S3.Prefix + path.Join(pb.Namespace, pb.Name) + "/"
}

// archiveKey and manifestKey are the two objects of one backup. The manifest is written last:
// a backup exists only when its manifest does.
func archiveKey(pb *storagev1.PVCBackup, id string) string {
	return backupPrefix(pb) + id + archiveSuffix
}
func manifestKey(pb *storagev1.PVCBackup, id string) string {
	return backupPrefix(pb) + id + manifestSuffix
}

const (
	archiveSuffix  = ".tar.zst"
	manifestSuffix = mover.ManifestSuffix
)

// manifestKeyOf is the manifest next to an archive.
func manifestKeyOf(archiveKey string) string {
	return strings.TrimSuffix(archiveKey, archiveSuffix) + manifestSuffix
}

// verifyJobName is the Job that verifies the backup of a run (spec.verify).
func verifyJobName(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) string {
	return runObjectName(pb, run) + "-v"
}
