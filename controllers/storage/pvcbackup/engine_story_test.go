package pvcbackup

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// envOf is the container environment of a mover Job by name (values, or "secret:<name>/<key>").
func envOf(job *batchv1.Job) map[string]string {
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return env
}

// readyOf is the Ready condition of pb.
func readyOf(pb *storagev1.PVCBackup) (status, reason, message string) {
	c := meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionReady)
	if c == nil {
		return "", "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// A PVCBackup that does not name an engine backs up with kopia: the Job gets the engine, the
// repository under the PVCBackup's prefix, the password by secretKeyRef only (its value appears
// in no object), and kopia's cache in a size-limited emptyDir.
func TestANewPVCBackupUsesKopia(t *testing.T) {
	w := newWorld(t)
	pb := w.KopiaBackup("app", "0 * * * *")
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Add(time.Hour))
	w.Reconcile(pb)
	if pb.Status.Engine != storagev1.EngineKopia || pb.Status.ActiveRun == nil || pb.Status.ActiveRun.Engine != storagev1.EngineKopia {
		t.Fatalf("engine: status %q, active run %+v; want Kopia", pb.Status.Engine, pb.Status.ActiveRun)
	}
	job := w.Job(pb)
	env := envOf(job)
	want := map[string]string{
		mover.EnvEngine:        mover.EngineKopia,
		mover.EnvKopiaPrefix:   storagekit.BackupPrefix(pb) + "kopia",
		mover.EnvKopiaPassword: "secret:s3-creds/KOPIA_PASSWORD",
		mover.EnvKopiaCacheDir: storagekit.KopiaCacheDir,
		mover.EnvProgressKey:   storagekit.BackupPrefix(pb) + pb.Status.ActiveRun.ID + ".progress.json",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	var cache *corev1.Volume
	for i, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == "kopia-cache" {
			cache = &job.Spec.Template.Spec.Volumes[i]
		}
	}
	if cache == nil || cache.EmptyDir == nil || cache.EmptyDir.SizeLimit == nil || cache.EmptyDir.SizeLimit.Cmp(storagekit.KopiaCacheVolume) != 0 {
		t.Errorf("kopia cache volume = %+v, want an emptyDir limited to %s", cache, storagekit.KopiaCacheVolume.String())
	}
	data, _ := json.Marshal(job)
	if strings.Contains(string(data), "correct horse battery staple") {
		t.Error("the repository password is in the Job")
	}
	st, _ := json.Marshal(pb.Status)
	if strings.Contains(string(st), "correct horse battery staple") {
		t.Error("the repository password is in the status")
	}
}

// Kopia without a password in the Secret is a precise condition, polled, and no Job: never a
// generated password. Once the key is added, the due run starts. An explicit spec.engine Kopia is
// reported right after creation, before any run is due; Archive needs no password.
func TestKopiaWithoutAPasswordIsAPreciseCondition(t *testing.T) {
	w := newWorld(t)
	w.Secret("no-password", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})
	pb := w.KopiaBackup("app", "0 * * * *")
	pb.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Add(time.Hour))
	res := w.Reconcile(pb)
	status, reason, msg := readyOf(pb)
	if status != "False" || reason != storagekit.ReasonRepositoryPasswordMissing ||
		!strings.Contains(msg, `Secret "no-password" named by spec.s3.credentialsSecretRef has no key "KOPIA_PASSWORD"`) ||
		!strings.Contains(msg, "spec.engine empty") {
		t.Fatalf("Ready = %s %s %q", status, reason, msg)
	}
	if res.RequeueAfter != time.Second || len(w.Jobs()) != 0 || pb.Status.ActiveRun != nil {
		t.Fatalf("requeue %v, %d jobs, active run %+v; want a 1 s poll and nothing started", res.RequeueAfter, len(w.Jobs()), pb.Status.ActiveRun)
	}

	s := &corev1.Secret{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "no-password"}, s))
	s.Data["KOPIA_PASSWORD"] = []byte("now there is one")
	w.Must(k8s.Update(testCtx, s))
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil || envOf(w.Job(pb))[mover.EnvKopiaPassword] != "secret:no-password/KOPIA_PASSWORD" {
		t.Fatalf("after adding the password: active run %+v", pb.Status.ActiveRun)
	}

	explicit := w.Backup("explicit", "0 0 1 1 *")
	explicit.Spec.Engine = storagev1.EngineKopia
	explicit.Spec.S3.CredentialsSecretRef = storagev1.CredentialsSecretRef{Name: "s3-creds", RepositoryPasswordKey: "repo-pass"}
	w.Create(explicit)
	w.Reconcile(explicit)
	if status, reason, msg := readyOf(explicit); reason != storagekit.ReasonRepositoryPasswordMissing || !strings.Contains(msg, `"repo-pass"`) ||
		!strings.Contains(msg, "spec.engine Kopia") {
		t.Errorf("explicit Kopia: Ready = %s %s %q", status, reason, msg)
	}

	archive := w.Backup("archive", "0 0 1 1 *")
	archive.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Secret("no-password-either", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})
	archive.Spec.S3.CredentialsSecretRef.Name = "no-password-either"
	w.Create(archive)
	w.Reconcile(archive)
	if status, reason, msg := readyOf(archive); status != "True" {
		t.Errorf("Archive without a password: Ready = %s %s %q", status, reason, msg)
	}
}

