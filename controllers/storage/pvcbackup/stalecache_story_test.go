package pvcbackup

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestAFinishedBackupRunIsNotStartedAgainFromAStaleCache(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("app", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	w.Create(pb)
	w.Reconcile(pb)
	stale := pb.DeepCopy() // the run is active, its Job running
	job := w.Job(pb)
	if res := w.RunMover(job, storagetest.Volume(t)); res.Result != "Succeeded" {
		t.Fatalf("backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.ActiveRun != nil || pb.Status.LastRun == nil {
		t.Fatalf("the run did not finish: %+v", pb.Status)
	}
	w.Reconcile(pb) // the outcome is saved: this one deletes the Job
	done := pb.DeepCopy()

	// The same reconciler, which wrote the end of the run itself, now reads through a cache
	// that has not caught up: its copy is not the one it wrote, so it is proved stale by a read.
	// A restarted manager (a new reconciler) reads as well.
	for _, r := range []*PVCBackupReconciler{w.r, {Deps: w.Deps(k8s), SnapshotsAvailable: true}} {
		r.Client = storagetest.LaggingCache(t, stale)
		res, err := r.Reconcile(testCtx, storagetest.ReqFor(pb))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the finished run's Job was created again (the backup would upload twice): %v", err)
		}
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.ResourceVersion != done.ResourceVersion {
		t.Errorf("a reconcile from a stale cache wrote the status: %+v", pb.Status)
	}
}
