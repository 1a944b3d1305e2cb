package pvcrestore

import (
	"strings"
	"testing"
	"time"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// A restore's Complete condition always has a message: while its pod is refused it names the
// Job controller's reason, and while the mover runs it names the backup and the target.
func TestARestoreSaysWhatItWaitsForAndWhatItRestores(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", storagetest.Volume(t))
	w.RefuseAllPods()

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Message == "" || c.Reason != storagekit.ReasonWaitingForPod {
		t.Errorf("Complete right after the Job's creation: %+v, want WaitingForPod with a message", c)
	}
	job := w.restoreJob(pr)
	w.TryCreatePod(job)
	w.Clock.Set(w.Clock.Now().Add(storagekit.RunPollInterval))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("Complete with the pod refused: %+v, want WaitingForPod naming the quota", c)
	}

	w.AllowPods()
	w.StartPod(job)
	w.Clock.Set(w.Clock.Now().Add(time.Second))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.Phase != storagev1.RestoreRestoring || c.Reason != ReasonRestoring ||
		!strings.Contains(c.Message, pb.Status.LastRun.ID) || !strings.Contains(c.Message, "back-data") {
		t.Fatalf("restore with its mover running: phase %s, Complete %+v; want Restoring naming the backup and the target", pr.Status.Phase, c)
	}
}
