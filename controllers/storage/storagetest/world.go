package storagetest

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

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/run"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

const Bucket = "backups"

// World is one story's cluster namespace, MinIO, credentials and clock. Backups is the PVCBackup
// reconciler the story drives (Reconcile, ScheduledRun): a func, so that a story that swaps its
// reconciler (a flaky client, a lagging cache) is followed.
type World struct {
	T       *testing.T
	NS      string
	MinIO   *testenv.MinIO
	S3      *minio.Client
	Clock   *FakeClock
	Backups func() reconcile.Reconciler
}

// NewWorld starts a MinIO with the bucket Bucket and creates a namespace with the credentials
// Secret s3-creds (with a kopia repository password) and a PVC "data".
func NewWorld(t *testing.T) *World {
	t.Helper()
	w := &World{T: t, MinIO: testenv.StartMinIO(t), Clock: &FakeClock{}}
	var err error
	w.S3, err = minio.New(w.MinIO.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(w.MinIO.AccessKey, w.MinIO.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.S3.MakeBucket(Ctx, Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-"}}
	w.Must(K8s.Create(Ctx, ns))
	w.NS = ns.Name
	w.Must(K8s.Create(Ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "s3-creds"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey,
			storagev1.DefaultRepositoryPasswordKey: "correct horse battery staple"}}))
	w.Must(K8s.Create(Ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	return w
}

func (w *World) Must(err error) {
	w.T.Helper()
	if err != nil {
		w.T.Fatal(err)
	}
}

func (w *World) Backup(name, schedule string) *storagev1.PVCBackup {
	return &storagev1.PVCBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name},
		Spec: storagev1.PVCBackupSpec{
			// The stories of the archive engine name it; the kopia stories clear it (the default).
			PVCName: "data", Schedule: schedule, S3Bucket: Bucket, Engine: storagev1.EngineArchive,
			S3: storagev1.S3Location{Endpoint: w.MinIO.Endpoint, Insecure: true,
				CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3-creds"}},
		},
	}
}

// Create creates pb and sets the clock to its creation time.
func (w *World) Create(pb *storagev1.PVCBackup) {
	w.T.Helper()
	w.Must(K8s.Create(Ctx, pb))
	w.Clock.Set(pb.CreationTimestamp.Time)
}

// Reconcile reconciles pb as the manager does: once, and once more when that reconcile started a
// run (the create event of the run's first object wakes the reconcile that records the run).
func (w *World) Reconcile(pb *storagev1.PVCBackup) ctrl.Result {
	w.T.Helper()
	res, err := w.Backups().Reconcile(Ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pb)})
	if err != nil {
		w.T.Fatalf("reconcile: %v", err)
	}
	w.Must(K8s.Get(Ctx, client.ObjectKeyFromObject(pb), pb))
	if w.StartedUnrecorded(pb) {
		if res, err = w.Backups().Reconcile(Ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pb)}); err != nil {
			w.T.Fatalf("reconcile after the run's start: %v", err)
		}
		w.Must(K8s.Get(Ctx, client.ObjectKeyFromObject(pb), pb))
	}
	return res
}

// StartedUnrecorded tells whether pb has no active run but a run's first object (a Job or
// VolumeSnapshot with the run annotations) whose run its status does not record.
func (w *World) StartedUnrecorded(pb *storagev1.PVCBackup) bool {
	w.T.Helper()
	if pb.Status.ActiveRun != nil {
		return false
	}
	var objs []client.Object
	jobs := &batchv1.JobList{}
	w.Must(K8s.List(Ctx, jobs, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name}))
	for i := range jobs.Items {
		objs = append(objs, &jobs.Items[i])
	}
	snaps := &snapshotv1.VolumeSnapshotList{}
	err := K8s.List(Ctx, snaps, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name})
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) { // a story without the snapshot API
		w.T.Fatal(err)
	}
	for i := range snaps.Items {
		objs = append(objs, &snaps.Items[i])
	}
	groups := &groupsnapshotv1beta2.VolumeGroupSnapshotList{}
	err = K8s.List(Ctx, groups, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name})
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) && !runtime.IsNotRegisteredError(err) { // a story's scheme without them
		w.T.Fatal(err)
	}
	for i := range groups.Items {
		objs = append(objs, &groups.Items[i])
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

func (w *World) Job(pb *storagev1.PVCBackup) *batchv1.Job {
	w.T.Helper()
	if pb.Status.ActiveRun == nil {
		w.T.Fatal("no active run")
	}
	job := &batchv1.Job{}
	w.Must(K8s.Get(Ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, pb.Status.ActiveRun)}, job))
	return job
}

func (w *World) Jobs() []batchv1.Job {
	list := &batchv1.JobList{}
	w.Must(K8s.List(Ctx, list, client.InNamespace(w.NS)))
	return list.Items
}

// RunMover plays the kubelet for a mover Job: it resolves the container's environment the way
// the kubelet does (secretKeyRef from the Secret), points the source at dir, and runs the real
// mover code. It returns the mover's Result.
func (w *World) RunMover(job *batchv1.Job, dir string) mover.Result {
	w.T.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	env := w.MoverEnv(job)
	getenv := func(k string) string { return env[k] }
	switch c.Command[len(c.Command)-1] { // /mover backup|restore|verify|list
	case "restore":
		env[mover.EnvTargetDir] = dir
		return run.Restore(Ctx, getenv)
	case "verify":
		return run.Verify(Ctx, getenv)
	case "list":
		return run.List(Ctx, getenv)
	}
	env[mover.EnvSourceDir] = dir
	return run.Backup(Ctx, getenv, "test")
}

