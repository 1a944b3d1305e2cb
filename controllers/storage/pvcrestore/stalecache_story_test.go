package pvcrestore

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestAFinishedRestoreIsNotRunAgainFromAStaleCache(t *testing.T) {
	for _, succeeded := range []bool{true, false} {
		w := newWorld(t)
		w.backupNow("app", storagetest.Volume(t))
		pr := newRestore(w.NS, "once", "app")
		w.Must(k8s.Create(testCtx, pr))
		w.reconcileRestore(pr)
		stale := pr.DeepCopy() // Restoring, its Job running
		job := w.restoreJob(pr)
		if succeeded {
			w.restoreInto(pr, t.TempDir())
		} else {
			w.FinishJob(job, false) // BackoffLimitExceeded, no result from the mover
			w.reconcileRestore(pr)
		}
		if pr.Status.Phase == storagev1.RestoreRestoring {
			t.Fatalf("the restore did not finish: %+v", pr.Status)
		}
		w.reconcileRestore(pr) // the outcome is saved: this one deletes the Job
		done := pr.DeepCopy()

		r := &PVCRestoreReconciler{Client: storagetest.LaggingCache(t, stale), Deps: w.Deps(k8s)}
		res, err := r.Reconcile(testCtx, storagetest.ReqFor(pr))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("succeeded=%v: the restore Job was created again (the restore would run twice): %v", succeeded, err)
		}
		w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr))
		if pr.ResourceVersion != done.ResourceVersion {
			t.Errorf("succeeded=%v: a reconcile from a stale cache wrote the status: %+v", succeeded, pr.Status)
		}
	}
}
