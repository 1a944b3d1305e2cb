package storage

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

const bucket = "backups"

// world is one story's cluster namespace, MinIO, credentials and reconciler.
type world struct {
	t     *testing.T
	ns    string
	minio *testenv.MinIO
	s3    *minio.Client
	clock *fakeClock
	r     *PVCBackupReconciler
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, minio: testenv.StartMinIO(t), clock: &fakeClock{}}
	var err error
	w.s3, err = minio.New(w.minio.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(w.minio.AccessKey, w.minio.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.s3.MakeBucket(testCtx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-"}}
	w.must(k8s.Create(testCtx, ns))
	w.ns = ns.Name
	w.must(k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "s3-creds"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": w.minio.AccessKey, "AWS_SECRET_ACCESS_KEY": w.minio.SecretKey,
			storagev1.DefaultRepositoryPasswordKey: "correct horse battery staple"}}))
	w.must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	w.r = &PVCBackupReconciler{Client: k8s, Deps: w.deps(k8s), SnapshotsAvailable: true}
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) backup(name, schedule string) *storagev1.PVCBackup {
	return &storagev1.PVCBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: storagev1.PVCBackupSpec{
			// The stories of the archive engine name it; the kopia stories clear it (the default).
			PVCName: "data", Schedule: schedule, S3Bucket: bucket, Engine: storagev1.EngineArchive,
			S3: storagev1.S3Location{Endpoint: w.minio.Endpoint, Insecure: true,
				CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3-creds"}},
		},
	}
}

// create creates pb and sets the clock to its creation time.
func (w *world) create(pb *storagev1.PVCBackup) {
	w.t.Helper()
	w.must(k8s.Create(testCtx, pb))
	w.clock.Set(pb.CreationTimestamp.Time)
}

// reconcile reconciles pb as the manager does: once, and once more when that reconcile started a
// run (the create event of the run's first object wakes the reconcile that records the run).
func (w *world) reconcile(pb *storagev1.PVCBackup) ctrl.Result {
	w.t.Helper()
	res, err := w.r.Reconcile(testCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pb)})
	if err != nil {
		w.t.Fatalf("reconcile: %v", err)
	}
	w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if w.startedUnrecorded(pb) {
		if res, err = w.r.Reconcile(testCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pb)}); err != nil {
			w.t.Fatalf("reconcile after the run's start: %v", err)
		}
		w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	}
	return res
}

// startedUnrecorded tells whether pb has no active run but a run's first object (a Job or
// VolumeSnapshot with the run annotations) whose run its status does not record.
func (w *world) startedUnrecorded(pb *storagev1.PVCBackup) bool {
	w.t.Helper()
	if pb.Status.ActiveRun != nil {
		return false
	}
	var objs []client.Object
	jobs := &batchv1.JobList{}
	w.must(k8s.List(testCtx, jobs, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name}))
	for i := range jobs.Items {
		objs = append(objs, &jobs.Items[i])
	}
	snaps := &snapshotv1.VolumeSnapshotList{}
	err := k8s.List(testCtx, snaps, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name})
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) { // a story without the snapshot API
		w.t.Fatal(err)
	}
	for i := range snaps.Items {
		objs = append(objs, &snaps.Items[i])
	}
	for _, o := range objs {
		if _, first := o.GetAnnotations()[storagekit.AnnotationScheduledTime]; !first || !o.GetDeletionTimestamp().IsZero() {
			continue
		}
		recorded := false
		for _, h := range pb.Status.History {
			recorded = recorded || h.ID == o.GetLabels()[storagekit.LabelRun]
		}
		if !recorded {
			return true
		}
	}
	return false
}

func (w *world) job(pb *storagev1.PVCBackup) *batchv1.Job {
	w.t.Helper()
	if pb.Status.ActiveRun == nil {
		w.t.Fatal("no active run")
	}
	job := &batchv1.Job{}
	w.must(k8s.Get(testCtx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, pb.Status.ActiveRun)}, job))
	return job
}

func (w *world) jobs() []batchv1.Job {
	list := &batchv1.JobList{}
	w.must(k8s.List(testCtx, list, client.InNamespace(w.ns)))
	return list.Items
}

