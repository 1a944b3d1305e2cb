package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	n, err := s.Upload(ctx, "a/big", io.TeeReader(pseudoRandom(size), want), 5<<20, nil)
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
	if top, err := s.ListTop(ctx, "p/"); err != nil || len(top) != 2 || top[1].Key != "p/2.json" {
		t.Fatalf("ListTop = %+v, %v; want p/1.json and p/2.json, not p/sub/3.json", top, err)
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
	open := func(bucket, accessKey, secretKey string) *Store {
		st, err := New(Config{Endpoint: m.Endpoint, Bucket: bucket, AccessKey: accessKey, SecretKey: secretKey, Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	noBucket := open("nope", m.AccessKey, m.SecretKey)
	if ok, err := noBucket.BucketExists(ctx); ok || err != nil {
		t.Errorf("BucketExists of a missing bucket = %v, %v; want false, nil", ok, err)
	}
	const wrongSecret = "wrong-secret-key-0123456789"
	for _, tc := range []struct {
		name string
		call func() error
		is   func(error) bool
	}{
		{"upload to a missing bucket", func() error {
			_, err := noBucket.Upload(ctx, "k", strings.NewReader("x"), 5<<20, nil)
			return err
		}, IsNoSuchBucket},
		{"PutBytes to a missing bucket", func() error { return noBucket.PutBytes(ctx, "k", []byte("x"), "") }, IsNoSuchBucket},
		{"DeletePrefix in a missing bucket", func() error { _, err := noBucket.DeletePrefix(ctx, ""); return err }, IsNoSuchBucket},
		{"Get of a missing key", func() error { _, err := s.Get(ctx, "missing"); return err }, IsNotFound},
		{"wrong secret key", func() error { _, err := open("bucket", m.AccessKey, wrongSecret).BucketExists(ctx); return err }, IsAccessDenied},
		{"wrong secret key, upload", func() error {
			_, err := open("bucket", m.AccessKey, wrongSecret).Upload(ctx, "k", strings.NewReader("x"), 5<<20, nil)
			return err
		}, IsAccessDenied},
		{"unknown access key", func() error { _, err := open("bucket", "nobody", wrongSecret).List(ctx, ""); return err }, IsAccessDenied},
		// Callers add context to the errors they return (storagekit.ReadCatalog: "list backups: %w");
		// the classes must see through it (a BackupCatalog whose keys could not list said
		// EndpointUnreachable instead of CredentialsRejected).
		{"wrong secret key, wrapped", func() error {
			_, err := open("bucket", m.AccessKey, wrongSecret).ListDirs(ctx, "")
			return fmt.Errorf("list backups: %w", err)
		}, IsAccessDenied},
		{"missing bucket, wrapped", func() error {
			_, err := noBucket.ListTop(ctx, "")
			return fmt.Errorf("list backups: %w", err)
		}, IsNoSuchBucket},
		{"missing key, wrapped", func() error { _, err := s.Get(ctx, "missing"); return fmt.Errorf("read manifest: %w", err) }, IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !tc.is(err) {
				t.Fatalf("error %v (code %q) is not classified as expected", err, minio.ToErrorResponse(err).Code)
			}
			if strings.Contains(err.Error(), wrongSecret) || strings.Contains(err.Error(), m.SecretKey) {
				t.Errorf("the error shows a secret key: %v", err)
			}
		})
	}
	for _, err := range []error{nil, io.EOF} {
		if IsNotFound(err) || IsNoSuchBucket(err) || IsAccessDenied(err) {
			t.Errorf("%v is classified as an S3 error", err)
		}
	}
	if err := s.PutBytes(ctx, "ok", nil, ""); err != nil {
		t.Errorf("the right store still works: %v", err)
	}
}

func TestUnreachableEndpointFailsWithinTheContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	down, err := New(Config{Endpoint: closed, Bucket: "bucket", AccessKey: "a", SecretKey: "b", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err = down.BucketExists(ctx)
	if err == nil || IsAccessDenied(err) || IsNoSuchBucket(err) {
		t.Errorf("unreachable endpoint: %v, want a connection error", err)
	}
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Errorf("BucketExists took %v, past its 3s context", elapsed)
	}
}

func TestUploadRefusesATinyPartSize(t *testing.T) {
	s, err := New(Config{Endpoint: "127.0.0.1:1", Bucket: "bucket", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, partSize := range []uint64{0, 5<<20 - 1} {
		if _, err := s.Upload(context.Background(), "k", strings.NewReader("x"), partSize, nil); err == nil {
			t.Errorf("part size %d was accepted", partSize)
		}
	}
}

func TestCABundleIsTrusted(t *testing.T) {
	// A stand-in S3 endpoint on a self-signed certificate: HEAD bucket answers 200 (the region is
	// set, so no location lookup needs a real answer).
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.StartTLS()
	defer srv.Close()
	endpoint := strings.TrimPrefix(srv.URL, "https://")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	trusting, err := New(Config{Endpoint: endpoint, Region: "us-east-1", Bucket: "bucket", AccessKey: "a", SecretKey: "b", CABundle: ca})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := trusting.BucketExists(ctx); !ok || err != nil {
		t.Errorf("with the CA bundle: BucketExists = %v, %v", ok, err)
	}
	plain, err := New(Config{Endpoint: endpoint, Region: "us-east-1", Bucket: "bucket", AccessKey: "a", SecretKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.BucketExists(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA bundle: %v, want a certificate error", err)
	}
	if _, err := New(Config{Endpoint: endpoint, CABundle: []byte("not pem")}); err == nil {
		t.Error("a CA bundle without certificates was accepted")
	}
}

// BenchmarkUpload streams 256 MiB through Upload into a real MinIO (go test -bench Upload).
func BenchmarkUpload(b *testing.B) {
	s, _ := newStore(b)
	const size = 256 << 20
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		if _, err := s.Upload(context.Background(), "bench", pseudoRandom(size), 16<<20, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// Parts are not signed over plain HTTP (Upload's DisableContentSha256); their CRC32C must still
// catch a part damaged on the way, and then no object is stored.
func TestUploadRejectsAPartDamagedInTransit(t *testing.T) {
	_, m := newStore(t)
	target, err := url.Parse("http://" + m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	director := proxy.Director
	proxy.Director = func(r *http.Request) {
		director(r) // keeps the Host header the client signed
		if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2" {
			r.Body = &flipByte{r: r.Body, at: 1000}
		}
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	s, err := New(Config{Endpoint: strings.TrimPrefix(front.URL, "http://"), Bucket: "bucket", AccessKey: m.AccessKey, SecretKey: m.SecretKey, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.PutBytes(ctx, "intact", []byte("through the proxy"), "text/plain"); err != nil {
		t.Fatalf("the proxy itself breaks requests: %v", err)
	}
	_, err = s.Upload(ctx, "damaged", pseudoRandom(12<<20), 5<<20, nil)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "checksum") {
		t.Fatalf("Upload of a stream whose second part was damaged on the way = %v, want a checksum mismatch", err)
	}
	if _, err := s.Stat(ctx, "damaged"); !IsNotFound(err) {
		t.Errorf("Stat after the failed upload = %v, want not found", err)
	}
}

// flipByte inverts the byte at offset at of the stream.
type flipByte struct {
	r   io.ReadCloser
	at  int64
	off int64
}

func (f *flipByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}

func (f *flipByte) Close() error { return f.r.Close() }