// Upgrading the operator keeps an existing PVCBackup on the archive engine when it says nothing
// about engines: when its prefix holds archive backups, and when its last run was made by an
// operator without kopia. It needs no password, and its runs stay archives.
func TestAnExistingArchivePVCBackupStaysArchive(t *testing.T) {
	w := newWorld(t)
	w.Secret("no-password", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})
	dir := storagetest.Volume(t)

	// Made by the previous operator: an archive backup in the bucket, then the spec as it was
	// (no engine field).
	pb := w.Backup("old", "0 * * * *")
	pb.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Create(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour)
	w.ScheduledRun(pb, first, 1, dir)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("first run: %+v", pb.Status.LastRun)
	}
	pb.Spec.Engine = ""
	w.Must(k8s.Update(testCtx, pb))
	w.ScheduledRun(pb, first, 2, dir)
	if status, reason, msg := readyOf(pb); status != "True" || pb.Status.Engine != storagev1.EngineArchive {
		t.Fatalf("Ready = %s %s %q, engine %q; want Ready and Archive", status, reason, msg, pb.Status.Engine)
	}
	if pb.Status.LastRun.Engine != storagev1.EngineArchive || !strings.HasSuffix(pb.Status.LastRun.ObjectKey, ".tar.zst") {
		t.Fatalf("second run: %+v; want an archive", pb.Status.LastRun)
	}

	// A PVCBackup whose last run an older operator recorded (no engine) stays Archive even
	// with an empty prefix.
	older := w.KopiaBackup("older", "0 * * * *")
	older.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Create(older)
	older.Status.LastRun = &storagev1.RunStatus{ID: "20260101T000000Z", Result: storagev1.RunFailed, Message: "made by 0.3.0",
		ScheduledTime: older.CreationTimestamp, StartTime: older.CreationTimestamp, CompletionTime: older.CreationTimestamp}
	w.Must(k8s.Status().Update(testCtx, older))
	w.Clock.Set(older.CreationTimestamp.Add(time.Hour))
	w.Reconcile(older)
	if older.Status.ActiveRun == nil || older.Status.ActiveRun.Engine != storagev1.EngineArchive {
		t.Fatalf("older: active run %+v, Ready %v", older.Status.ActiveRun, older.Status.Conditions)
	}
	if e := envOf(w.Job(older))[mover.EnvEngine]; e == mover.EngineKopia {
		t.Fatal("older: the Job runs kopia")
	}
}

