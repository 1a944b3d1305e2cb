package pvcbackup

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestVerifyConfirmsEachBackup(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("checked", "@hourly")
	pb.Spec.Verify = true
	w.BackupAndVerify(pb, nil)
	run := pb.Status.LastRun
	if run == nil || run.Verified == nil || !*run.Verified || pb.Status.ActiveRun != nil {
		t.Fatalf("last run: %+v", run)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
}
