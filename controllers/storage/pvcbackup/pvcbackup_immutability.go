package pvcbackup

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// checkImmutability is what spec.kopia.immutability needs before a run: the Kopia engine (a
// PVCBackup whose empty spec.engine resolved to Archive cannot lock, InvalidSpec), and, until a
// run has reported the repository locked, a bucket created with S3 Object Lock (polled
// BucketNotLockable: AWS lets an owner turn object lock on for an existing versioned bucket). A
// repository locked otherwise than asked is the mover's finding (ImmutabilityMismatch): only
// the repository knows its retention.
func (r *PVCBackupReconciler) checkImmutability(ctx context.Context, s *scope, store storagekit.ObjectStore) error {
	pb := s.backup
	if pb.Spec.Kopia == nil || pb.Spec.Kopia.Immutability == nil {
		return nil
	}
	if s.engine == storagev1.EngineArchive {
		return errclass.Stalled(storagekit.ReasonInvalidSpec, fmt.Sprintf("spec.kopia.immutability locks a kopia repository, "+
			"and this PVCBackup's backups are archives (its prefix %q holds archive backups and spec.engine is empty): "+
			"remove spec.kopia.immutability, or set spec.engine to Kopia and a new spec.s3.prefix", storagekit.BackupPrefix(pb)))
	}
	if rs := pb.Status.Repository; rs != nil && rs.Immutability != nil {
		return nil // the bucket took locked objects already
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	enabled, err := store.ObjectLockEnabled(cctx)
	switch {
	case objectstore.IsAccessDenied(err):
		return errclass.Waiting(storagekit.ReasonCredentialsRejected, fmt.Sprintf("spec.kopia.immutability needs the bucket's object lock checked, "+
			"and S3 refused to show the object lock configuration of bucket %q to the credentials: grant them s3:GetBucketObjectLockConfiguration (%v)",
			pb.Spec.S3Bucket, err), r.Poll())
	case err != nil:
		return storagekit.ClassifyS3Error(err, pb.Spec.S3Bucket, r.Poll())
	}
	if !enabled {
		return errclass.Waiting(storagekit.ReasonBucketNotLockable, bucketNotLockable(pb), r.Poll())
	}
	return nil
}

// bucketNotLockable says why spec.kopia.immutability cannot be had in the PVCBackup's bucket,
// and what to do.
func bucketNotLockable(pb *storagev1.PVCBackup) string {
	return fmt.Sprintf("spec.kopia.immutability asks for %s object lock for %d days, and bucket %q at %s has no object lock: "+
		"a bucket gets it when it is created with object lock (aws s3api create-bucket --object-lock-enabled-for-bucket, mc mb --with-lock); "+
		"create a bucket with object lock and set spec.s3Bucket to it, or remove spec.kopia.immutability. No backup runs until then",
		pb.Spec.Kopia.Immutability.Mode, pb.Spec.Kopia.Immutability.Days, pb.Spec.S3Bucket, pb.Spec.S3.Endpoint)
}

// recordImmutability keeps the repository's retention a failed run reported (an
// ImmutabilityMismatch names it) in status.repository, creating it when no run had reported the
// repository yet.
func recordImmutability(pb *storagev1.PVCBackup, res mover.Result, now time.Time) {
	im := storagekit.RepositoryImmutability(res.RetentionMode, res.RetentionPeriod)
	if im == nil {
		return
	}
	if pb.Status.Repository == nil {
		pb.Status.Repository = &storagev1.RepositoryStatus{UpdateTime: metav1.NewTime(now)}
	}
	pb.Status.Repository.Immutability = im
}

// lockLapse is what spec.kopia.immutability cannot keep with the schedule sched: a blob in use
// stays locked only when full maintenance (in a backup Job, at most once a day) extends its lock
// before it expires, so consecutive backups may be at most days-1 days apart. It returns the
// widest gap between the runs of the next year after now (at most 1000 runs) and whether it is
// wider.
func lockLapse(sched interface{ Next(time.Time) time.Time }, now time.Time, days int32) (gap time.Duration, lapses bool) {
	limit := time.Duration(days-1) * 24 * time.Hour
	prev := sched.Next(now)
	for range 1000 {
		if prev.IsZero() || prev.Sub(now) > 366*24*time.Hour {
			break
		}
		next := sched.Next(prev)
		if next.IsZero() {
			break
		}
		gap = max(gap, next.Sub(prev))
		prev = next
	}
	return gap, gap > limit
}

// checkLockSchedule is InvalidSpec when the schedule of pb runs too rarely for its
// spec.kopia.immutability to keep the blobs in use locked (lockLapse).
func checkLockSchedule(pb *storagev1.PVCBackup, sched interface{ Next(time.Time) time.Time }, now time.Time) error {
	if pb.Spec.Kopia == nil || pb.Spec.Kopia.Immutability == nil {
		return nil
	}
	days := pb.Spec.Kopia.Immutability.Days
	gap, lapses := lockLapse(sched, now, days)
	if !lapses {
		return nil
	}
	return errclass.Stalled(storagekit.ReasonInvalidSpec, fmt.Sprintf("spec.schedule %q has runs %v apart, and spec.kopia.immutability.days %d keeps "+
		"the blobs in use locked only when backups run at most %d days apart (each backup's maintenance extends the locks): "+
		"run backups more often or set immutability.days to at least %d", pb.Spec.Schedule, gap, days, days-1, int((gap+24*time.Hour-1)/(24*time.Hour))+1))
}
