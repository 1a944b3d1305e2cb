package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// newStore starts a real MinIO with one bucket and returns a Store on it.
func newStore(t testing.TB) (*Store, *testenv.MinIO) {
	t.Helper()
	m := testenv.StartMinIO(t)
	admin, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), "bucket", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Endpoint: m.Endpoint, Bucket: "bucket", AccessKey: m.AccessKey, SecretKey: m.SecretKey, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// pseudoRandom is a deterministic, incompressible stream of n bytes.
func pseudoRandom(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), n)
}

func TestStreamingUploadRoundTrips(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	const size = 20 << 20
	want := sha256.New()
	n, err := s.Upload(ctx, "a/big", io.TeeReader(pseudoRandom(size), want), 5<<20)
	if err != nil || n != size {
		t.Fatalf("Upload = %d, %v", n, err)
	}
	body, err := s.Get(ctx, "a/big")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	got := sha256.New()
	if m, err := io.Copy(got, body); err != nil || m != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("read back %d bytes (%v), sha256 equal=%v", m, err, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
}

func TestObjectLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	if ok, err := s.BucketExists(ctx); !ok || err != nil {
		t.Fatalf("BucketExists = %v, %v", ok, err)
	}
	for _, k := range []string{"p/1.json", "p/2.json", "p/sub/3.json", "q/4.json"} {
		if err := s.PutBytes(ctx, k, []byte(`{"k":"`+k+`"}`), "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx, "p/")
	if err != nil || len(list) != 3 || list[0].Key != "p/1.json" || list[0].Size != int64(len(`{"k":"p/1.json"}`)) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, err := s.Get(ctx, "p/missing"); !IsNotFound(err) {
		t.Errorf("Get of a missing key: %v, want IsNotFound", err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := s.Delete(ctx, "p/1.json"); err != nil {
			t.Errorf("Delete #%d: %v", i+1, err)
		}
	}
	if n, err := s.DeletePrefix(ctx, "p/"); n != 2 || err != nil {
		t.Errorf("DeletePrefix = %d, %v; want 2", n, err)
	}
	if n, err := s.DeletePrefix(ctx, "p/"); n != 0 || err != nil {
		t.Errorf("second DeletePrefix = %d, %v; want 0, nil", n, err)
	}
	if list, _ := s.List(ctx, ""); len(list) != 1 || list[0].Key != "q/4.json" {
		t.Errorf("objects left: %+v", list)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	s, m := newStore(t)
	ctx := context.Background()

	noBucket, _ := New(Config{Endpoint: m.Endpoint, Bucket: "nope", AccessKey: m.AccessKey, SecretKey: m.SecretKey, Insecure: true})
	if ok, err := noBucket.BucketExists(ctx); ok || err != nil {
		t.Errorf("BucketExists of a missing bucket = %v, %v", ok, err)
	}
	if _, err := noBucket.Upload(ctx, "k", strings.NewReader("x"), 5<<20); !IsNoSuchBucket(err) {
		t.Errorf("upload to a missing bucket: %v, want IsNoSuchBucket", err)
	}
	if _, err := noBucket.DeletePrefix(ctx, ""); !IsNoSuchBucket(err) {
		t.Errorf("DeletePrefix in a missing bucket: %v, want IsNoSuchBucket", err)
	}

	wrong, _ := New(Config{Endpoint: m.Endpoint, Bucket: "bucket", AccessKey: m.AccessKey, SecretKey: "wrong-secret-key", Insecure: true})
	_, err := wrong.BucketExists(ctx)
	if !IsAccessDenied(err) {
		t.Errorf("wrong secret key: %v, want IsAccessDenied", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong-secret-key") {
		t.Errorf("the error shows the secret key: %v", err)
	}
	if err := s.PutBytes(ctx, "ok", nil, ""); err != nil {
		t.Errorf("the right store still works: %v", err)
	}

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	down, _ := New(Config{Endpoint: closed, Bucket: "bucket", AccessKey: "a", SecretKey: "b", Insecure: true})
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := down.BucketExists(cctx); err == nil || IsAccessDenied(err) || IsNoSuchBucket(err) {
		t.Errorf("unreachable endpoint: %v, want a connection error", err)
	}
}

func TestBadCABundleIsRefused(t *testing.T) {
	if _, err := New(Config{Endpoint: "s3.example.com", CABundle: []byte("not pem")}); err == nil {
		t.Error("a CA bundle without certificates was accepted")
	}
}

// BenchmarkUpload streams 256 MiB through Upload into a real MinIO (go test -bench Upload).
func BenchmarkUpload(b *testing.B) {
	s, _ := newStore(b)
	const size = 256 << 20
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		if _, err := s.Upload(context.Background(), "bench", pseudoRandom(size), 16<<20); err != nil {
			b.Fatal(err)
		}
	}
}
