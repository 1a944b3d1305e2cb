package cache

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// The manager's memory follows the operator's objects, not the cluster's (issue 13): its cache
// holds no ConfigMap (nor Service, Deployment, ...) that the operator did not make, and no
// managedFields. A child whose labels someone removed is still found, and taken back.
func TestTheCacheHoldsOnlyTheOperatorsObjects(t *testing.T) {
	ns := newNamespace(t)
	// Someone else's ConfigMap, created before the cache's children: the informer would have
	// delivered it first.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}, Data: map[string]string{"a": "b"}}
	if err := k8s.Create(testCtx, foreign); err != nil {
		t.Fatal(err)
	}
	key, _ := createReady(t, sampleCache(ns, "scoped", 1), 1)
	cmKey := types.NamespacedName{Namespace: ns, Name: "scoped-config"}
	child := &corev1.ConfigMap{}
	eventually(t, 30*time.Second, func() error { return mgr.GetCache().Get(testCtx, cmKey, child) })
	if len(child.ManagedFields) != 0 {
		t.Errorf("the cached child keeps %d managedFields entries", len(child.ManagedFields))
	}
	if err := mgr.GetCache().Get(testCtx, client.ObjectKeyFromObject(foreign), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("someone else's ConfigMap is in the manager's cache (err %v), want it not cached", err)
	}

	// Someone strips the child's labels and edits it: it leaves the cache, and comes back as
	// the RedisCache wants it.
	live := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, cmKey, live); err != nil {
		t.Fatal(err)
	}
	want := live.Data[redisConfKey]
	live.Labels, live.Data[redisConfKey] = nil, "maxmemory 1\n"
	if err := k8s.Update(testCtx, live); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := &corev1.ConfigMap{}
		if err := k8s.Get(testCtx, cmKey, got); err != nil {
			return err
		}
		if got.Labels["app.kubernetes.io/managed-by"] != "okgoes-operator" || got.Data[redisConfKey] != want {
			return fmt.Errorf("child not restored: labels %v", got.Labels)
		}
		return nil
	})
	if got := getCache(t, &cachev1beta1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); got.Status.Phase != cachev1beta1.PhaseReady {
		t.Errorf("phase %q after the child was restored", got.Status.Phase)
	}

	// A name taken by an object the operator did not make is a conflict, though it is not cached.
	taken := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-config"}}
	if err := k8s.Create(testCtx, taken); err != nil {
		t.Fatal(err)
	}
	rc := sampleCache(ns, "taken", 1)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := getCache(t, rc)
		c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionDegraded)
		if c == nil || c.Reason != ReasonResourceConflict {
			return fmt.Errorf("Degraded = %+v, want ResourceConflict", c)
		}
		return nil
	})
}
