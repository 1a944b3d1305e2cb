package storagetest

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// LaggingCache is the manager's cache at its worst: Gets of stale's key still return stale, a
// copy taken before the last writes, while everything else (and the APIReader) is current. That
// is what a reconcile woken by the deletion of a finished run's Job can see.
func LaggingCache(t *testing.T, stale client.Object) client.Client {
	t.Helper()
	live, err := client.NewWithWatch(Cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(stale)
	return interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if k == key {
				switch dst := obj.(type) {
				case *storagev1.PVCRestore:
					stale.(*storagev1.PVCRestore).DeepCopyInto(dst)
					return nil
				case *storagev1.PVCBackup:
					stale.(*storagev1.PVCBackup).DeepCopyInto(dst)
					return nil
				}
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
}
