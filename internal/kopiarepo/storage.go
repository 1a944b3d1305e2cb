package kopiarepo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/retrying"
	"github.com/kopia/kopia/repo/blob/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The repositories are kept with kopia's S3 storage (repo/blob/s3, minio-go), with two changes
// made by a wrapper that the connection file names as storageType:
//
//   - Uploads of packs and indexes are checked by the signature instead of an MD5. kopia sends a
//     Content-MD5 with every PutObject (for S3 object lock, which needs one); computing it was
//     19 % of the CPU of a first backup. Without it the payload is still checked by S3: over
//     plain HTTP minio-go signs it chunk by chunk with SHA-256 (aws-chunked streaming
//     signature, as kopia's upload does too), and over TLS the wrapper signs its SHA-256
//     (x-amz-content-sha256, part of SigV4 that every S3 implementation checks) where minio-go
//     would send UNSIGNED-PAYLOAD. SHA-256 is computed with the CPU's SHA extensions here, about
//     3 × faster than MD5. Uploads kopia makes with a retention period (object lock), with a
//     storage class per blob (a .storageconfig in the prefix), or with assumed roles go through
//     kopia's own code, MD5 included.
//   - Packs a restore or a verify reads file after file are held in memory (packWindow): kopia
//     then reads each small file's chunk from the held pack instead of a ranged GET, and the
//     repository needs no cache of data contents on disk.
//
// The connection file is local to the process; the repository in the bucket is an ordinary
// kopia repository, which the stock CLI opens as type "s3".
const storageType = "okgoes-s3"

// storageOptions are kopia's S3 options plus the name of the link (guard.go) of the Repo that
// wrote the connection file.
type storageOptions struct {
	s3.Options
	Link string `json:"okgoesLink,omitempty"`
}

func init() {
	blob.AddSupportedStorage(storageType, storageOptions{}, newStorage)
}

func newStorage(ctx context.Context, o *storageOptions, isCreate bool) (blob.Storage, error) {
	link := &storageLink{window: &packWindow{}}
	if l, ok := links.Load(o.Link); ok {
		link = l.(*storageLink) //nolint:forcetypeassert // only Open stores
	}
	var inner blob.Storage
	err := link.do(ctx, func(ctx context.Context) (err error) { // kopia checks the bucket here
		inner, err = s3.New(ctx, &o.Options, isCreate)
		return err
	})
	if err != nil {
		return nil, err //nolint:wrapcheck // kopia's own
	}
	st := &s3Storage{Storage: inner, opts: *o, window: link.window}
	// kopia's upload picks a storage class per blob from the prefix's storage config: keep it.
	err = link.do(ctx, func(ctx context.Context) (err error) {
		_, err = inner.GetMetadata(ctx, s3.ConfigName)
		return err
	})
	switch {
	case errors.Is(err, blob.ErrBlobNotFound) && o.RoleARN == "":
		put, err := newSignedPut(inner, o.Options)
		if err != nil {
			return nil, errors.Join(err, inner.Close(ctx))
		}
		st.put = retrying.NewWrapper(put)
	case err != nil && !errors.Is(err, blob.ErrBlobNotFound):
		return nil, errors.Join(fmt.Errorf("read the storage config: %w", err), inner.Close(ctx))
	}
	return &guardedStorage{Storage: st, link: link}, nil
}

// s3Storage is kopia's S3 storage with signed uploads and the pack window.
type s3Storage struct {
	blob.Storage // kopia's, with its retries
	// put uploads with the signature as the checksum (retried as kopia retries); nil: kopia's.
	put    blob.Storage
	window *packWindow
	opts   storageOptions
}

func (s *s3Storage) ConnectionInfo() blob.ConnectionInfo {
	return blob.ConnectionInfo{Type: storageType, Config: &s.opts}
}

func (s *s3Storage) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, opts blob.PutOptions) error {
	if s.put == nil || opts.RetentionPeriod != 0 || opts.DoNotRecreate || !opts.SetModTime.IsZero() ||
		opts.GetModTime != nil || data.Length() == 0 {
		return s.Storage.PutBlob(ctx, id, data, opts) //nolint:wrapcheck // kopia's own
	}
	return s.put.PutBlob(ctx, id, data, opts) //nolint:wrapcheck // retrying's, ours inside
}

func (s *s3Storage) GetBlob(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	if held, err := s.window.read(id, offset, length, output); held {
		return err
	}
	return s.Storage.GetBlob(ctx, id, offset, length, output) //nolint:wrapcheck // kopia's own
}

// signedPut uploads a blob as kopia's S3 storage does, without Content-MD5: the payload's
// SHA-256 is signed instead (streaming over HTTP by minio-go, whole over TLS by signedPut).
type signedPut struct {
	blob.Storage // only for the interface: retrying calls PutBlob alone
	core         *minio.Core
	bucket       string
	prefix       string
	secure       bool
}

