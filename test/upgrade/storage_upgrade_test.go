package upgrade

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// storageReleaseRef is the commit of release 0.3.0 as shipped: the last commit that touched
// releases/0.3.0 (17c8836 regenerated it with the RBAC the storage version migration needs; 32427b1
// first wrote it). Its manager and mover know one engine, tar+zstd archives: no spec.engine, no
// status.engine.
const storageReleaseRef = "17c8836"

const (
	backupName = "app"
	credsName  = "s3-credentials"
	bucketName = "backups"
)

// storageStory is a story with a real MinIO: the test plays the kubelet for mover Jobs by running
// the mover of the manager binary that created them (a Job runs the operator's own image).
type storageStory struct {
	*story
	minio *testenv.MinIO
	s3    *minio.Client
}

// Users upgrading from 0.3.0 (docs/upgrades.md, "0.3.0 → 0.4.0: the kopia engine") keep their
// PVCBackups on the archive engine: the current manager, taking over a PVCBackup the 0.3.0
// manager made backups for, reports status.engine Archive at once, runs archive Jobs (no kopia
// environment, no repository password needed), keeps the old backups in its catalog and in the
// bucket, and restores one of them.
func TestStorageUpgradeKeepsArchiveBackups(t *testing.T) {
	began := time.Now()
	s := &storageStory{story: newStory(t, storagev1.AddToScheme)}

	done := step(t, "build the 0.3.0 manager (git "+storageReleaseRef+") and the current manager")
	oldBin := s.buildRelease("0.3.0", storageReleaseRef)
	newBin := s.buildCurrent()
	done()

	done = step(t, "0.3.0: its CRDs and manager, a MinIO bucket, a PVC, its S3 credentials (no repository password: 0.3.0 had none) and a PVCBackup without spec.engine")
	s.startMinIO()
	s.applyCRDs("releases/0.3.0/manifests")
	old := s.startManager("0.3.0", "releases/0.3.0/manifests", oldBin, s.webhookArgs(s.freePort())...)
	s.createBackup()
	done()

	done = step(t, "0.3.0 makes two archive backups")
	first := s.volume("1")
	run1 := s.backupNow("1", oldBin, first)
	run2 := s.backupNow("2", oldBin, s.volume("2"))
	old030 := []string{run1.ID, run2.ID}
	for _, run := range []storagev1.RunStatus{run1, run2} {
		if run.Engine != "" || !strings.HasSuffix(run.ObjectKey, ".tar.zst") {
			t.Fatalf("0.3.0 run %s: engine %q, object %s; want no engine and an archive", run.ID, run.Engine, run.ObjectKey)
		}
	}
	if got := backupIDs(s.get()); !slices.Equal(got, []string{run2.ID, run1.ID}) {
		t.Fatalf("0.3.0 status.backups %v, want [%s %s]", got, run2.ID, run1.ID)
	}
	done()

	done = step(t, "stop 0.3.0, apply the current storage CRDs, start the current manager: status.engine is Archive at once")
	old.stop()
	applyStorageCRDs(t, s.ctx, s.k8s, s.env, filepath.Join(s.root, "config", "crd", "bases"))
	started := time.Now()
	current := s.startManager("current", "bundle/manifests", newBin, s.webhookArgs(s.freePort())...)
	s.eventually(30*time.Second, func() error {
		pb := s.get()
		switch pb.Status.Engine {
		case storagev1.EngineArchive:
		case "":
			return fmt.Errorf("status.engine not resolved yet; Ready %+v", meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionReady))
		default:
			t.Fatalf("after the upgrade, status.engine is %q: the PVCBackup of 0.3.0 switched engines", pb.Status.Engine)
		}
		if c := meta.FindStatusCondition(pb.Status.Conditions, storagev1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("engine Archive but Ready %+v", c)
		}
		return nil
	})
	t.Logf("status.engine Archive and Ready %s after the current manager started", time.Since(started).Round(time.Millisecond))
	done()

	done = step(t, "the next backup is an archive Job; the 0.3.0 backups stay in the catalog and the bucket")
	run3 := s.backupNow("3", newBin, s.volume("3"), func(job *batchv1.Job) {
		env := jobEnv(job)
		if env[mover.EnvEngine] == mover.EngineKopia || env[mover.EnvKopiaPassword] != "" || env[mover.EnvKopiaPrefix] != "" {
			t.Fatalf("the first backup Job after the upgrade runs kopia: %v", env)
		}
	})
	if run3.Engine != storagev1.EngineArchive || !strings.HasSuffix(run3.ObjectKey, ".tar.zst") {
		t.Fatalf("first run after the upgrade: engine %q, object %s; want an archive", run3.Engine, run3.ObjectKey)
	}
	pb := s.get()
	if got := backupIDs(pb); !slices.Equal(got, []string{run3.ID, run2.ID, run1.ID}) {
		t.Fatalf("status.backups after the upgrade %v, want [%s %s %s]", got, run3.ID, run2.ID, run1.ID)
	}
	for _, b := range pb.Status.Backups {
		if b.Engine != storagev1.EngineArchive || !strings.HasSuffix(b.ObjectKey, ".tar.zst") {
			t.Errorf("status.backups entry %+v: want an Archive backup", b)
		}
	}
	if pb.Status.Engine != storagev1.EngineArchive || pb.Status.Repository != nil {
		t.Errorf("status.engine %q, repository %+v; want Archive and no repository", pb.Status.Engine, pb.Status.Repository)
	}
	prefix := s.ns + "/" + backupName + "/"
	for _, id := range old030 {
		for _, key := range []string{prefix + id + ".tar.zst", prefix + id + ".manifest.json"} {
			if _, err := s.s3.StatObject(s.ctx, bucketName, key, minio.StatObjectOptions{}); err != nil {
				t.Errorf("backup %s of 0.3.0 lost after the upgrade: %s: %v", id, key, err)
			}
		}
	}
	if keys := s.keys(prefix + "kopia/"); len(keys) > 0 {
		t.Errorf("a kopia repository appeared under %skopia/: %v", prefix, keys)
	}
	done()

	done = step(t, "a PVCRestore of the first 0.3.0 backup restores it")
	s.restoreAndCompare(run1.ID, newBin, first)
	done()

	current.stop()
	t.Logf("storage upgrade story took %s", time.Since(began).Round(time.Second))
}

