package cache

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// Restore of a new cache from a backup (spec.restoreFrom). The StatefulSet does not exist until
// the backup is in the claim its first pod uses, data-<name>-0, which a PVCRestore owned by the
// cache creates (target.newPVC: the size and class of spec.persistence) and fills. So no pod, no
// endpoint of the Services, serves before the restore is complete; the StatefulSet then finds
// the claim by its name, and the pods that follow start empty and resync from pod 0 (the
// election prefers the pod that loaded keys, decidePrimary).
//
// Only dump.rdb is restored: it is the snapshot of the BGSAVE the backup waited for (backup.go).
// The append-only directory of the copy is not: the copy is taken while Redis runs, and an
// append-only file rewrite may replace the files under the copy, leaving a manifest that names
// files the copy lacks. Redis 7 started with appendonly yes and no append-only directory
// creates an empty one and ignores dump.rdb (measured with redis-server 7.0), so a restored
// cache with spec.persistence.appendOnly gets the init container restore-aof, which makes
// dump.rdb the base of a new append-only directory (restoreAOFScript) before Redis starts.

const (
	// restoreSuffix names the PVCRestore of a cache: <name>-restore.
	restoreSuffix = "-restore"
	// restorePoll is the safety net while a restore runs: the PVCRestore's status changes wake
	// the reconciler.
	restorePoll = 30 * time.Second
	// rdbFile is the snapshot Redis writes into its dir (dbfilename's default).
	rdbFile = "dump.rdb"
	// restoreAOFContainer is the init container of restoreAOFScript.
	restoreAOFContainer = "restore-aof"
)

// Restore reasons (the Restoring condition).
const (
	// ReasonRestoring (Restoring=True, Ready=False, Progressing=True): the PVCRestore runs.
	ReasonRestoring = "Restoring"
	// ReasonRestored (Restoring=False): the backup is in the first pod's claim.
	ReasonRestored = "Restored"
	// ReasonRestoreFailed (Restoring=False, Degraded=True): the PVCRestore failed; the message
	// carries its reason. Not retried: delete the RedisCache (and the claim, if the restore
	// created it) and create it again.
	ReasonRestoreFailed = "RestoreFailed"
)

// restoreAOFScript runs before Redis in the pods of a restored cache with the append-only file:
// when the volume holds a snapshot and no append-only directory (a restored pod 0, once), it
// makes the snapshot the base of a new one, built aside and renamed into place, so that a pod
// killed halfway leaves no half-made directory. The manifest line is Redis 7's format.
const restoreAOFScript = `set -eu
cd /data
if [ -f ` + rdbFile + ` ] && [ ! -e appendonlydir ]; then
  rm -rf appendonlydir.restore
  mkdir appendonlydir.restore
  cp ` + rdbFile + ` appendonlydir.restore/appendonly.aof.1.base.rdb
  printf 'file appendonly.aof.1.base.rdb seq 1 type b\n' > appendonlydir.restore/appendonly.aof.manifest
  mv appendonlydir.restore appendonlydir
fi
`

// restoreProgress is what reconcileRestore saw, for computeStatus.
type restoreProgress struct {
	// status is Restoring condition's: True while the restore runs.
	status  string
	reason  string
	message string
}

func restoreName(rc *cachev1beta1.RedisCache) string { return rc.Name + restoreSuffix }

