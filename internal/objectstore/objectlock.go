package objectstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"
)

// PutLocked writes a small object under S3 Object Lock: mode (GOVERNANCE or COMPLIANCE) until
// until. The bucket must have object lock enabled.
func (s *Store) PutLocked(ctx context.Context, key string, data []byte, contentType, mode string, until time.Time) error {
	m := minio.RetentionMode(mode)
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType, Mode: m, RetainUntilDate: until.UTC(), SendContentMd5: true})
	return err
}

// ExtendLock moves the lock of key's current version to until, in mode. S3 refuses to shorten
// a COMPLIANCE lock, so a caller extends only.
func (s *Store) ExtendLock(ctx context.Context, key, mode string, until time.Time) error {
	m := minio.RetentionMode(mode)
	u := until.UTC()
	return s.client.PutObjectRetention(ctx, s.bucket, key, minio.PutObjectRetentionOptions{Mode: &m, RetainUntilDate: &u})
}

// GetAt opens the version of key that was the current one at t, in a versioned bucket: what a
// reader saw then, before a later overwrite or delete. A key that did not exist then, or was
// deleted (a delete marker), is IsNotFound.
func (s *Store) GetAt(ctx context.Context, key string, t time.Time) (io.ReadCloser, error) {
	lctx, cancel := context.WithCancel(ctx) // ends the listing; the object reads under ctx
	defer cancel()
	var at *minio.ObjectInfo
	for o := range s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list the versions of %s: %w", key, o.Err)
		}
		if o.Key != key || o.LastModified.After(t) {
			continue
		}
		if at == nil || o.LastModified.After(at.LastModified) {
			at = &o
		}
	}
	if at == nil || at.IsDeleteMarker {
		return nil, minio.ErrorResponse{Code: minio.NoSuchKey, Message: fmt.Sprintf("%s did not exist at %s", key, t.UTC().Format(time.RFC3339))}
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{VersionID: at.VersionID})
	if err != nil {
		return nil, err
	}
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, err
	}
	return obj, nil
}

// ObjectLockEnabled reports whether the bucket has S3 Object Lock enabled (set when it was
// created; it turns versioning on for good). A bucket without an object lock configuration is
// false, not an error.
func (s *Store) ObjectLockEnabled(ctx context.Context) (bool, error) {
	enabled, _, _, _, err := s.client.GetObjectLockConfig(ctx, s.bucket)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "ObjectLockConfigurationNotFoundError" {
			return false, nil
		}
		return false, err
	}
	return enabled == "Enabled", nil
}
