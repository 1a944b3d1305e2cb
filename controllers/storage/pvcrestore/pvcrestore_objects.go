package pvcrestore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// restoreJobName is <restore>-restore, shortened with a hash to fit 63 characters.
func restoreJobName(pr *storagev1.PVCRestore) string {
	name := pr.Name
	if len(name) > 55 {
		sum := sha256.Sum256([]byte(pr.Name))
		name = name[:46] + "-" + hex.EncodeToString(sum[:4])
	}
	return name + "-restore"
}

// desiredRestorePVC is the newPVC t of a target of pr. It is deliberately not owned by the
// PVCRestore: the restored data must outlive the request that restored it.
func desiredRestorePVC(pr *storagev1.PVCRestore, t *storagev1.NewPVCTemplate) *corev1.PersistentVolumeClaim {
	modes := t.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pr.Namespace, Name: t.Name,
			Labels: map[string]string{storagekit.LabelRestore: pr.Name, "app.kubernetes.io/managed-by": "okgoes-operator"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: t.StorageClassName,
			AccessModes:      modes,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: t.Size}},
		},
	}
}

// desiredRestoreJob runs `mover restore` of the resolved backup into the target PVC, or, for a
// group backup, into each target PVC mounted at /data/<member>.
func desiredRestoreJob(src storagekit.S3Source, prefix string, pr *storagev1.PVCRestore, image string, deadline int64) *batchv1.Job {
	targets := targetsOf(pr)
	overwrite := targets[0].overwrite() // one PVC's; a group's are in mover.EnvRestoreMembers
	labels := map[string]string{storagekit.LabelRestore: pr.Name, "app.kubernetes.io/managed-by": "okgoes-operator",
		"app.kubernetes.io/component": "restore-mover"}
	engine := storagekit.EngineFor(pr.Status.Engine)
	paths := make([]string, len(pr.Spec.Paths))
	for i, p := range pr.Spec.Paths {
		paths[i] = string(p)
	}
	env := append(engine.RestoreEnv(src, prefix, pr.Status.ObjectKey, overwrite, paths), pointInTimeEnv(pr)...)
	mj := storagekit.MoverJob{
		Name: restoreJobName(pr), Labels: labels, Command: "restore", Options: pr.Spec.Mover,
		FSGroup: true, Deadline: deadline, Env: env, KopiaCache: engine.MoverCache(),
	}
	if members := restoreMembers(pr); members != "" {
		mj.Env = append(mj.Env, corev1.EnvVar{Name: mover.EnvRestoreMembers, Value: members})
		for _, t := range targets {
			mj.Members = append(mj.Members, storagekit.MemberClaim{Dir: t.source, Claim: t.pvcName()})
		}
	} else {
		mj.Claim = pr.Status.TargetPVC
	}
	return storagekit.DesiredMoverJob(src, image, mj)
}

// restoreS3Fields are the S3Fields of the source of pr.
func restoreS3Fields(pr *storagev1.PVCRestore) storagekit.S3Fields {
	if pr.Spec.Source.S3 != nil {
		return storagekit.S3Fields{Location: "spec.source.s3.location"}
	}
	return storagekit.S3Fields{Location: "spec.s3", Owner: fmt.Sprintf("PVCBackup %q", pr.Spec.Source.PVCBackup)}
}