// MoverEnv is the environment of the mover container of job, as the kubelet resolves it.
func (w *World) MoverEnv(job *batchv1.Job) map[string]string {
	w.T.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := &corev1.Secret{}
			w.Must(K8s.Get(Ctx, client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}, s))
			v, ok := s.Data[ref.Key]
			switch {
			case ok:
				env[e.Name] = string(v)
			case ref.Optional == nil || !*ref.Optional:
				// The kubelet does not start a container whose required secretKeyRef is missing.
				w.T.Fatalf("Job %s: env %s names key %q of Secret %s, which it lacks: the kubelet would not start the pod",
					job.Name, e.Name, ref.Key, ref.Name)
			} // an optional key that is missing: the variable is not set
		}
	}
	env[mover.EnvTerminationLog] = filepath.Join(w.T.TempDir(), "termination-log")
	if env[mover.EnvKopiaCacheDir] != "" {
		env[mover.EnvKopiaCacheDir] = w.T.TempDir() // the Job's emptyDir
	}
	return env
}

// FinishPod writes the pod of a finished mover Job with the mover's result as its termination
// message, as the kubelet reports it.
func (w *World) FinishPod(job *batchv1.Job, res mover.Result) {
	w.T.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x7k2p",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	w.Must(K8s.Create(Ctx, pod))
	pod.Status.Phase = corev1.PodSucceeded
	exit := int32(0)
	if res.Result != "Succeeded" {
		pod.Status.Phase, exit = corev1.PodFailed, 1
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: string(MustJSON(w.T, res))}}}}
	w.Must(K8s.Status().Update(Ctx, pod))
}

// FinishJob writes the status the Job controller writes when the pod ended.
func (w *World) FinishJob(job *batchv1.Job, succeeded bool) {
	w.T.Helper()
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
	w.Must(K8s.Status().Update(Ctx, job))
}

// ObjectSHA256 downloads an object from MinIO and returns its size and sha256.
func (w *World) ObjectSHA256(key string) (int64, string) {
	w.T.Helper()
	obj, err := w.S3.GetObject(Ctx, Bucket, key, minio.GetObjectOptions{})
	w.Must(err)
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	w.Must(err)
	return n, hex.EncodeToString(h.Sum(nil))
}

func (w *World) Keys(prefix string) []string {
	var keys []string
	for o := range w.S3.ListObjects(Ctx, Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		w.Must(o.Err)
		keys = append(keys, o.Key)
	}
	return keys
}

// Volume is a small tree standing for the PVC's content.
func Volume(t *testing.T) string {
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

func MustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func ReqFor(o client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)}
}

func ControllerutilContains(o client.Object, f string) bool {
	return controllerutil.ContainsFinalizer(o, f)
}

func MinioMakeBucketOptions() minio.MakeBucketOptions { return minio.MakeBucketOptions{} }

func ReadAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

func BytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Deps are the reconcilers' dependencies in a story: reads through reader, the world's clock and
// MinIO, a 1 s poll.
func (w *World) Deps(reader client.Reader) storagekit.Deps {
	return storagekit.Deps{APIReader: reader, Clock: w.Clock, Stores: storagekit.MinioStores, MoverImage: "quay.io/okgoes/okgoes-operator:test",
		PollInterval: time.Second}
}

// ScheduledRun runs one scheduled backup of dir at the i-th hour after creation.
func (w *World) ScheduledRun(pb *storagev1.PVCBackup, first time.Time, i int, dir string) {
	w.T.Helper()
	w.Clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
	w.Reconcile(pb)
	if pb.Status.ActiveRun == nil {
		var names []string
		for _, j := range w.Jobs() {
			names = append(names, j.Name)
		}
		w.T.Fatalf("run %d did not start: Jobs %v, status %+v", i, names, pb.Status)
	}
	job := w.Job(pb)
	if res := w.RunMover(job, dir); !res.Succeeded() {
		w.T.Fatalf("run %d: %+v", i, res)
	}
	w.FinishJob(job, true)
	w.Clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
	w.Reconcile(pb)
}

func Condition(pb *storagev1.PVCBackup, t string) metav1.Condition {
	if c := meta.FindStatusCondition(pb.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// KopiaBackup is w.Backup with the default engine.
func (w *World) KopiaBackup(name, schedule string) *storagev1.PVCBackup {
	pb := w.Backup(name, schedule)
	pb.Spec.Engine = ""
	return pb
}

// CreateHourly creates the PVCBackup pb (an @hourly one), reconciles it once, and returns its
// first scheduled time: the next full hour after its creation.
func (w *World) CreateHourly(pb *storagev1.PVCBackup) time.Time {
	w.T.Helper()
	w.Create(pb)
	w.Reconcile(pb)
	return pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
}

// StartManual creates pb with the manual trigger manual and reconciles it: the manual run
// starts (and is recorded, Reconcile).
func (w *World) StartManual(pb *storagev1.PVCBackup, manual string) {
	w.T.Helper()
	pb.Spec.Trigger = &storagev1.Trigger{Manual: manual}
	w.Create(pb)
	w.Reconcile(pb)
}
