package pvcbackup

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The stories of a mover Job whose pod cannot be created: a namespace whose ResourceQuota (or
// an admission webhook, or Pod Security Admission) refuses the pod. The Job then has no pod at
// all, only the Job controller's FailedCreate event; the status says that, in the Job's own
// words, and never that the backup uploads or the restore restores.

// A backup whose mover pod a ResourceQuota refuses is WaitingForPod with the Job controller's
// own words (FailedCreate: exceeded quota), not Uploading until the deadline; once a pod runs,
// it is Uploading.
func TestABackupWhosePodIsRefusedWaitsForItsPod(t *testing.T) {
	w := newWorld(t)
	w.RefuseAllPods()
	pb := w.Backup("quota", "@daily")
	w.StartManual(pb, "once")
	job := w.Job(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "has no pod yet") {
		t.Errorf("Running right after the start, no pod yet: %+v, want WaitingForPod saying the Job has no pod yet", c)
	}

	refusal := w.TryCreatePod(job)
	if !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), "exceeded quota") {
		t.Fatalf("the quota did not refuse the pod: %v", refusal)
	}
	w.Clock.Set(w.Clock.Now().Add(storagekit.RunPollInterval))
	w.Reconcile(pb)
	c := storagetest.Condition(pb, storagev1.ConditionRunning)
	if c.Status != metav1.ConditionTrue || c.Reason != storagekit.ReasonWaitingForPod ||
		!strings.Contains(c.Message, "FailedCreate") || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("Running with the pod refused: %+v, want WaitingForPod naming FailedCreate and the quota", c)
	}
	if pb.Status.ActiveRun == nil {
		t.Fatal("the run ended while it waits for its pod (it ends at its deadline)")
	}

	// The quota is lifted: the pod runs, the backup uploads.
	w.AllowPods()
	w.StartPod(job)
	w.Clock.Set(w.Clock.Now().Add(storagekit.RunPollInterval))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonUploading {
		t.Errorf("Running with the mover pod running: %+v, want Uploading", c)
	}
}
