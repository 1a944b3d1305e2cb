package storagetest

import (
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// BackupAndVerify runs one scheduled backup with spec.verify, calling damage (if any) between the
// upload and the verification.
func (w *World) BackupAndVerify(pb *storagev1.PVCBackup, damage func(key string)) {
	w.T.Helper()
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour))
	w.Reconcile(pb)
	job := w.Job(pb)
	if res := w.RunMover(job, Volume(w.T)); res.Result != "Succeeded" {
		w.T.Fatalf("backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	// The verify Job has no pod yet: the run waits for it, it does not claim to be verifying.
	if c := Condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "verification") || pb.Status.ActiveRun == nil {
		w.T.Fatalf("after the upload: Running = %+v", c)
	}
	verify := &batchv1.Job{}
	w.Must(K8s.Get(Ctx, client.ObjectKey{Namespace: w.NS, Name: storagekit.VerifyJobName(pb, pb.Status.ActiveRun)}, verify))
	if len(verify.Spec.Template.Spec.Volumes) != 0 {
		w.T.Errorf("the verify Job mounts %+v; it must write nowhere", verify.Spec.Template.Spec.Volumes)
	}
	if damage != nil {
		damage(storagekit.ArchiveKey(pb, pb.Status.ActiveRun.ID))
	}
	res := w.RunMover(verify, "")
	w.FinishPod(verify, res)
	w.FinishJob(verify, res.Result == "Succeeded")
	w.Reconcile(pb)
}