// startMinIO starts MinIO and creates the bucket.
func (s *storageStory) startMinIO() {
	s.minio = testenv.StartMinIO(s.t)
	var err error
	s.s3, err = minio.New(s.minio.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.minio.AccessKey, s.minio.SecretKey, "")})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.s3.MakeBucket(s.ctx, bucketName, minio.MakeBucketOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// createBackup creates what a 0.3.0 user had: the PVC, the S3 credentials and a PVCBackup with a
// yearly schedule (the story triggers its runs by hand) and a retention that keeps all of them;
// then waits until the manager reports it Ready.
func (s *storageStory) createBackup() {
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: credsName},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s.minio.AccessKey, "AWS_SECRET_ACCESS_KEY": s.minio.SecretKey}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
		&storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: backupName},
			Spec: storagev1.PVCBackupSpec{PVCName: "data", Schedule: "0 0 1 1 *", S3Bucket: bucketName,
				S3:        storagev1.S3Location{Endpoint: s.minio.Endpoint, Insecure: true, CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: credsName}},
				Retention: &storagev1.Retention{KeepLast: 5}}},
	}
	for _, o := range objs {
		if err := s.k8s.Create(s.ctx, o); err != nil {
			s.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	s.eventually(30*time.Second, func() error {
		c := meta.FindStatusCondition(s.get().Status.Conditions, storagev1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PVCBackup not Ready: %+v", c)
		}
		return nil
	})
}

func (s *storageStory) get() *storagev1.PVCBackup {
	s.t.Helper()
	pb := &storagev1.PVCBackup{}
	if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: backupName}, pb); err != nil {
		s.t.Fatal(err)
	}
	return pb
}

