package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errStaleCache ends a reconcile that was handed an object older than the API server's copy. It
// writes nothing: the watch event for the newer copy is on its way and reconciles again.
var errStaleCache = errors.New("the cached object is older than the API server's copy")

// ensureFresh returns errStaleCache unless obj, as read from the cache, is the API server's
// current copy. A reconcile calls it before it creates the objects of a run (Jobs, snapshots,
// PVCs): the deletion of a finished run's Job wakes a reconcile that can still see the run as
// active in a cache that has not caught up with the status recording its end, and would start
// the run again. One uncached GET, only in a reconcile that is about to create one of them.
func ensureFresh(ctx context.Context, reader client.Reader, obj client.Object) error {
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not a client.Object", obj)
	}
	err := reader.Get(ctx, client.ObjectKeyFromObject(obj), live)
	switch {
	case apierrors.IsNotFound(err):
		return errStaleCache // deleted meanwhile
	case err != nil:
		return fmt.Errorf("read %s from the API server: %w", obj.GetName(), err)
	case live.GetResourceVersion() != obj.GetResourceVersion():
		return errStaleCache
	}
	return nil
}

// ensureFresh is ensureFresh for the PVCBackup of s, at most once per reconcile: the run's
// objects are created only from a current copy, and a run that creates nothing (most reconciles
// of an active run: a poll, a Job status change) reads nothing uncached.
func (r *PVCBackupReconciler) ensureFresh(ctx context.Context, s *scope) error {
	if s.checkedFresh {
		return nil
	}
	if err := ensureFresh(ctx, r.APIReader, s.backup); err != nil {
		return err
	}
	s.checkedFresh = true
	return nil
}

// staleCacheRetry is a safety net: the watch event for the newer copy normally comes first.
const staleCacheRetry = time.Second
