package pvcrestore

import (
	"os"
	"path/filepath"
	"testing"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// A backup made before a password rotation restores during it (the Secret holds the new password
// and the old one under "<key>.previous", the repository still the old one) and after it (the
// next backup changed the repository's password; ".previous" removed, the new password alone).
func TestKopiaRestoreOfABackupMadeBeforeThePasswordRotation(t *testing.T) {
	const oldPassword, newPassword = "correct horse battery staple", "the password rotated in"
	key := storagev1.DefaultRepositoryPasswordKey
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.Must(os.WriteFile(filepath.Join(src, "README"), []byte("before the rotation"), 0o644))
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1 with the old password: %+v", res)
	}
	before := pb.Status.LastRun.ID

	w.EditSecret("s3-creds", map[string]string{key: newPassword, key + ".previous": oldPassword})
	restoreBefore := func(name string) {
		t.Helper()
		pr := newRestore(w.NS, name, "app")
		pr.Spec.Source.BackupID = before
		w.Must(k8s.Create(testCtx, pr))
		w.reconcileRestore(pr)
		dst := t.TempDir()
		w.restoreInto(pr, dst)
		if got, _ := os.ReadFile(filepath.Join(dst, "README")); pr.Status.Phase != storagev1.RestoreSucceeded || string(got) != "before the rotation" {
			t.Fatalf("restore %s of backup %s: %+v, README %q", name, before, pr.Status, got)
		}
	}
	restoreBefore("during")

	w.Must(os.WriteFile(filepath.Join(src, "README"), []byte("after the rotation"), 0o644))
	if res := w.KopiaRun(pb, first, 2, src); !res.Succeeded() || !res.PasswordRotated {
		t.Fatalf("run 2 with the new password and the old one as previous: %+v, want the rotation", res)
	}
	w.EditSecret("s3-creds", nil, key+".previous")
	restoreBefore("after")
}
