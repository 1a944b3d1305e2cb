package storage

import (
	"crypto/sha256"
	"encoding/hex"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// labelRestore marks the objects of a restore.
const labelRestore = "storage.okgoes.com/pvcrestore"

// restoreJobName is <restore>-restore, shortened with a hash to fit 63 characters.
func restoreJobName(pr *storagev1.PVCRestore) string {
	name := pr.Name
	if len(name) > 55 {
		sum := sha256.Sum256([]byte(pr.Name))
		name = name[:46] + "-" + hex.EncodeToString(sum[:4])
	}
	return name + "-restore"
}

// desiredRestorePVC is target.newPVC. It is deliberately not owned by the PVCRestore: the
// restored data must outlive the request that restored it.
func desiredRestorePVC(pr *storagev1.PVCRestore) *corev1.PersistentVolumeClaim {
	t := pr.Spec.Target.NewPVC
	modes := t.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pr.Namespace, Name: t.Name,
			Labels: map[string]string{labelRestore: pr.Name, "app.kubernetes.io/managed-by": "okgoes-operator"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: t.StorageClassName,
			AccessModes:      modes,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: t.Size}},
		},
	}
}

// desiredRestoreJob runs `mover restore` of the resolved backup into the target PVC.
func desiredRestoreJob(src s3Source, prefix string, pr *storagev1.PVCRestore, image string, deadline int64) *batchv1.Job {
	overwrite := string(pr.Spec.Target.Overwrite)
	if overwrite == "" {
		overwrite = string(storagev1.OverwriteRefuse)
	}
	labels := map[string]string{labelRestore: pr.Name, "app.kubernetes.io/managed-by": "okgoes-operator",
		"app.kubernetes.io/component": "restore-mover"}
	env := []corev1.EnvVar{
		{Name: mover.EnvTargetDir, Value: volumeMount},
		{Name: mover.EnvArchiveKey, Value: pr.Status.ObjectKey},
		{Name: mover.EnvManifestKey, Value: manifestKeyOf(pr.Status.ObjectKey)},
		{Name: mover.EnvOverwrite, Value: overwrite},
	}
	kopia := pr.Status.Engine == storagev1.EngineKopia
	if kopia { // ObjectKey is the manifest; the mover reads the snapshot from it
		env = []corev1.EnvVar{
			{Name: mover.EnvTargetDir, Value: volumeMount},
			{Name: mover.EnvManifestKey, Value: pr.Status.ObjectKey},
			{Name: mover.EnvOverwrite, Value: overwrite},
		}
		env = append(env, kopiaEnv(src, prefix)...)
	}
	return desiredMoverJob(src, image, moverJob{
		name: restoreJobName(pr), labels: labels, command: "restore", claim: pr.Status.TargetPVC, options: pr.Spec.Mover,
		fsGroup: true, deadline: deadline, env: env, kopiaCache: kopia,
	})
}
