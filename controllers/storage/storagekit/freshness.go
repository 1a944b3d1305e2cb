package storagekit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrStaleCache ends a reconcile that was handed an object older than the API server's copy. It
// writes nothing: the watch event for the newer copy is on its way and reconciles again.
var ErrStaleCache = errors.New("the cached object is older than the API server's copy")

// EnsureFresh returns ErrStaleCache unless obj, as read from the cache, is the API server's
// current copy. A reconcile calls it before it creates the objects of a run (Jobs, snapshots,
// PVCs): the deletion of a finished run's Job wakes a reconcile that can still see the run as
// active in a cache that has not caught up with the status recording its end, and would start
// the run again. One uncached GET, only in a reconcile that is about to create one of them.
func EnsureFresh(ctx context.Context, reader client.Reader, obj client.Object) error {
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not a client.Object", obj)
	}
	err := reader.Get(ctx, client.ObjectKeyFromObject(obj), live)
	switch {
	case apierrors.IsNotFound(err):
		return ErrStaleCache // deleted meanwhile
	case err != nil:
		return fmt.Errorf("read %s from the API server: %w", obj.GetName(), err)
	case live.GetResourceVersion() != obj.GetResourceVersion():
		return ErrStaleCache
	}
	return nil
}

// SeenVersions remembers, per object, the resourceVersion this process last got from the API
// server itself: the answer to its own write, or to an uncached read. A cached copy with that
// resourceVersion holds every write made up to then, including the reconciler's own (the end
// of a run recorded, whose Job is then deleted): that is what ensureFresh proves with a read, and
// the read is saved when the PVCBackup was not written since. Only writes by others that the cache
// has not delivered yet (a user's spec change in the milliseconds before a tick) can be missed,
// as by any controller that acts on its cache (a CronJob): the run then starts on the spec the
// cache held. When many runs are due in the same minute, this saves the API server one read per
// run start (issue 13). The zero value is ready to use.
type SeenVersions struct {
	mu       sync.Mutex
	versions map[types.NamespacedName]seenVersion
}

type seenVersion struct {
	uid             types.UID
	resourceVersion string
}

// record remembers obj's resourceVersion as the API server's current one.
func (v *SeenVersions) Record(obj client.Object) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.versions == nil {
		v.versions = map[types.NamespacedName]seenVersion{}
	}
	v.versions[client.ObjectKeyFromObject(obj)] = seenVersion{obj.GetUID(), obj.GetResourceVersion()}
}

// current tells whether obj has the resourceVersion recorded for it.
func (v *SeenVersions) Current(obj client.Object) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	seen, ok := v.versions[client.ObjectKeyFromObject(obj)]
	return ok && seen.uid == obj.GetUID() && seen.resourceVersion == obj.GetResourceVersion()
}

// forget drops what was recorded for the object named key (it is gone).
func (v *SeenVersions) Forget(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.versions, key)
}

// StaleCacheRetry is a safety net: the watch event for the newer copy normally comes first.
const StaleCacheRetry = time.Second
