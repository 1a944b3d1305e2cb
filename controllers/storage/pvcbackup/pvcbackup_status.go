package pvcbackup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Condition reasons of a PVCBackup.
const (
	// Ready reasons.
	ReasonScheduled            = "Scheduled"            // True: backups will run
	ReasonInvalidSchedule      = "InvalidSchedule"      // False, stalled: the cron expression or time zone is wrong
	ReasonSnapshotsUnsupported = "SnapshotsUnsupported" // False, polled: spec.snapshot without the VolumeSnapshot API
	// ReasonSnapshotClassNotFound (False, polled): spec.snapshot.volumeSnapshotClassName names no
	// class, or a class of another driver than the PVC's.
	ReasonSnapshotClassNotFound = "SnapshotClassNotFound"
	// ReasonNoDefaultSnapshotClass (False, polled): spec.snapshot names no class and the PVC's
	// driver has no default VolumeSnapshotClass (or more than one).
	ReasonNoDefaultSnapshotClass = "NoDefaultSnapshotClass"
	ReasonPVCNotFound            = "PVCNotFound"  // False, polled
	ReasonBackupFailed           = "BackupFailed" // False: the last run failed; the next tick tries again
	// Running reasons.
	ReasonWaitingForSchedule = "WaitingForSchedule" // False: no run yet, waiting for the first tick
	ReasonSnapshotPending    = "SnapshotPending"    // True: waiting for the VolumeSnapshot to be ready
	ReasonUploading          = "Uploading"          // True: the mover Job streams the volume to S3
	ReasonStalled            = "Stalled"            // True: the mover's progress report is older than stallAfter
	ReasonVerifying          = "Verifying"          // True: the verify Job reads the new backup back (spec.verify)
	ReasonSucceeded          = "Succeeded"          // False: the last run succeeded
	ReasonFailed             = "Failed"             // False: the last run failed
	ReasonSuspended          = "Suspended"          // False: spec.suspend
	// DeletionFailed reasons.
	ReasonDeletionFailed = "DeletionFailed"
	// RepositoryHealthy reasons (kopia engine).
	ReasonRepositoryChecked   = "Checked"                             // True: the last run found nothing damaged
	ReasonRepositoryDamaged   = string(mover.ReasonRepositoryDamaged) // False: it found lost or unreadable objects
	ReasonRepositoryUnchecked = "NotChecked"                          // Unknown: no run has looked yet
	// SplitterApplied reasons (kopia engine, spec.kopia.splitter set).
	ReasonSplitterInUse    = "SplitterInUse"    // True: the repository cuts files with the splitter asked for
	ReasonSplitterMismatch = "SplitterMismatch" // False: the repository was created with another one, and keeps it
	// ReasonRepositoryPasswordWrong (Ready=False): the last backup failed because neither the
	// credentials Secret's repository password nor its "<key>.previous" opens the repository.
	ReasonRepositoryPasswordWrong = string(mover.ReasonRepositoryPasswordWrong)
)

// computeStatus is the one place the conditions and summary fields of a PVCBackup are decided,
// from the run state in its status and the classified error of the reconcile.
func computeStatus(pb *storagev1.PVCBackup, s *scope, err error) {
	st := &pb.Status
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: pb.Generation})
	}
	if !s.next.IsZero() && !pb.Spec.Suspend {
		st.NextBackup = s.next.UTC().Format(time.RFC3339)
	} else {
		st.NextBackup = ""
	}

	verdict := errclass.Of(err)
	switch verdict.Class {
	case errclass.ClassStalled, errclass.ClassWaiting:
		set(storagev1.ConditionReady, metav1.ConditionFalse, verdict.Reason, verdict.Message)
	case errclass.ClassTransient:
		// Transient: keep the last observation, do not claim this generation was acted on.
		return
	default:
		setReadyFromRuns(pb, set)
	}
	st.ObservedGeneration = pb.Generation
	if s.engine != "" {
		st.Engine = s.engine
	}
	repositoryCondition(pb, set)
	setSplitterCondition(pb, set)
	setRunningCondition(pb, s, set)
}

// setSplitterCondition is SplitterApplied while spec.kopia.splitter is set and a run has reported
// the repository's splitter: a repository keeps the splitter it was created with (chunks cut
// otherwise would not deduplicate against the ones it holds), so a spec asking for another one
// is told so once, in status; nothing fails and nothing is retried for it.
func setSplitterCondition(pb *storagev1.PVCBackup, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	st := &pb.Status
	var want, has string
	if pb.Spec.Kopia != nil {
		want = string(pb.Spec.Kopia.Splitter)
	}
	if st.Repository != nil {
		has = st.Repository.Splitter
	}
	switch {
	case want == "" || has == "" || !storagekit.EngineFor(st.Engine).HasRepository():
		meta.RemoveStatusCondition(&st.Conditions, storagev1.ConditionSplitterApplied)
	case want == has:
		set(storagev1.ConditionSplitterApplied, metav1.ConditionTrue, ReasonSplitterInUse,
			fmt.Sprintf("the kopia repository cuts files with %s, as spec.kopia.splitter asks", has))
	default:
		set(storagev1.ConditionSplitterApplied, metav1.ConditionFalse, ReasonSplitterMismatch, fmt.Sprintf(
			"spec.kopia.splitter asks for %s, and the kopia repository at %s was created with %s: a splitter takes effect only "+
				"when a repository is created, so the backups go on with %s (nothing fails, nothing is retried for it). "+
				"To cut with %s, set a new spec.s3.prefix (a new repository, whose first backup uploads the whole volume again) "+
				"or remove spec.kopia.splitter", want, storagekit.KopiaPrefix(storagekit.BackupPrefix(pb)), has, has, want))
	}
}

