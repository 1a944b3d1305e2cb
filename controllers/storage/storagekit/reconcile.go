package storagekit

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// The shapes every storage reconcile has: it creates the objects of a run or a restore once
// (CreateOnce), writes its status once at its end (internal/statuspatch), and ends without a write, to try
// again soon, when the API server is out of reach or its copy was stale (Deps.Retry).

// CreateOnce creates obj, controlled by owner when owner is not nil. An object that exists
// already is success: the objects of a run or a restore are named after it (RunObjectName, the
// restore's Job name), so a create repeated by a reconcile that did not see the first one finds
// it. Any other refusal is returned as is, for the caller to classify (an Invalid object is the
// spec's fault, not a reason to retry).
func CreateOnce(ctx context.Context, c client.Client, owner, obj client.Object) error {
	if owner != nil {
		if err := controllerutil.SetControllerReference(owner, obj, c.Scheme()); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Retry is the result of a reconcile that ends without (another) status write, and true, when
// err says to try again soon rather than with the work queue's growing backoff: the API server
// was out of reach (recorded in Outages, apioutage.go), or the reconcile was handed, or wrote
// from, a copy older than the API server's (ErrStaleCache, a Conflict), whose newer copy is on
// its way.
func (d Deps) Retry(now time.Time, err error) (ctrl.Result, bool) {
	switch {
	case APIUnreachable(err):
		d.Outages.Observe(now)
		return ctrl.Result{RequeueAfter: APIRetry}, true
	case errors.Is(err, ErrStaleCache), apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: StaleCacheRetry}, true
	}
	return ctrl.Result{}, false
}
