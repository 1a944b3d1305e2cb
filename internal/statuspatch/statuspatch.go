// Package statuspatch is the one status write of a reconcile, shared by every controller (the
// RedisCache, PVCBackup and PVCRestore reconcilers each compute their status in one place and
// write it here, once, at the end of the reconcile).
package statuspatch

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patch writes the status of obj computed in this reconcile, once, as a merge patch against base
// (the copy read at its start), and tells whether it wrote: nothing is written when status(obj)
// equals status(base). A field equal in base and obj is not in the patch even when the stored
// object lacks it; the CRD defaults such fields instead. The patch carries base's resourceVersion
// (an optimistic lock): computed from a stale copy it would leave the fields the stale copy
// happened to agree on as they are stored (a phase "Ready" over a stored "Progressing" next to a
// Ready=True condition); the API server refuses it with a Conflict instead. An object deleted
// meanwhile has nothing left to report on: no error.
func Patch[T client.Object](ctx context.Context, c client.Client, base, obj T, status func(T) any) (bool, error) {
	if equality.Semantic.DeepEqual(status(base), status(obj)) {
		return false, nil
	}
	err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("patch status: %w", err)
	}
	return true, nil
}