// backupNow sets spec.trigger.manual to value, plays the kubelet for the backup Job the manager
// creates (after checking it with each of check) with the mover of bin, and returns the run as the
// manager recorded it. It fails the test unless the run succeeded.
func (s *storageStory) backupNow(value, bin, dir string, check ...func(*batchv1.Job)) storagev1.RunStatus {
	s.t.Helper()
	// A manual run is named after the second it starts in: never two in one second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	patch := fmt.Sprintf(`{"spec":{"trigger":{"manual":%q}}}`, value)
	if err := s.k8s.Patch(s.ctx, &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: backupName}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		s.t.Fatal(err)
	}
	var job *batchv1.Job
	s.eventually(30*time.Second, func() error {
		run := s.get().Status.ActiveRun
		if run == nil {
			return fmt.Errorf("no active run for trigger %q", value)
		}
		jobs := &batchv1.JobList{}
		if err := s.k8s.List(s.ctx, jobs, client.InNamespace(s.ns),
			client.MatchingLabels{"storage.okgoes.com/pvcbackup": backupName, "storage.okgoes.com/run": run.ID}); err != nil {
			return err
		}
		if len(jobs.Items) != 1 {
			return fmt.Errorf("run %s: %d Jobs", run.ID, len(jobs.Items))
		}
		job = &jobs.Items[0]
		return nil
	})
	for _, c := range check {
		c(job)
	}
	id := job.Labels["storage.okgoes.com/run"]
	s.playJob(job, bin, dir)
	var last storagev1.RunStatus
	s.eventually(30*time.Second, func() error {
		pb := s.get()
		if pb.Status.LastRun == nil || pb.Status.LastRun.ID != id {
			return fmt.Errorf("run %s not recorded yet (active %+v)", id, pb.Status.ActiveRun)
		}
		last = *pb.Status.LastRun
		return nil
	})
	if last.Result != storagev1.RunSucceeded {
		s.t.Fatalf("run %s: %s: %s", id, last.Result, last.Message)
	}
	return last
}

// restoreAndCompare restores backup id of the PVCBackup into a new PVC, plays its Job with the
// mover of bin, and compares what was restored with want.
func (s *storageStory) restoreAndCompare(id, bin, want string) {
	s.t.Helper()
	pr := &storagev1.PVCRestore{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "back"},
		Spec: storagev1.PVCRestoreSpec{
			Source: storagev1.RestoreSource{PVCBackup: backupName, BackupID: id},
			Target: &storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: "back-data", Size: resource.MustParse("1Gi")}},
		}}
	if err := s.k8s.Create(s.ctx, pr); err != nil {
		s.t.Fatal(err)
	}
	job := &batchv1.Job{}
	s.eventually(30*time.Second, func() error {
		return s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: "back-restore"}, job)
	})
	if env := jobEnv(job); env[mover.EnvEngine] == mover.EngineKopia || env[mover.EnvKopiaPassword] != "" {
		s.t.Fatalf("the restore of archive backup %s runs kopia: %v", id, env)
	}
	dir := s.t.TempDir()
	s.playJob(job, bin, dir)
	s.eventually(30*time.Second, func() error {
		if err := s.k8s.Get(s.ctx, client.ObjectKeyFromObject(pr), pr); err != nil {
			return err
		}
		switch pr.Status.Phase {
		case storagev1.RestoreSucceeded:
			return nil
		case storagev1.RestoreFailed:
			s.t.Fatalf("restore of %s failed: %+v", id, pr.Status)
		}
		return fmt.Errorf("restore phase %q", pr.Status.Phase)
	})
	if pr.Status.BackupID != id || pr.Status.Engine != storagev1.EngineArchive {
		s.t.Errorf("restore status: backup %s engine %q; want %s, Archive", pr.Status.BackupID, pr.Status.Engine, id)
	}
	for _, name := range []string{"generation", "data.bin", "README"} {
		a, err := os.ReadFile(filepath.Join(want, name))
		if err != nil {
			s.t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(a) != string(b) {
			s.t.Errorf("%s differs after restoring backup %s (%v)", name, id, err)
		}
	}
}

