package pvcrestore

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Issue 34, object lock, the day after: a PVCBackup backs up into a bucket with object lock
// (spec.kopia.immutability); then someone holding the operator's S3 credentials deletes every
// object of the backup (delete markers) and overwrites the repository's format blob. A restore of
// the backup as the bucket is now fails and touches nothing; a PVCRestore with
// spec.source.pointInTime before the attack resolves the backup from the manifest's version of
// then, the mover reads the repository as of then, and the volume comes back byte for byte.
func TestPointInTimeRestoreOfALockedBackupAfterAnAttack(t *testing.T) {
	w := newWorld(t)
	w.Must(w.S3.MakeBucket(testCtx, "locked", minio.MakeBucketOptions{ObjectLocking: true}))
	pb, src, first := w.KopiaStory("app", func(pb *storagev1.PVCBackup) {
		pb.Spec.S3Bucket = "locked"
		pb.Spec.Kopia = &storagev1.KopiaOptions{Immutability: &storagev1.Immutability{Mode: storagev1.ImmutabilityCompliance, Days: 2}}
	})
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("backup: %+v", res)
	}
	id := pb.Status.LastRun.ID
	time.Sleep(1100 * time.Millisecond)
	beforeAttack := metav1.NewTime(time.Now()) // whole seconds, as the API keeps it
	time.Sleep(1100 * time.Millisecond)

	prefix := w.NS + "/app/"
	for o := range w.S3.ListObjects(testCtx, "locked", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		w.Must(o.Err)
		if strings.HasSuffix(o.Key, "kopia.repository") {
			garbage := bytes.Repeat([]byte{0xAA}, 64)
			_, err := w.S3.PutObject(testCtx, "locked", o.Key, bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{})
			w.Must(err)
			continue
		}
		w.Must(w.S3.RemoveObject(testCtx, "locked", o.Key, minio.RemoveObjectOptions{}))
	}

	now := newRestore(w.NS, "now", "app")
	now.Spec.Source.BackupID = id
	w.Must(k8s.Create(testCtx, now))
	w.reconcileRestore(now)
	if c := condition2(now); now.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupNotFound {
		t.Fatalf("restore of %s as the bucket is now: phase %s, %s %q; want Failed BackupNotFound", id, now.Status.Phase, c.Reason, c.Message)
	}

	pr := newRestore(w.NS, "back", "app")
	pr.Spec.Source.BackupID, pr.Spec.Source.PointInTime = id, &beforeAttack
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != id || pr.Status.Engine != storagev1.EngineKopia || pr.Status.SnapshotID == "" {
		t.Fatalf("restore as of %v: status %+v", beforeAttack, pr.Status)
	}
	if env := w.MoverEnv(w.restoreJob(pr)); env[mover.EnvKopiaPointInTime] != beforeAttack.UTC().Format(time.RFC3339) {
		t.Errorf("mover Job %s = %q, want %s", mover.EnvKopiaPointInTime, env[mover.EnvKopiaPointInTime], beforeAttack.UTC().Format(time.RFC3339))
	}
	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreSucceeded {
		t.Fatalf("restore as of before the attack: phase %s, %s %q", pr.Status.Phase, c.Reason, c.Message)
	}
	n := 0
	w.Must(filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs after the restore (%v)", rel, err)
		}
		n++
		return nil
	}))
	if n == 0 {
		t.Fatal("the volume holds no file: this test proves nothing")
	}
}
