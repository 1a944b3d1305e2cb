package pvcbackup

import (
	"testing"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// A credentials Secret with a key that is there but empty is reported as an empty key, not as a
// missing one ("has no key" sends the user to fix the key's name, "empty" to fix its value); a
// missing key is still reported as missing, and so is the key of a CA bundle Secret, which used
// to pass unnoticed until the mover pod could not mount it.
func TestCredentialsWithAnEmptyKeyAreReportedAsEmpty(t *testing.T) {
	w := newWorld(t)
	w.Secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	w.Secret("empty-secret-key", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": ""})
	w.Secret("no-access-key", map[string]string{"AWS_SECRET_ACCESS_KEY": "secret"})
	w.Secret("ca-without-key", map[string]string{"tls.crt": "not a CA bundle"})
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
			pb := w.Backup("creds-"+string(rune('a'+i)), "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"} // a run is due: the credentials are read
			tt.mutate(pb)
			w.Create(pb)
			w.Reconcile(pb)
			ready := storagetest.Condition(pb, storagev1.ConditionReady)
			if ready.Reason != storagekit.ReasonCredentialsNotFound || ready.Message != tt.message {
				t.Fatalf("Ready = %s %q\nwant   %s %q", ready.Reason, ready.Message, storagekit.ReasonCredentialsNotFound, tt.message)
			}
			if pb.Status.ActiveRun != nil {
				t.Errorf("a run started without usable credentials")
			}
		})
	}
}
