package cache

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// A status computed from a stale copy of a RedisCache must not be merged into the stored one: the
// merge patch leaves out every field the stale copy agrees on, so a "Ready" phase computed from a
// copy that was Ready while the stored one says Progressing stays Progressing next to a new
// Ready=True condition (seen in CI as a cache stuck with phase Progressing and Ready=True). The
// patch carries the copy's resourceVersion and the API server refuses it.
func TestStatusPatchFromAStaleCopyIsRefused(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "stale", 1)
	_, stale := createReady(t, rc, 1)

	// The stored status moves on (as another reconcile would write it).
	moved := stale.DeepCopy()
	moved.Status.Phase = cachev1beta1.PhaseProgressing
	meta.SetStatusCondition(&moved.Status.Conditions, metav1.Condition{Type: cachev1beta1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: ReasonReplicasNotReady, Message: "0 of 1 replicas ready", ObservedGeneration: moved.Generation})
	if err := k8s.Status().Update(testCtx, moved); err != nil {
		t.Fatal(err)
	}

	// A reconcile from the stale copy computes Ready again, with a fresh condition message.
	computed := stale.DeepCopy()
	meta.SetStatusCondition(&computed.Status.Conditions, metav1.Condition{Type: cachev1beta1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: ReasonAvailable, Message: "1 of 1 replicas ready (again)", ObservedGeneration: computed.Generation})
	r := &RedisCacheReconciler{Client: k8s}
	err := r.patchStatus(testCtx, stale, computed)
	got := getCache(t, rc)
	ready := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
	if got.Status.Phase == cachev1beta1.PhaseProgressing && ready.Status == metav1.ConditionTrue {
		t.Fatalf("the stale patch left phase %s next to Ready=%s (%s)", got.Status.Phase, ready.Status, ready.Message)
	}
	if !apierrors.IsConflict(err) {
		t.Errorf("patch from a stale copy: %v, want a Conflict", err)
	}
}
