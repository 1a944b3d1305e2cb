package storagetest

import (
	"context"
	"reflect"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// LaggingCache is the manager's cache at its worst: Gets of stale's kind and key still return
// stale, a copy taken before the last writes, while everything else (and the APIReader) is
// current. That is what a reconcile woken by the deletion of a finished run's Job can see (a
// stale PVCBackup or PVCRestore), or one after an API server outage, before the Jobs informer
// relisted (a stale Job).
func LaggingCache(t *testing.T, stale client.Object) client.Client {
	t.Helper()
	live, err := client.NewWithWatch(Cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(stale)
	return interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if k == key && reflect.TypeOf(obj) == reflect.TypeOf(stale) {
				reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(stale.DeepCopyObject()).Elem())
				return nil
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
}
