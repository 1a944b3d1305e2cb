package storage

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// desiredBackupJob is the Job of one backup run: `mover backup` over claim, mounted read-only.
func desiredBackupJob(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, claim, image string, deadline int64) *batchv1.Job {
	labels := runLabels(pb, run)
	labels["app.kubernetes.io/component"] = "backup-mover"
	env := []corev1.EnvVar{
		{Name: mover.EnvSourceDir, Value: volumeMount},
		{Name: mover.EnvBackupID, Value: run.ID},
		{Name: mover.EnvArchiveKey, Value: archiveKey(pb, run.ID)},
		{Name: mover.EnvManifestKey, Value: manifestKey(pb, run.ID)},
		{Name: mover.EnvSourceNamespace, Value: pb.Namespace},
		{Name: mover.EnvSourcePVC, Value: pb.Spec.PVCName},
		{Name: mover.EnvScheduledTime, Value: run.ScheduledTime.UTC().Format(time.RFC3339)},
		{Name: mover.EnvProgressKey, Value: progressKey(backupPrefix(pb), run.ID)},
	}
	kopia := run.Engine == storagev1.EngineKopia
	if kopia {
		env = append(env, kopiaEnv(backupSource(pb), backupPrefix(pb))...)
		env = append(env, corev1.EnvVar{Name: mover.EnvKopiaRecordKey, Value: repositoryRecordKey(backupPrefix(pb))})
		if kd := keyDerivation(pb.Spec.Kopia); kd != "" {
			env = append(env, corev1.EnvVar{Name: mover.EnvKopiaKeyDerivation, Value: kd})
		}
	}
	job := desiredMoverJob(backupSource(pb), image, moverJob{
		name: runObjectName(pb, run), labels: labels, command: "backup", claim: claim, readOnly: true, options: pb.Spec.Mover,
		deadline: deadline, env: env, kopiaCache: kopia,
	})
	job.Annotations = runAnnotations(pb, run)
	return job
}

// desiredVerifyJob is the Job that reads the backup of a run back from S3 and checks it against
// its manifest, writing nothing.
func desiredVerifyJob(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, image string, deadline int64) *batchv1.Job {
	labels := runLabels(pb, run)
	labels["app.kubernetes.io/component"] = "backup-verifier"
	env := []corev1.EnvVar{
		{Name: mover.EnvArchiveKey, Value: archiveKey(pb, run.ID)},
		{Name: mover.EnvManifestKey, Value: manifestKey(pb, run.ID)},
	}
	kopia := run.Engine == storagev1.EngineKopia
	if kopia {
		env = append(env[1:], kopiaEnv(backupSource(pb), backupPrefix(pb))...)
	}
	return desiredMoverJob(backupSource(pb), image, moverJob{
		name: verifyJobName(pb, run), labels: labels, command: "verify", options: pb.Spec.Mover, deadline: deadline,
		env: env, kopiaCache: kopia,
	})
}
