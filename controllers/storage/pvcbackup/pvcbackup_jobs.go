package pvcbackup

import (
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// desiredBackupJob is the Job of one backup run: `mover backup` over claims, mounted read-only:
// the one claim of a single PVC at /data, the members of a group each at /data/<pvc>.
func desiredBackupJob(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, claims []storagekit.MemberClaim, image string, deadline int64) *batchv1.Job {
	labels := runLabels(pb, run)
	labels["app.kubernetes.io/component"] = "backup-mover"
	env := []corev1.EnvVar{
		{Name: mover.EnvSourceDir, Value: storagekit.VolumeMount},
		{Name: mover.EnvBackupID, Value: run.ID},
		{Name: mover.EnvArchiveKey, Value: storagekit.ArchiveKey(pb, run.ID)},
		{Name: mover.EnvManifestKey, Value: storagekit.ManifestKey(pb, run.ID)},
		{Name: mover.EnvSourceNamespace, Value: pb.Namespace},
		{Name: mover.EnvSourcePVC, Value: pb.Spec.PVCName},
		{Name: mover.EnvSourcePVCs, Value: strings.Join(run.PVCs, ",")},
		{Name: mover.EnvScheduledTime, Value: run.ScheduledTime.UTC().Format(time.RFC3339)},
		{Name: mover.EnvProgressKey, Value: storagekit.ProgressKey(storagekit.BackupPrefix(pb), run.ID)},
	}
	engine := storagekit.EngineFor(run.Engine)
	env = append(env, engine.BackupEnv(storagekit.BackupSource(pb), storagekit.BackupPrefix(pb), pb.Spec.Kopia)...)
	mj := storagekit.MoverJob{
		Name: storagekit.RunObjectName(pb, run), Labels: labels, Command: "backup", ReadOnly: true, Options: pb.Spec.Mover,
		Deadline: deadline, Env: env, KopiaCache: engine.MoverCache(),
	}
	if len(run.PVCs) > 0 {
		mj.Members = claims
	} else {
		mj.Claim = claims[0].Claim
	}
	job := storagekit.DesiredMoverJob(storagekit.BackupSource(pb), image, mj)
	job.Annotations = storagekit.RunAnnotations(pb, run)
	return job
}

// desiredVerifyJob is the Job that reads the backup of a run back from S3 and checks it against
// its manifest, writing nothing.
func desiredVerifyJob(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, image string, deadline int64) *batchv1.Job {
	labels := runLabels(pb, run)
	labels["app.kubernetes.io/component"] = "backup-verifier"
	engine := storagekit.EngineFor(run.Engine)
	env := engine.VerifyEnv(storagekit.BackupSource(pb), storagekit.BackupPrefix(pb), run.ID)
	return storagekit.DesiredMoverJob(storagekit.BackupSource(pb), image, storagekit.MoverJob{
		Name: storagekit.VerifyJobName(pb, run), Labels: labels, Command: "verify", Options: pb.Spec.Mover, Deadline: deadline,
		Env: env, KopiaCache: engine.MoverCache(),
	})
}
