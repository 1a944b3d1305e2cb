package storage

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// The creation of a run's Job (done by the reconciler itself) wakes no reconcile: with 1,000
// runs due in the same minute, those reconciles would queue up with the runs still to start.
// Its status changes and its deletion still do.
func TestARunsOwnJobCreationWakesNoReconcile(t *testing.T) {
	p, job := notCreated(), &batchv1.Job{}
	if p.Create(event.CreateEvent{Object: job}) {
		t.Error("the creation of a Job wakes the PVCBackup")
	}
	if !p.Update(event.UpdateEvent{ObjectOld: job, ObjectNew: job}) || !p.Delete(event.DeleteEvent{Object: job}) {
		t.Error("a Job's update or deletion does not wake the PVCBackup")
	}
}