// Right after an upgrade, a PVCBackup the previous operator left (spec and status acted on, no
// status.engine) shows the engine of its next run at once, not only when that run starts: the
// first reconcile of the new operator resolves it although no run is due and the spec did not
// change.
func TestEngineOfAnUpgradedPVCBackupShowsBeforeItsNextRun(t *testing.T) {
	w := newWorld(t)
	w.Secret("no-password", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})
	pb := w.KopiaBackup("upgraded", "0 0 1 1 *")
	pb.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Create(pb)
	// What 0.3.0 wrote: the generation acted on, Ready, a last run without an engine.
	done := pb.CreationTimestamp
	pb.Status = storagev1.PVCBackupStatus{ObservedGeneration: pb.Generation,
		LastRun: &storagev1.RunStatus{ID: "20260101T000000Z", Result: storagev1.RunSucceeded, ScheduledTime: done, StartTime: done, CompletionTime: done},
		Conditions: []metav1.Condition{{Type: storagev1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonScheduled,
			Message: "next backup at 2027-01-01T00:00:00Z", ObservedGeneration: pb.Generation, LastTransitionTime: done}}}
	w.Must(k8s.Status().Update(testCtx, pb))
	w.Clock.Set(pb.CreationTimestamp.Add(time.Minute))
	w.Reconcile(pb)
	if pb.Status.Engine != storagev1.EngineArchive {
		t.Fatalf("status.engine = %q after the first reconcile of the new operator, want Archive", pb.Status.Engine)
	}
	if status, reason, msg := readyOf(pb); status != "True" || pb.Status.ActiveRun != nil || len(w.Jobs()) != 0 {
		t.Fatalf("Ready = %s %s %q, active run %+v, %d jobs; want Ready and nothing started", status, reason, msg, pb.Status.ActiveRun, len(w.Jobs()))
	}
}

// A failed run records the engine it ran with: a kopia PVCBackup whose run failed (a wrong
// password, S3 down) stays kopia, rather than looking like a run of an operator without kopia,
// which would turn its next run into an archive.
func TestEngineOfAFailedKopiaRunIsRecorded(t *testing.T) {
	w := newWorld(t)
	pb := w.KopiaBackup("app", "0 * * * *")
	w.Create(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour)
	w.Clock.Set(first.Add(time.Hour + time.Minute))
	w.Reconcile(pb)
	w.FinishJob(w.Job(pb), false)
	w.Clock.Set(first.Add(time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if last := pb.Status.LastRun; last == nil || last.Result != storagev1.RunFailed || last.Engine != storagev1.EngineKopia {
		t.Fatalf("last run %+v; want a failed Kopia run", last)
	}
	w.Clock.Set(first.Add(2*time.Hour + time.Minute))
	w.Reconcile(pb)
	if run := pb.Status.ActiveRun; run == nil || run.Engine != storagev1.EngineKopia || pb.Status.Engine != storagev1.EngineKopia {
		t.Fatalf("the run after a failed kopia run: %+v, status.engine %q; want Kopia", run, pb.Status.Engine)
	}
	if e := envOf(w.Job(pb))[mover.EnvEngine]; e != mover.EngineKopia {
		t.Fatalf("the run after a failed kopia run has %s=%q", mover.EnvEngine, e)
	}
}

// A PVCBackup of an operator without kopia whose runs all failed (its prefix holds no archive)
// stays Archive when its first run after the upgrade fails too: the engine of the last run
// decides, not the absence of archives.
func TestEngineOfAnUpgradedPVCBackupSurvivesAFailedRun(t *testing.T) {
	w := newWorld(t)
	w.Secret("no-password", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})
	pb := w.KopiaBackup("failing", "0 * * * *")
	pb.Spec.S3.CredentialsSecretRef.Name = "no-password"
	w.Create(pb)
	first := pb.CreationTimestamp.Time.Truncate(time.Hour)
	pb.Status.LastRun = &storagev1.RunStatus{ID: "20260101T000000Z", Result: storagev1.RunFailed, Message: "made by 0.3.0",
		ScheduledTime: pb.CreationTimestamp, StartTime: pb.CreationTimestamp, CompletionTime: pb.CreationTimestamp}
	w.Must(k8s.Status().Update(testCtx, pb))
	for i := 1; i <= 2; i++ {
		w.Clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
		w.Reconcile(pb)
		if run := pb.Status.ActiveRun; run == nil || run.Engine != storagev1.EngineArchive || envOf(w.Job(pb))[mover.EnvEngine] == mover.EngineKopia {
			status, reason, msg := readyOf(pb)
			t.Fatalf("run %d: %+v, Ready = %s %s %q; want an archive run", i, run, status, reason, msg)
		}
		w.FinishJob(w.Job(pb), false)
		w.Clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
		w.Reconcile(pb)
		if last := pb.Status.LastRun; last.Result != storagev1.RunFailed || last.Engine != storagev1.EngineArchive {
			t.Fatalf("run %d: last run %+v; want a failed Archive run", i, last)
		}
	}
}
