// Package objectstore is the S3 access of the operator and its mover, on minio-go. The
// controllers declare the small interfaces they need; *Store satisfies them.
package objectstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config says where a bucket is and how to authenticate.
type Config struct {
	Endpoint  string // host[:port], no scheme
	Region    string
	Bucket    string
	AccessKey string
	SecretKey string
	Insecure  bool   // plain HTTP
	CABundle  []byte // PEM certificates trusted in addition to the system roots
}

// minPartSize is the smallest multipart part S3 accepts (all but the last part).
const minPartSize = 5 << 20

// Store is one bucket.
type Store struct {
	client *minio.Client
	bucket string
}

// ObjectInfo describes one object.
type ObjectInfo struct {
	Key  string
	Size int64
}

// New opens the bucket of cfg. It does not contact the server.
func New(cfg Config) (*Store, error) {
	transport, err := minio.DefaultTransport(!cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if len(cfg.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("the CA bundle holds no PEM certificate")
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: http.RoundTripper(transport),
		// Fail fast on an unreachable endpoint instead of retrying for minutes: the caller's
		// reconcile (or the next scheduled run) is the retry.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{client: client, bucket: cfg.Bucket}, nil
}

// BucketExists reports whether the bucket exists (and the credentials may see it).
func (s *Store) BucketExists(ctx context.Context) (bool, error) {
	return s.client.BucketExists(ctx, s.bucket)
}

// Upload streams r into key as a multipart upload of partSize parts and returns the bytes
// written. Each part is checked by a CRC32C, not by a signed SHA-256 of its payload (see below). The size is unknown up front (-1), so minio-go reads each part into one buffer of
// partSize bytes before sending it; with NumThreads 1 (and no concurrent stream parts) that is
// the only buffer, so memory stays at about one part whatever the object size. The largest
// object is partSize × 10,000 parts (S3's limit): 16 MiB parts allow about 156 GiB.
//
// partSize must be set (at least 5 MiB, S3's minimum part): left at 0, minio-go would size
// parts for a 5 TiB object and allocate a ~537 MiB buffer.
//
// progress, when not nil, is read as many bytes as S3 has been sent (minio-go's progress hook):
// what an idle watchdog watches. A failed upload is aborted by minio-go (its parts deleted)
// when the server can still be reached; the operator removes what a killed process left
// (IncompleteUploads, AbortUpload).
func (s *Store) Upload(ctx context.Context, key string, r io.Reader, partSize uint64, progress io.Reader) (int64, error) {
	if partSize < minPartSize {
		return 0, fmt.Errorf("upload %s: part size %d is below the S3 minimum of 5 MiB", key, partSize)
	}
	info, err := s.client.PutObject(ctx, s.bucket, key, r, -1, minio.PutObjectOptions{
		PartSize:   partSize,
		NumThreads: 1,
		Progress:   progress,
		// What the operator uploads through this path is its zstd-compressed archive stream.
		ContentType: "application/zstd",
		// Over plain HTTP minio-go would sign each part's SHA-256, a second hash of every byte:
		// the archive's own SHA-256 is in its manifest (a signed request), and restore and
		// verify check it. Each part carries a CRC32C instead, which the server checks, as it
		// does over HTTPS.
		DisableContentSha256: true,
		AutoChecksum:         minio.ChecksumCRC32C,
		// Announced when the upload starts, as minio-go does for clients with trailing headers:
		// the completion then carries the CRC32C of the parts' CRC32Cs, which the server checks.
		UserMetadata: map[string]string{"X-Amz-Checksum-Algorithm": minio.ChecksumCRC32C.String()},
	})
	if err != nil {
		return 0, err
	}
	return info.Size, nil
}

// PutBytes writes a small object in one request.
func (s *Store) PutBytes(ctx context.Context, key string, data []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType})
	return err
}

// Get opens an object for reading. A missing key is reported at once (IsNotFound), not at the
// first Read.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, err
	}
	return obj, nil
}

// Stat describes key; a missing key is IsNotFound.
func (s *Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: info.Key, Size: info.Size}, nil
}

