package testenv

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ReconcileCounter counts reconciles per object, to prove that a controller does not loop on one
// object whatever the others do.
type ReconcileCounter struct {
	mu     sync.Mutex
	counts map[types.NamespacedName]int
}

// Wrap returns r, counting each call.
func (c *ReconcileCounter) Wrap(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[types.NamespacedName]int{}
		}
		c.counts[req.NamespacedName]++
		c.mu.Unlock()
		return r.Reconcile(ctx, req)
	})
}

// Count is how many times key was reconciled so far.
func (c *ReconcileCounter) Count(key types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}
