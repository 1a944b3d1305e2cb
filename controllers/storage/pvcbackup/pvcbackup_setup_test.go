package pvcbackup

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// The creation of a run's temporary PVC (done by the reconciler itself, for a run it recorded)
// wakes no reconcile: with 1,000 runs due in the same minute, those reconciles would queue up
// with the runs still to start. Its changes and its deletion still do.
func TestARunsOwnClaimCreationWakesNoReconcile(t *testing.T) {
	p, claim := notCreated(), &corev1.PersistentVolumeClaim{}
	if p.Create(event.CreateEvent{Object: claim}) {
		t.Error("the creation of a temporary PVC wakes the PVCBackup")
	}
	if !p.Update(event.UpdateEvent{ObjectOld: claim, ObjectNew: claim}) || !p.Delete(event.DeleteEvent{Object: claim}) {
		t.Error("a temporary PVC's update or deletion does not wake the PVCBackup")
	}
}

// The creation of a run's Job wakes its PVCBackup behind every reconcile already queued (it
// records a run already started; the others may start runs), its updates at the usual priority.
func TestAJobsCreationQueuesItsRecordBehindTheStarts(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(storagev1.GroupVersion.WithKind("PVCBackup"), meta.RESTScopeNamespace)
	h := recordAfterStarts(handler.EnqueueRequestForOwner(scheme, mapper, &storagev1.PVCBackup{}, handler.OnlyControllerOwner()))
	owner := &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "u1"}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-1", ResourceVersion: "1"}}
	if err := controllerutil.SetControllerReference(owner, job, scheme); err != nil {
		t.Fatal(err)
	}
	later := job.DeepCopy()
	later.ResourceVersion = "2"
	for _, tt := range []struct {
		name string
		send func(q workqueue.TypedRateLimitingInterface[reconcile.Request])
		want int
	}{
		{"create", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(context.Background(), event.CreateEvent{Object: job}, q)
		}, handler.LowPriority},
		{"update", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: job, ObjectNew: later}, q)
		}, 0},
	} {
		q := priorityqueue.New[reconcile.Request](tt.name)
		tt.send(q)
		req, priority, _ := q.GetWithPriority()
		q.ShutDown()
		if req.Name != "app" || priority != tt.want {
			t.Errorf("%s: %v at priority %d, want app at %d", tt.name, req, priority, tt.want)
		}
	}
}
