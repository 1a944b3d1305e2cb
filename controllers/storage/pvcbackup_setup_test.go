package storage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
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
