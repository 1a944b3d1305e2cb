package storage

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// secret creates a Secret in the world's namespace whose data is exactly data (an empty string is
// a key with an empty value, as `kubectl create secret --from-literal=AWS_ACCESS_KEY_ID=` makes).
func (w *world) secret(name string, data map[string]string) {
	w.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	w.must(k8s.Create(testCtx, s))
	got := &corev1.Secret{}
	w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(s), got))
	for k := range data {
		if _, ok := got.Data[k]; !ok {
			w.t.Fatalf("Secret %s lost key %q: the story would prove nothing", name, k)
		}
	}
}

// A credentials Secret with a key that is there but empty is reported as an empty key, not as a
// missing one ("has no key" sends the user to fix the key's name, "empty" to fix its value); a
// missing key is still reported as missing, and so is the key of a CA bundle Secret, which used
// to pass unnoticed until the mover pod could not mount it.
func TestCredentialsWithAnEmptyKeyAreReportedAsEmpty(t *testing.T) {
	w := newWorld(t)
	w.secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	w.secret("empty-secret-key", map[string]string{"AWS_ACCESS_KEY_ID": w.minio.AccessKey, "AWS_SECRET_ACCESS_KEY": ""})
	w.secret("no-access-key", map[string]string{"AWS_SECRET_ACCESS_KEY": "secret"})
	w.secret("ca-without-key", map[string]string{"tls.crt": "not a CA bundle"})
	tests := []struct {
		name    string
		mutate  func(*storagev1.PVCBackup)
		message string
	}{
		{"empty access key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "empty-access-key" },
			`Secret "empty-access-key" has an empty key "AWS_ACCESS_KEY_ID"`},
		{"empty secret key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "empty-secret-key" },
			`Secret "empty-secret-key" has an empty key "AWS_SECRET_ACCESS_KEY"`},
		{"missing access key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "no-access-key" },
			`Secret "no-access-key" has no key "AWS_ACCESS_KEY_ID"`},
		{"missing renamed key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.AccessKeyIDKey = "access" },
			`Secret "s3-creds" has no key "access"`},
		{"missing Secret", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "nope" },
			`Secret "nope" named by spec.s3.credentialsSecretRef does not exist`},
		{"CA bundle Secret without the key", func(pb *storagev1.PVCBackup) {
			pb.Spec.S3.CABundleSecretRef = &storagev1.SecretKeySelector{Name: "ca-without-key"}
		}, `Secret "ca-without-key" has no key "ca.crt"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := w.backup("creds-"+string(rune('a'+i)), "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"} // a run is due: the credentials are read
			tt.mutate(pb)
			w.create(pb)
			w.reconcile(pb)
			ready := condition(pb, storagev1.ConditionReady)
			if ready.Reason != storagekit.ReasonCredentialsNotFound || ready.Message != tt.message {
				t.Fatalf("Ready = %s %q\nwant   %s %q", ready.Reason, ready.Message, storagekit.ReasonCredentialsNotFound, tt.message)
			}
			if pb.Status.ActiveRun != nil {
				t.Errorf("a run started without usable credentials")
			}
		})
	}
}

// A PVCRestore has no spec.s3: its credentials are named by spec.source.s3.location, or by the
// spec.s3 of the PVCBackup that spec.source.pvcBackup names. Its messages say which.
func TestRestoreCredentialMessagesNameTheRestoresFields(t *testing.T) {
	w := newWorld(t)
	w.secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	elsewhere := w.backup("elsewhere", "@daily")
	elsewhere.Spec.S3.CredentialsSecretRef.Name = "gone"
	w.create(elsewhere)

	fromS3 := func(name, secret string) *storagev1.PVCRestore {
		pr := newRestore(w.ns, name, "")
		pr.Spec.Source.S3 = &storagev1.RestoreS3Source{Bucket: bucket, Namespace: "prod", PVCBackup: "app-data",
			Location: storagev1.S3Location{Endpoint: w.minio.Endpoint, Insecure: true,
				CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: secret}}}
		return pr
	}
	tests := []struct {
		restore *storagev1.PVCRestore
		message string
	}{
		{fromS3("from-s3-missing", "nope"),
			`Secret "nope" named by spec.source.s3.location.credentialsSecretRef does not exist`},
		{fromS3("from-s3-empty", "empty-access-key"),
			`Secret "empty-access-key" has an empty key "AWS_ACCESS_KEY_ID"`},
		{newRestore(w.ns, "from-backup", "elsewhere"),
			`Secret "gone" named by spec.s3.credentialsSecretRef of PVCBackup "elsewhere" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.restore.Name, func(t *testing.T) {
			pr := tt.restore
			w.must(k8s.Create(testCtx, pr))
			w.reconcileRestore(pr)
			c := condition2(pr)
			if c.Reason != storagekit.ReasonCredentialsNotFound || c.Message != tt.message {
				t.Fatalf("Complete = %s %q\nwant      %s %q", c.Reason, c.Message, storagekit.ReasonCredentialsNotFound, tt.message)
			}
			if pr.Spec.Source.S3 != nil && strings.Contains(c.Message, "by spec.s3.") {
				t.Errorf("the message names spec.s3, which a PVCRestore does not have: %q", c.Message)
			}
		})
	}
}
