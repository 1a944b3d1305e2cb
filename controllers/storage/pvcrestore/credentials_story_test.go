package pvcrestore

import (
	"strings"
	"testing"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// A PVCRestore has no spec.s3: its credentials are named by spec.source.s3.location, or by the
// spec.s3 of the PVCBackup that spec.source.pvcBackup names. Its messages say which.
func TestRestoreCredentialMessagesNameTheRestoresFields(t *testing.T) {
	w := newWorld(t)
	w.Secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	elsewhere := w.Backup("elsewhere", "@daily")
	elsewhere.Spec.S3.CredentialsSecretRef.Name = "gone"
	w.Create(elsewhere)

	fromS3 := func(name, secret string) *storagev1.PVCRestore {
		pr := newRestore(w.NS, name, "")
		pr.Spec.Source.S3 = &storagev1.RestoreS3Source{Bucket: storagetest.Bucket, Namespace: "prod", PVCBackup: "app-data",
			Location: storagev1.S3Location{Endpoint: w.MinIO.Endpoint, Insecure: true,
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
		{newRestore(w.NS, "from-backup", "elsewhere"),
			`Secret "gone" named by spec.s3.credentialsSecretRef of PVCBackup "elsewhere" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.restore.Name, func(t *testing.T) {
			pr := tt.restore
			w.Must(k8s.Create(testCtx, pr))
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
