package pvcrestore

import (
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestVerifyCatchesADamagedBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("rotten", "@hourly")
	pb.Spec.Verify = true
	w.BackupAndVerify(pb, func(key string) {
		obj, err := w.S3.GetObject(testCtx, storagetest.Bucket, key, minio.GetObjectOptions{})
		w.Must(err)
		data, err := storagetest.ReadAll(obj)
		w.Must(err)
		data[len(data)/2] ^= 0x10
		_, err = w.S3.PutObject(testCtx, storagetest.Bucket, key, storagetest.BytesReader(data), int64(len(data)), minio.PutObjectOptions{})
		w.Must(err)
	})
	run := pb.Status.LastRun
	if run == nil || run.Verified == nil || *run.Verified || run.VerificationMessage == "" {
		t.Fatalf("last run: %+v", run)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != storagekit.ReasonVerificationFailed {
		t.Errorf("Ready = %+v", c)
	}
	t.Logf("VerificationFailed: %s", storagetest.Condition(pb, storagev1.ConditionReady).Message)

	// The damaged backup is reported, not listed as restorable, and never restored as "latest".
	if len(pb.Status.Backups) != 0 || len(pb.Status.BrokenBackups) != 1 || pb.Status.BrokenBackups[0].ID != run.ID {
		t.Errorf("backups %+v, broken %+v: want the damaged one broken only", pb.Status.Backups, pb.Status.BrokenBackups)
	}
	pr := newRestore(w.NS, "latest", pb.Name)
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); pr.Status.Phase != storagev1.RestoreFailed || c.Reason != ReasonBackupNotFound || !strings.Contains(c.Message, run.ID) {
		t.Errorf("restore of latest with only a damaged backup: phase %s, %+v", pr.Status.Phase, c)
	}
}
