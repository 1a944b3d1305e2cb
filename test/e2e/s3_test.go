//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// s3Server is a MinIO server running in the cluster as a pod behind a Service, with a bucket and a
// credentials Secret for the operator. The test reaches it through a port-forward with its own
// S3 client (minio-go), never through the operator's code.
// kopiaPassword is the repository password in the credentials Secret of every e2e MinIO.
const kopiaPassword = "e2e repository password"

type s3Server struct {
	endpoint  string // ClusterIP:9000, what PVCBackups use (the local cluster has no DNS)
	bucket    string
	secret    string // name of the credentials Secret
	accessKey string
	secretKey string
	client    *minio.Client
}

func deployMinIO(t *testing.T, ns string) *s3Server {
	t.Helper()
	s := &s3Server{bucket: "backups", secret: "s3-credentials", accessKey: "e2e-" + randomSuffix(), secretKey: randomSuffix() + randomSuffix() + randomSuffix()}
	labels := map[string]string{"app": "minio"}
	emptyDir := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minio", Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](1000)},
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: emptyDir}, {Name: "tmp", VolumeSource: emptyDir}},
			Containers: []corev1.Container{{
				Name: "minio", Image: cfg.minioImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/minio", "server", "/data", "--quiet", "--address", ":9000", "--console-address", ":9001"},
				Env: []corev1.EnvVar{{Name: "MINIO_ROOT_USER", Value: s.accessKey}, {Name: "MINIO_ROOT_PASSWORD", Value: s.secretKey},
					{Name: "MINIO_BROWSER", Value: "off"}, {Name: "MINIO_UPDATE", Value: "off"}, {Name: "HOME", Value: "/tmp"}},
				Ports:          []corev1.ContainerPort{{Name: "s3", ContainerPort: 9000}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/minio/health/ready", Port: intstr.FromInt32(9000)}}, PeriodSeconds: 1},
				VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "tmp", MountPath: "/tmp"}},
			}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minio"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "s3", Port: 9000, TargetPort: intstr.FromString("s3")}}},
	}
	must(t, k8s.Create(ctx, pod))
	must(t, k8s.Create(ctx, svc))
	must(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.secret},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s.accessKey, "AWS_SECRET_ACCESS_KEY": s.secretKey,
			"KOPIA_PASSWORD": kopiaPassword}}))
	eventually(t, "MinIO pod ready", 2*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err.Error()
		}
		return podReady(got), string(got.Status.Phase)
	})
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc))
	s.endpoint = svc.Spec.ClusterIP + ":9000"

	s.connect(t, ns)
	must(t, s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{}))
	return s
}

// connect points the test's S3 client at the MinIO pod of ns through a port-forward that lives as
// long as t.
func (s *s3Server) connect(t *testing.T, ns string) {
	t.Helper()
	var err error
	s.client, err = minio.New(portForward(t, ns, "minio", 9000), &minio.Options{Creds: credentials.NewStaticV4(s.accessKey, s.secretKey, "")})
	must(t, err)
}

// keys lists the object keys under prefix.
func (s *s3Server) keys(t *testing.T, prefix string) map[string]int64 {
	t.Helper()
	keys := map[string]int64{}
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		must(t, o.Err)
		keys[o.Key] = o.Size
	}
	return keys
}

// sha256Of downloads an object and returns its size and sha256.
func (s *s3Server) sha256Of(t *testing.T, key string) (int64, string) {
	t.Helper()
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	must(t, err)
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	must(t, err)
	return n, hex.EncodeToString(h.Sum(nil))
}
