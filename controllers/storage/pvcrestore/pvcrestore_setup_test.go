package pvcrestore

import (
	"context"
	"sync/atomic"
	"testing"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// The manager's Options.Wrap reaches the PVCRestore controller too (it was ignored: a wrapper
// that counts or instruments reconciles saw none of the restores').
func TestSetupWrapsTheRestoreReconciler(t *testing.T) {
	w := newWorld(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}, // other stories run a pvcrestore controller too
	})
	w.Must(err)
	var wrapped atomic.Int32
	wrap := func(r reconcile.Reconciler) reconcile.Reconciler {
		return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Namespace == w.NS {
				wrapped.Add(1)
			}
			return r.Reconcile(ctx, req)
		})
	}
	w.Must((&PVCRestoreReconciler{Client: mgr.GetClient(), Deps: w.Deps(mgr.GetAPIReader())}).
		SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: 1, Wrap: wrap}))
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pr := newRestore(w.NS, "wrapped", "missing")
	w.Must(k8s.Create(testCtx, pr))
	waitFor(t, "a reconcile of the PVCRestore through the wrapper", func() (bool, error) { return wrapped.Load() > 0, nil })
}