// setRunningCondition is Running: the stage of the active run, or what the last one did.
func setRunningCondition(pb *storagev1.PVCBackup, s *scope, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	st := &pb.Status
	switch {
	case st.ActiveRun != nil:
		reason := s.stage
		if reason == "" {
			reason = ReasonUploading
		}
		msg := s.stageMessage
		if msg == "" {
			msg = fmt.Sprintf("backup %s started at %s", st.ActiveRun.ID, st.ActiveRun.StartTime.UTC().Format(time.RFC3339))
		}
		set(storagev1.ConditionRunning, metav1.ConditionTrue, reason, msg)
	case pb.Spec.Suspend:
		set(storagev1.ConditionRunning, metav1.ConditionFalse, ReasonSuspended, "spec.suspend is true")
	case st.LastRun == nil:
		set(storagev1.ConditionRunning, metav1.ConditionFalse, ReasonWaitingForSchedule, "no backup has run yet")
	case st.LastRun.Result == storagev1.RunSucceeded:
		set(storagev1.ConditionRunning, metav1.ConditionFalse, ReasonSucceeded, storagekit.EngineFor(st.LastRun.Engine).SucceededMessage(st.LastRun))
	default:
		set(storagev1.ConditionRunning, metav1.ConditionFalse, ReasonFailed, fmt.Sprintf("backup %s%s: %s", st.LastRun.ID, inParens(st.LastRun.Reason), st.LastRun.Message))
	}
}

// setReadyFromRuns is Ready when the reconcile found nothing wrong: what the last run says.
func setReadyFromRuns(pb *storagev1.PVCBackup, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	st := &pb.Status
	switch {
	case st.LastRun != nil && st.LastRun.Result == storagev1.RunFailed && st.ActiveRun == nil && needsAPerson(st.LastRun.Reason):
		// Every run fails the same way until a person fixes the Secret, the spec or the
		// bucket: say so in the reason.
		set(storagev1.ConditionReady, metav1.ConditionFalse, st.LastRun.Reason,
			fmt.Sprintf("backup %s failed: %s", st.LastRun.ID, st.LastRun.Message))
	case st.LastRun != nil && st.LastRun.Result == storagev1.RunFailed && st.ActiveRun == nil:
		set(storagev1.ConditionReady, metav1.ConditionFalse, ReasonBackupFailed,
			fmt.Sprintf("backup %s failed%s: %s", st.LastRun.ID, inParens(st.LastRun.Reason), st.LastRun.Message))
	case st.LastRun != nil && st.LastRun.Verified != nil && !*st.LastRun.Verified && st.ActiveRun == nil:
		set(storagev1.ConditionReady, metav1.ConditionFalse, storagekit.ReasonVerificationFailed,
			fmt.Sprintf("backup %s was written but does not verify: %s", st.LastRun.ID, st.LastRun.VerificationMessage))
	default:
		msg := "next backup at " + st.NextBackup
		if pb.Spec.Suspend {
			msg = "suspended"
		}
		set(storagev1.ConditionReady, metav1.ConditionTrue, ReasonScheduled, msg)
	}
}

// needsAPerson reports whether a run that failed for reason fails the same way every time until
// a person changes something: then Ready's reason is the run's own.
func needsAPerson(reason string) bool {
	switch reason {
	case ReasonRepositoryPasswordWrong, storagekit.ReasonImmutabilityMismatch, storagekit.ReasonBucketNotLockable:
		return true
	}
	return false
}

// repositoryCondition is RepositoryHealthy, for a PVCBackup of the kopia engine: what the last
// backup run found when it looked at the whole repository (status.repository.check).
func repositoryCondition(pb *storagev1.PVCBackup, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	st := &pb.Status
	if !storagekit.EngineFor(st.Engine).HasRepository() {
		meta.RemoveStatusCondition(&st.Conditions, storagev1.ConditionRepositoryHealthy)
		return
	}
	var check *storagev1.RepositoryCheck
	if st.Repository != nil {
		check = st.Repository.Check
	}
	switch {
	case check == nil:
		set(storagev1.ConditionRepositoryHealthy, metav1.ConditionUnknown, ReasonRepositoryUnchecked,
			"no backup run has looked at the kopia repository yet: each run lists its snapshots and packs after the backup")
	case check.Damage != "":
		set(storagev1.ConditionRepositoryHealthy, metav1.ConditionFalse, ReasonRepositoryDamaged, check.Damage)
	default:
		set(storagev1.ConditionRepositoryHealthy, metav1.ConditionTrue, ReasonRepositoryChecked,
			fmt.Sprintf("backup %s found %d snapshots and no lost blob at %s", check.RunID, check.Snapshots, check.Time.UTC().Format(time.RFC3339)))
	}
}

func inParens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
