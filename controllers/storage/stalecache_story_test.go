package storage

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// laggingCache is the manager's cache at its worst: Gets of stale's key still return stale, a
// copy taken before the last writes, while everything else (and the APIReader) is current. That
// is what a reconcile woken by the deletion of a finished run's Job can see.
func laggingCache(t *testing.T, stale client.Object) client.Client {
	t.Helper()
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(stale)
	return interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if k == key {
				switch dst := obj.(type) {
				case *storagev1.PVCRestore:
					stale.(*storagev1.PVCRestore).DeepCopyInto(dst)
					return nil
				case *storagev1.PVCBackup:
					stale.(*storagev1.PVCBackup).DeepCopyInto(dst)
					return nil
				}
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
}

func TestAFinishedRestoreIsNotRunAgainFromAStaleCache(t *testing.T) {
	for _, succeeded := range []bool{true, false} {
		w := newWorld(t)
		w.backupNow("app", volume(t))
		pr := newRestore(w.ns, "once", "app")
		w.must(k8s.Create(testCtx, pr))
		w.reconcileRestore(pr)
		stale := pr.DeepCopy() // Restoring, its Job running
		job := w.restoreJob(pr)
		if succeeded {
			w.restoreInto(pr, t.TempDir())
		} else {
			w.finishJob(job, false) // BackoffLimitExceeded, no result from the mover
			w.reconcileRestore(pr)
		}
		if pr.Status.Phase == storagev1.RestoreRestoring {
			t.Fatalf("the restore did not finish: %+v", pr.Status)
		}
		w.reconcileRestore(pr) // the outcome is saved: this one deletes the Job
		done := pr.DeepCopy()

		r := &PVCRestoreReconciler{Client: laggingCache(t, stale), Deps: w.deps(k8s)}
		res, err := r.Reconcile(testCtx, reqFor(pr))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("succeeded=%v: the restore Job was created again (the restore would run twice): %v", succeeded, err)
		}
		w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr))
		if pr.ResourceVersion != done.ResourceVersion {
			t.Errorf("succeeded=%v: a reconcile from a stale cache wrote the status: %+v", succeeded, pr.Status)
		}
	}
}

func TestAFinishedBackupRunIsNotStartedAgainFromAStaleCache(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("app", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	w.create(pb)
	w.reconcile(pb)
	stale := pb.DeepCopy() // the run is active, its Job running
	job := w.job(pb)
	if res := w.runMover(job, volume(t)); res.Result != "Succeeded" {
		t.Fatalf("backup: %+v", res)
	}
	w.finishJob(job, true)
	w.reconcile(pb)
	if pb.Status.ActiveRun != nil || pb.Status.LastRun == nil {
		t.Fatalf("the run did not finish: %+v", pb.Status)
	}
	w.reconcile(pb) // the outcome is saved: this one deletes the Job
	done := pb.DeepCopy()

	// The same reconciler, which wrote the end of the run itself, now reads through a cache
	// that has not caught up: its copy is not the one it wrote, so it is proved stale by a read.
	// A restarted manager (a new reconciler) reads as well.
	for _, r := range []*PVCBackupReconciler{w.r, {Deps: w.deps(k8s), SnapshotsAvailable: true}} {
		r.Client = laggingCache(t, stale)
		res, err := r.Reconcile(testCtx, reqFor(pb))
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("reconcile from a stale cache: %+v, %v; want a requeue and no error", res, err)
		}
		if err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the finished run's Job was created again (the backup would upload twice): %v", err)
		}
	}
	w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.ResourceVersion != done.ResourceVersion {
		t.Errorf("a reconcile from a stale cache wrote the status: %+v", pb.Status)
	}
}
