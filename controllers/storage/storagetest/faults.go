package storagetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// The fault stories: what a broken bucket, a failed status write, a hung or killed mover do to
// the PVCBackup and PVCRestore controllers. Each fails without the fix it is named after.

func (w *World) PutObject(key string, data []byte) {
	w.T.Helper()
	_, err := w.S3.PutObject(Ctx, Bucket, key, BytesReader(data), int64(len(data)), minio.PutObjectOptions{})
	w.Must(err)
}

func (w *World) Exists(key string) bool {
	_, err := w.S3.StatObject(Ctx, Bucket, key, minio.StatObjectOptions{})
	return err == nil
}

func MustStore(t *testing.T, w *World, pb *storagev1.PVCBackup) storagekit.ObjectStore {
	t.Helper()
	store, _, err := storagekit.OpenStore(Ctx, w.Deps(K8s), storagekit.BackupSource(pb))
	w.Must(err)
	return store
}

// FailStatusOnce is the API server refusing the next status write of kind obj (then healthy).
func FailStatusOnce(obj client.Object) (client.Client, *atomic.Int32) {
	var failures atomic.Int32
	ww, err := client.NewWithWatch(Cfg, client.Options{Scheme: Scheme})
	if err != nil {
		panic(err)
	}
	c := interceptor.NewClient(ww, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if sub == "status" && o.GetName() == obj.GetName() && failures.Add(1) == 1 {
				return apierrors.NewServiceUnavailable("injected: the status write failed")
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
	return c, &failures
}

// FlipBits damages the object key in the bucket: the byte in its middle is XORed with mask, its
// size stays the same.
func (w *World) FlipBits(key string, mask byte) {
	w.T.Helper()
	obj, err := w.S3.GetObject(Ctx, Bucket, key, minio.GetObjectOptions{})
	w.Must(err)
	data, err := ReadAll(obj)
	w.Must(err)
	data[len(data)/2] ^= mask
	_, err = w.S3.PutObject(Ctx, Bucket, key, BytesReader(data), int64(len(data)), minio.PutObjectOptions{})
	w.Must(err)
}
