package objectstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/minio/minio-go/v7"
)

// abandonUpload starts a multipart upload of key with one part and never completes it, as a
// mover killed mid-upload leaves it.
func abandonUpload(t *testing.T, s *Store, key string) {
	t.Helper()
	core := minio.Core{Client: s.client}
	id, err := core.NewMultipartUpload(context.Background(), s.bucket, key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 5<<20)
	if _, err := core.PutObjectPart(context.Background(), s.bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The abandoned multipart upload of a key under a backup's prefix is found on MinIO, whose
// listing by prefix finds nothing (it lists the uploads of the key equal to the prefix), both
// from MinIO's memory of its uploads and, after a restart of the server empties that, by key.
// Listing by prefix alone found nothing: a killed mover's upload stayed in the bucket.
func TestIncompleteUploadsAreFoundOnMinIO(t *testing.T) {
	s, m := newStore(t)
	ctx := context.Background()
	const prefix, key = "ns/app/", "ns/app/20261203T020000Z.tar.zst"
	abandonUpload(t, s, key)
	abandonUpload(t, s, "ns/application/other.tar.zst") // another backup's prefix

	got, err := s.IncompleteUploads(ctx, prefix)
	if err != nil || len(got) != 1 || got[0] != key {
		t.Fatalf("IncompleteUploads(%q) = %v, %v; want [%s]", prefix, got, err, key)
	}
	m.Outage(t, 0) // a restart: MinIO forgets which uploads it holds, not the uploads
	got, err = s.IncompleteUploads(ctx, prefix, key, "elsewhere/not-under-the-prefix")
	if err != nil || len(got) != 1 || got[0] != key {
		t.Fatalf("after a restart, IncompleteUploads(%q, %q) = %v, %v; want [%s]", prefix, key, got, err, key)
	}
	if err := s.AbortUploads(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got, err := s.IncompleteUploads(ctx, prefix, key); err != nil || len(got) != 0 {
		t.Fatalf("after the abort: %v, %v", got, err)
	}
}