// IncompleteUploads lists the keys of the multipart uploads in progress (or abandoned: started,
// neither completed nor aborted) under prefix, and of those of keys (each under prefix). S3
// servers differ in what their listing of uploads finds, so it asks three ways (measured on
// MinIO, TestIncompleteUploadsAreFoundOnMinIO):
//
//   - by prefix, as S3 defines it: MinIO lists only the uploads of the key equal to the prefix;
//   - bucket-wide, keeping those under prefix: MinIO answers from memory, which a restart of
//     the server empties;
//   - by each of keys (the uploads the caller may have started): every server finds these.
func (s *Store) IncompleteUploads(ctx context.Context, prefix string, keys ...string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	list := func(p string) error {
		for u := range s.client.ListIncompleteUploads(ctx, s.bucket, p, true) {
			if u.Err != nil {
				return u.Err
			}
			if strings.HasPrefix(u.Key, prefix) && !seen[u.Key] {
				seen[u.Key] = true
				out = append(out, u.Key)
			}
		}
		return nil
	}
	for _, p := range append([]string{prefix, ""}, keys...) {
		if p != "" && !strings.HasPrefix(p, prefix) {
			continue
		}
		if err := list(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AbortUploads aborts every incomplete multipart upload of key, deleting its parts.
func (s *Store) AbortUploads(ctx context.Context, key string) error {
	return s.client.RemoveIncompleteUpload(ctx, s.bucket, key)
}

// Delete removes key; a key already gone is success.
func (s *Store) Delete(ctx context.Context, key string) error {
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if IsNotFound(err) {
		return nil
	}
	return err
}

// DeletePrefix removes every object under prefix, and the parts of every incomplete multipart
// upload there, and returns how many objects and uploads it removed; nothing to remove is
// success.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	uploads, err := s.IncompleteUploads(ctx, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range uploads {
		if err := s.AbortUploads(ctx, key); err != nil {
			return n, fmt.Errorf("abort upload of %s: %w", key, err)
		}
		n++
	}
	objects, err := s.List(ctx, prefix)
	if err != nil {
		return n, err
	}
	for _, o := range objects {
		if err := s.Delete(ctx, o.Key); err != nil {
			return n, fmt.Errorf("delete %s: %w", o.Key, err)
		}
		n++
	}
	return n, nil
}

// ListTop returns the objects directly under prefix (not those under a deeper "/"), in key
// order: a backup prefix's manifests and archives without the kopia repository's blobs.
func (s *Store) ListTop(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if strings.HasSuffix(o.Key, "/") {
			continue // a common prefix, not an object
		}
		out = append(out, ObjectInfo{Key: o.Key, Size: o.Size})
	}
	return out, nil
}

// ListDirs returns the common prefixes directly under prefix, each ending in "/", in key order:
// the "directories" one level down (e.g. the namespaces under a PVCBackup location's prefix).
func (s *Store) ListDirs(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if strings.HasSuffix(o.Key, "/") {
			out = append(out, o.Key)
		}
	}
	return out, nil
}

// List returns the objects under prefix, in key order.
func (s *Store) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		out = append(out, ObjectInfo{Key: o.Key, Size: o.Size})
	}
	return out, nil
}

// IsNotFound reports a missing key.
func IsNotFound(err error) bool {
	return err != nil && errorResponse(err).Code == minio.NoSuchKey
}

// errorResponse is the S3 error response err is or wraps (minio.ToErrorResponse sees only an
// unwrapped one: a caller that adds context, "list backups: %w", would hide the code).
func errorResponse(err error) minio.ErrorResponse {
	var res minio.ErrorResponse
	if errors.As(err, &res) {
		return res
	}
	return minio.ErrorResponse{}
}

// IsNetworkError reports an error of the connection to S3 (refused, reset, timed out) rather
// than an answer of the server.
func IsNetworkError(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &netErr) || errors.As(err, &opErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// IsNoSuchBucket reports a missing bucket.
func IsNoSuchBucket(err error) bool {
	return err != nil && errorResponse(err).Code == minio.NoSuchBucket
}

// IsAccessDenied reports credentials the server refused.
func IsAccessDenied(err error) bool {
	if err == nil {
		return false
	}
	switch errorResponse(err).Code {
	case minio.AccessDenied, minio.InvalidAccessKeyID, minio.SignatureDoesNotMatch:
		return true
	}
	return false
}