// reconcileRestore runs before the StatefulSet phase: it keeps the StatefulSet from being made
// until the PVCRestore of spec.restoreFrom succeeded. Once status.restore says so, it does nothing.
func (r *RedisCacheReconciler) reconcileRestore(ctx context.Context, s *scope) error {
	rc := s.cache
	if rc.Spec.RestoreFrom == nil || rc.Spec.Persistence == nil {
		return nil
	}
	if st := rc.Status.Restore; st != nil && st.Phase == storagev1.RestoreSucceeded {
		return nil
	}
	pr := &storagev1.PVCRestore{}
	pr.Namespace, pr.Name = rc.Namespace, restoreName(rc)
	if err := r.ensure(ctx, rc, "PVCRestore", pr, func() { mutatePVCRestore(pr, rc) }); err != nil {
		return err
	}
	rc.Status.Restore = &cachev1beta1.RestoreStatus{PVCRestore: pr.Name, PVCName: dataClaimName(rc, 0),
		Phase: pr.Status.Phase, BackupID: pr.Status.BackupID, CompletionTime: pr.Status.CompletionTime}
	why := pvcRestoreMessage(pr)
	switch pr.Status.Phase {
	case storagev1.RestoreSucceeded:
		s.obs.restore = &restoreProgress{status: "False", reason: ReasonRestored,
			message: fmt.Sprintf("backup %s restored into %s", pr.Status.BackupID, dataClaimName(rc, 0))}
		return nil
	case storagev1.RestoreFailed:
		msg := fmt.Sprintf("the restore of spec.restoreFrom failed (%s); no pod was started. Delete this RedisCache, and the claim %s if the restore created it, and create it again with a spec.restoreFrom that names a usable backup",
			why, dataClaimName(rc, 0))
		s.obs.restore = &restoreProgress{status: "False", reason: ReasonRestoreFailed, message: msg}
		return errclass.Stalled(ReasonRestoreFailed, msg)
	}
	msg := fmt.Sprintf("restoring spec.restoreFrom into %s before the first pod starts (%s)", dataClaimName(rc, 0), why)
	s.obs.restore = &restoreProgress{status: "True", reason: ReasonRestoring, message: msg}
	return errclass.Waiting(ReasonRestoring, msg, restorePoll)
}

// mutatePVCRestore makes pr the restore of rc's spec.restoreFrom. Its spec is immutable: it is
// written once, at creation.
func mutatePVCRestore(pr *storagev1.PVCRestore, rc *cachev1beta1.RedisCache) {
	pr.Labels = mergeInto(pr.Labels, childLabels(rc))
	if pr.UID != "" {
		return
	}
	p := rc.Spec.Persistence
	pr.Spec = storagev1.PVCRestoreSpec{
		Source: rc.Spec.RestoreFrom.Source,
		Target: &storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: dataClaimName(rc, 0), Size: p.Size,
			StorageClassName: p.StorageClassName, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}},
		Paths: []storagev1.RestorePath{rdbFile},
		Mover: &storagev1.MoverOptions{PodSecurityContext: redisMoverSecurity()},
	}
}

// pvcRestoreMessage says where the PVCRestore is: its phase and the condition that tells why.
func pvcRestoreMessage(pr *storagev1.PVCRestore) string {
	phase := string(pr.Status.Phase)
	if phase == "" {
		phase = "not started"
	}
	msg := fmt.Sprintf("PVCRestore %s: %s", pr.Name, phase)
	if c := meta.FindStatusCondition(pr.Status.Conditions, storagev1.ConditionComplete); c != nil && c.Message != "" {
		return msg + ", " + c.Reason + ": " + c.Message
	}
	for _, c := range pr.Status.Conditions {
		if c.Message != "" {
			return msg + ", " + c.Reason + ": " + c.Message
		}
	}
	return msg
}

// restoreAOFInitContainer is the init container of a restored cache with the append-only file
// (restoreAOFScript): the Redis image, its security context, the data volume only.
func restoreAOFInitContainer(redis *corev1.Container) corev1.Container {
	return corev1.Container{
		Name:            restoreAOFContainer,
		Image:           redis.Image,
		ImagePullPolicy: redis.ImagePullPolicy,
		Command:         []string{"sh", "-c", restoreAOFScript},
		SecurityContext: redis.SecurityContext.DeepCopy(),
		VolumeMounts:    []corev1.VolumeMount{{Name: dataVolume, MountPath: "/data"}},
		Resources:       *redis.Resources.DeepCopy(),
	}
}