// runMover plays the kubelet for a mover Job: it resolves the container's environment the way
// the kubelet does (secretKeyRef from the Secret), points the source at dir, and runs the real
// mover code. It returns the mover's Result.
func (w *world) runMover(job *batchv1.Job, dir string) mover.Result {
	w.t.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	env := w.moverEnv(job)
	getenv := func(k string) string { return env[k] }
	switch c.Command[len(c.Command)-1] { // /mover backup|restore|verify
	case "restore":
		env[mover.EnvTargetDir] = dir
		return mover.RunRestore(testCtx, getenv)
	case "verify":
		return mover.RunVerify(testCtx, getenv)
	}
	env[mover.EnvSourceDir] = dir
	return mover.RunBackup(testCtx, getenv, "test")
}

// moverEnv is the environment of the mover container of job, as the kubelet resolves it.
func (w *world) moverEnv(job *batchv1.Job) map[string]string {
	w.t.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			s := &corev1.Secret{}
			w.must(k8s.Get(testCtx, client.ObjectKey{Namespace: job.Namespace, Name: e.ValueFrom.SecretKeyRef.Name}, s))
			env[e.Name] = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
		}
	}
	env[mover.EnvTerminationLog] = filepath.Join(w.t.TempDir(), "termination-log")
	if env[mover.EnvKopiaCacheDir] != "" {
		env[mover.EnvKopiaCacheDir] = w.t.TempDir() // the Job's emptyDir
	}
	return env
}

// finishPod writes the pod of a finished mover Job with the mover's result as its termination
// message, as the kubelet reports it.
func (w *world) finishPod(job *batchv1.Job, res mover.Result) {
	w.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x7k2p",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	w.must(k8s.Create(testCtx, pod))
	pod.Status.Phase = corev1.PodSucceeded
	exit := int32(0)
	if res.Result != "Succeeded" {
		pod.Status.Phase, exit = corev1.PodFailed, 1
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: string(mustJSON(w.t, res))}}}}
	w.must(k8s.Status().Update(testCtx, pod))
}

// finishJob writes the status the Job controller writes when the pod ended.
func (w *world) finishJob(job *batchv1.Job, succeeded bool) {
	w.t.Helper()
	now := metav1.Now()
	if job.Status.StartTime == nil {
		start := metav1.NewTime(now.Add(-time.Second))
		job.Status.StartTime = &start
	}
	job.Status.Active = 0
	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
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
	w.must(k8s.Status().Update(testCtx, job))
}

// objectSHA256 downloads an object from MinIO and returns its size and sha256.
func (w *world) objectSHA256(key string) (int64, string) {
	w.t.Helper()
	obj, err := w.s3.GetObject(testCtx, bucket, key, minio.GetObjectOptions{})
	w.must(err)
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	w.must(err)
	return n, hex.EncodeToString(h.Sum(nil))
}

func (w *world) keys(prefix string) []string {
	var keys []string
	for o := range w.s3.ListObjects(testCtx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		w.must(o.Err)
		keys = append(keys, o.Key)
	}
	return keys
}

// volume is a small tree standing for the PVC's content.
func volume(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := make([]byte, 3<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"db/data.bin": data, "db/empty": nil, "README": []byte("hello\n")} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("db/data.bin", filepath.Join(dir, "latest")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func reqFor(o client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)}
}

func controllerutilContains(o client.Object, f string) bool {
	return controllerutil.ContainsFinalizer(o, f)
}

func minioMakeBucketOptions() minio.MakeBucketOptions { return minio.MakeBucketOptions{} }

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// deps are the reconcilers' dependencies in a story: reads through reader, the world's clock and
// MinIO, a 1 s poll.
func (w *world) deps(reader client.Reader) storagekit.Deps {
	return storagekit.Deps{APIReader: reader, Clock: w.clock, Stores: storagekit.MinioStores, MoverImage: "quay.io/okgoes/okgoes-operator:test",
		PollInterval: time.Second}
}

// scheduledRun runs one scheduled backup of dir at the i-th hour after creation.
func (w *world) scheduledRun(pb *storagev1.PVCBackup, first time.Time, i int, dir string) {
	w.t.Helper()
	w.clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
	w.reconcile(pb)
	if pb.Status.ActiveRun == nil {
		var names []string
		for _, j := range w.jobs() {
			names = append(names, j.Name)
		}
		w.t.Fatalf("run %d did not start: Jobs %v, status %+v", i, names, pb.Status)
	}
	job := w.job(pb)
	if res := w.runMover(job, dir); !res.Succeeded() {
		w.t.Fatalf("run %d: %+v", i, res)
	}
	w.finishJob(job, true)
	w.clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
	w.reconcile(pb)
}