func newSignedPut(inner blob.Storage, o s3.Options) (*signedPut, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone() //nolint:forcetypeassert // the standard library's
	switch {
	case o.DoNotVerifyTLS:
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user's choice, as in kopia
	case len(o.RootCA) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.RootCA) {
			return nil, errors.New("cannot parse the provided CA")
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// the credentials kopia's S3 storage uses, in its order
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.Static{Value: credentials.Value{AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey,
			SessionToken: o.SessionToken, SignerType: credentials.SignatureV4}},
		&credentials.EnvAWS{},
		&credentials.IAM{Client: &http.Client{Transport: http.DefaultTransport}},
	})
	core, err := minio.NewCore(o.Endpoint, &minio.Options{Creds: creds, Secure: !o.DoNotUseTLS, Region: o.Region, Transport: transport})
	if err != nil {
		return nil, fmt.Errorf("S3 client for %s: %w", o.Endpoint, err)
	}
	return &signedPut{Storage: inner, core: core, bucket: o.BucketName, prefix: o.Prefix, secure: !o.DoNotUseTLS}, nil
}

func (p *signedPut) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, _ blob.PutOptions) error {
	var sum string
	if p.secure { // over HTTP minio-go signs every chunk's SHA-256 itself
		h := sha256.New()
		if _, err := data.WriteTo(h); err != nil {
			return err //nolint:wrapcheck // in-memory bytes
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	_, err := p.core.PutObject(ctx, p.bucket, p.prefix+string(id), data.Reader(), int64(data.Length()), "", sum,
		minio.PutObjectOptions{ContentType: "application/x-kopia", DisableMultipart: true})
	if err != nil && strings.Contains(err.Error(), blob.InvalidCredentialsErrStr) {
		return blob.ErrInvalidCredentials // as kopia's: not retried
	}
	return err //nolint:wrapcheck // retrying's log names the blob
}

// packWindow holds whole packs in memory while a restore or a verify reads their contents.
// Reads share the lock (the restore's readers copy their chunks out of a pack at once; with
// one mutex they queued for it: 5.7 s of mutex delay in two restores of 50,000 small files);
// hold and release take it alone, so a buffer is reused only after every copy out of it ended.
type packWindow struct {
	mu    sync.RWMutex
	packs map[blob.ID][]byte
	free  [][]byte // buffers of released packs, for the next ones
}

// newLink registers a link with a new pack window under a new name, for the storage of the
// next connection; one without kopia's disk cache holds its metadata packs (metaPacks).
func newLink(guard Guard, noDiskCache bool) (*storageLink, string) {
	name := rand.Text()
	l := &storageLink{window: &packWindow{}, guard: guard}
	if noDiskCache {
		l.meta = &metaPacks{}
	}
	links.Store(name, l)
	return l, name
}

// unregisterLink forgets the name (the storage keeps the link).
func unregisterLink(name string) { links.Delete(name) }

// hold fetches the first length bytes of the pack through st, and serves reads within them
// from memory until release.
func (w *packWindow) hold(ctx context.Context, st blob.Reader, id blob.ID, length int64) error {
	w.mu.Lock()
	var buf []byte
	if n := len(w.free); n > 0 {
		buf, w.free = w.free[n-1][:0], w.free[:n-1]
	}
	w.mu.Unlock()
	out := &sliceOutput{b: slices.Grow(buf, int(length))}
	if err := st.GetBlob(ctx, id, 0, length, out); err != nil {
		return fmt.Errorf("fetch pack %s: %w", id, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.packs == nil {
		w.packs = map[blob.ID][]byte{}
	}
	w.packs[id] = out.b
	return nil
}

// release forgets the pack.
func (w *packWindow) release(id blob.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok := w.packs[id]; ok {
		delete(w.packs, id)
		w.free = append(w.free, b)
	}
}

// read copies a range of a held pack into output; held is false when the range is not held.
func (w *packWindow) read(id blob.ID, offset, length int64, output blob.OutputBuffer) (held bool, err error) {
	w.mu.RLock()
	defer w.mu.RUnlock() // a released buffer is reused: copy before
	b, ok := w.packs[id]
	end := offset + length
	if !ok || length < 0 || offset < 0 || end > int64(len(b)) {
		return false, nil // not in memory: from S3
	}
	output.Reset()
	_, err = output.Write(b[offset:end])
	return true, err //nolint:wrapcheck // an in-memory buffer
}

// sliceOutput is a growing byte slice as kopia's blob.OutputBuffer.
type sliceOutput struct{ b []byte }

func (o *sliceOutput) Write(p []byte) (int, error) { o.b = append(o.b, p...); return len(p), nil }
func (o *sliceOutput) Reset()                      { o.b = o.b[:0] }
func (o *sliceOutput) Length() int                 { return len(o.b) }