// playJob plays the kubelet and the Job controller for a mover Job: it runs the Job's command with
// the mover of bin (the image of the manager that made the Job) and the Job's environment,
// resolved as the kubelet resolves it, with the volume at dir; it then writes the pod with the
// mover's report as its termination message, and the Job's final status.
func (s *storageStory) playJob(job *batchv1.Job, bin, dir string) {
	s.t.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	tmp := s.t.TempDir()
	termLog := filepath.Join(tmp, "termination-log")
	env := []string{"HOME=" + tmp, mover.EnvTerminationLog + "=" + termLog}
	for _, e := range c.Env {
		v := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			secret := &corev1.Secret{}
			if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: job.Namespace, Name: ref.SecretKeyRef.Name}, secret); err != nil {
				s.t.Fatal(err)
			}
			v = string(secret.Data[ref.SecretKeyRef.Key])
		}
		switch e.Name {
		case mover.EnvSourceDir, mover.EnvTargetDir:
			v = dir // the volume, mounted at its path in the pod
		}
		env = append(env, e.Name+"="+v)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	// The Job's program, from the image of bin: /manager is bin (`manager mover backup`, the
	// releases up to 0.4.0), /mover its sibling (goBuild).
	exe := bin
	if program := filepath.Base(c.Command[0]); program != "manager" {
		exe = filepath.Join(filepath.Dir(bin), program)
	}
	cmd := exec.CommandContext(ctx, exe, c.Command[1:]...)
	cmd.Env = env
	out, runErr := cmd.CombinedOutput()
	report, err := os.ReadFile(termLog)
	if err != nil {
		s.t.Fatalf("%s of Job %s wrote no report (%v): %v\n%s", strings.Join(c.Command, " "), job.Name, runErr, err, out)
	}
	exit := int32(0)
	if runErr != nil {
		exit = 1
		s.t.Logf("%s of Job %s failed: %v\n%s", strings.Join(c.Command, " "), job.Name, runErr, out)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-" + randomSuffix(s.t),
		Labels: map[string]string{"job-name": job.Name, "batch.kubernetes.io/job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	if err := s.k8s.Create(s.ctx, pod); err != nil {
		s.t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if exit != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: string(report)}}}}
	if err := s.k8s.Status().Update(s.ctx, pod); err != nil {
		s.t.Fatal(err)
	}

	now := metav1.Now()
	start := metav1.NewTime(now.Add(-time.Second))
	job.Status.StartTime = &start
	if exit == 0 {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	}
	if err := s.k8s.Status().Update(s.ctx, job); err != nil {
		s.t.Fatal(err)
	}
}

// volume is a small tree standing for the PVC's content at one time; generation tells the
// backups apart.
func (s *storageStory) volume(generation string) string {
	dir := s.t.TempDir()
	data := make([]byte, 256<<10)
	if _, err := rand.Read(data); err != nil {
		s.t.Fatal(err)
	}
	for name, content := range map[string][]byte{"generation": []byte(generation + "\n"), "data.bin": data, "README": []byte("hello\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	return dir
}

func (s *storageStory) keys(prefix string) []string {
	var keys []string
	for o := range s.s3.ListObjects(s.ctx, bucketName, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// jobEnv is the container environment of a Job: values, or "secret:<name>/<key>".
func jobEnv(job *batchv1.Job) map[string]string {
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

func backupIDs(pb *storagev1.PVCBackup) []string {
	var ids []string
	for _, b := range pb.Status.Backups {
		ids = append(ids, b.ID)
	}
	return ids
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
