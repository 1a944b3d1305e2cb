package cache

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// A persisted cache needs a volume of at least twice maxMemory (docs/rediscache.md: a snapshot
// rewrite writes a second copy of the dataset). v1beta1, the only version with persistence,
// refuses a smaller one at admission with one precise message; a maxMemory raised past half the
// size through v1alpha1 (which has no persistence field, so its admission cannot see the size)
// makes the controller say InvalidSpec, naming both fields.
func TestPersistenceSmallerThanTwiceMaxMemoryIsRefused(t *testing.T) {
	ns := newNamespace(t)
	small := persistentCache(ns, "small-disk", 1)
	small.Spec.Persistence.Size = resource.MustParse("150Mi") // maxMemory is 100Mi
	err := k8s.Create(testCtx, small, client.DryRunAll)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at least twice spec.redis.memory.maxMemory") {
		t.Fatalf("persistence.size 150Mi with maxMemory 100Mi: want Invalid saying twice maxMemory, got %v", err)
	}
	for _, bad := range []string{"some validation rules were not checked", "cost budget", "cost exceeds"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("the message reports %q: %v", bad, err)
		}
	}
	if causes := len(err.(apierrors.APIStatus).Status().Details.Causes); causes != 1 {
		t.Errorf("%d causes for one mistake: %v", causes, err)
	}
	fits := persistentCache(ns, "fits", 1)
	fits.Spec.Persistence.Size = resource.MustParse("200Mi")
	if err := k8s.Create(testCtx, fits, client.DryRunAll); err != nil {
		t.Fatalf("persistence.size exactly twice maxMemory refused: %v", err)
	}

	// Through v1alpha1: maxMemory raised to the whole volume.
	rc := persistentCache(ns, "raised", 1)
	rc.Spec.Persistence.Size = resource.MustParse("200Mi")
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	alpha := &unstructured.Unstructured{}
	alpha.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.okgoes.com", Version: "v1alpha1", Kind: "RedisCache"})
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), alpha); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(alpha.Object, "128Mi", "spec", "eviction", "maxMemory"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(testCtx, alpha); err != nil {
		t.Fatalf("v1alpha1 update of maxMemory: %v", err)
	}
	got := waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonInvalidSpec)
	c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
	if c == nil || !strings.Contains(c.Message, "spec.persistence.size (200Mi) is less than twice maxMemory (128Mi") {
		t.Errorf("Ready = %+v, want InvalidSpec naming the size and maxMemory", c)
	}
}
