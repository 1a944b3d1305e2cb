package storagekit

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
	LabelBackup = "storage.okgoes.com/pvcbackup"
	LabelRun    = "storage.okgoes.com/run"
)

// Annotations on the first object of a run (its Job, or its VolumeSnapshot): what the status
// records of the run when it starts. A run is started before it is recorded (pvcbackup: runStarted);
// the reconcile that records it reads them back (adoptStartedRun).
const (
	AnnotationScheduledTime = "storage.okgoes.com/scheduled-time"
	AnnotationStartTime     = "storage.okgoes.com/start-time"
	AnnotationEngine        = "storage.okgoes.com/engine"
	// AnnotationManualTrigger is spec.trigger.manual of a manual run.
	AnnotationManualTrigger = "storage.okgoes.com/manual-trigger"
	// AnnotationPVCs lists the members of a group run (status.activeRun.pvcs), comma-separated.
	AnnotationPVCs = "storage.okgoes.com/pvcs"
	// AnnotationGroupSnapshotClass is the VolumeGroupSnapshotClass of a group run that takes one
	// VolumeGroupSnapshot (status.activeRun.volumeGroupSnapshotClass).
	AnnotationGroupSnapshotClass = "storage.okgoes.com/volume-group-snapshot-class"
)

// RunAnnotations are the annotations of a run's first object.
func RunAnnotations(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) map[string]string {
	a := map[string]string{
		AnnotationScheduledTime: run.ScheduledTime.UTC().Format(time.RFC3339),
		AnnotationStartTime:     run.StartTime.UTC().Format(time.RFC3339),
	}
	if run.Engine != "" {
		a[AnnotationEngine] = string(run.Engine)
	}
	if run.Manual && pb.Spec.Trigger != nil {
		a[AnnotationManualTrigger] = pb.Spec.Trigger.Manual
	}
	if len(run.PVCs) > 0 {
		a[AnnotationPVCs] = strings.Join(run.PVCs, ",")
	}
	if run.VolumeGroupSnapshotClass != "" {
		a[AnnotationGroupSnapshotClass] = run.VolumeGroupSnapshotClass
	}
	return a
}

// RunID names one run after the time it stands for. It is deterministic, so a reconcile that
// crashed after creating a run's Job finds that Job again instead of creating a second one.
func RunID(scheduled time.Time, manual bool) string {
	id := scheduled.UTC().Format("20060102T150405Z")
	if manual {
		id += "-manual"
	}
	return id
}

// RunObjectName is the name of the Job, VolumeSnapshot and temporary PVC of a run: at most 61
// characters (a Job's name becomes a pod label value, at most 63, and the verify Job adds "-v"),
// unique per PVCBackup and run.
func RunObjectName(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) string {
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

// BackupPrefix is where every object of one PVCBackup lives in the bucket.
func BackupPrefix(pb *storagev1.PVCBackup) string {
	return pb.Spec.S3.Prefix + path.Join(pb.Namespace, pb.Name) + "/"
}

// ArchiveKey and ManifestKey are the two objects of one backup. The manifest is written last:
// a backup exists only when its manifest does.
func ArchiveKey(pb *storagev1.PVCBackup, id string) string {
	return BackupPrefix(pb) + id + ArchiveSuffix
}
func ManifestKey(pb *storagev1.PVCBackup, id string) string {
	return BackupPrefix(pb) + id + ManifestSuffix
}

const (
	ArchiveSuffix  = ".tar.zst"
	ManifestSuffix = mover.ManifestSuffix
)

// ManifestKeyOf is the manifest next to an archive.
func ManifestKeyOf(ArchiveKey string) string {
	return strings.TrimSuffix(ArchiveKey, ArchiveSuffix) + ManifestSuffix
}

// VerifyJobName is the Job that verifies the backup of a run (spec.verify).
func VerifyJobName(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) string {
	return RunObjectName(pb, run) + "-v"
}

// LabelRestore marks the objects of a restore.
const LabelRestore = "storage.okgoes.com/pvcrestore"
