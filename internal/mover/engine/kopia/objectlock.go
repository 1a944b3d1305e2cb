package kopia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// lockingStore is what the objects of a locked repository need from the bucket besides Store
// (objectstore.Store has it): the manifests are locked as kopia locks its blobs, so that the
// credentials that wrote a backup cannot remove the object that names it, and a restore reads
// them as of a point in time as kopia reads its blobs.
type lockingStore interface {
	PutLocked(ctx context.Context, key string, data []byte, contentType, mode string, until time.Time) error
	ExtendLock(ctx context.Context, key, mode string, until time.Time) error
	GetAt(ctx context.Context, key string, t time.Time) (io.ReadCloser, error)
}

// putManifest writes a manifest, locked as the repository's blobs are when it has a
// retention.
func putManifest(ctx context.Context, store Store, key string, data []byte, retention kopiarepo.Retention, now time.Time) error {
	if !retention.Enabled() {
		return store.PutBytes(ctx, key, data, "application/json")
	}
	ls, ok := store.(lockingStore)
	if !ok {
		return errors.New("the store cannot lock objects")
	}
	return ls.PutLocked(ctx, key, data, "application/json", retention.Mode, now.Add(retention.Period))
}

// getManifest opens a manifest, as of at when at is set.
func getManifest(ctx context.Context, store Store, key string, at *time.Time) (io.ReadCloser, error) {
	if at == nil {
		return store.Get(ctx, key)
	}
	ls, ok := store.(lockingStore)
	if !ok {
		return nil, fmt.Errorf("%s: the store cannot read past versions", mover.EnvKopiaPointInTime)
	}
	return ls.GetAt(ctx, key, *at)
}

// extendManifestLocks moves the lock of every manifest under the record's prefix to a period
// from now, as kopia's full maintenance does for its blobs in use: a backup kept longer than the
// period stays locked as long as backups keep running. A manifest retention deleted is gone
// from the listing (its locked version stays, hidden, until its lock expires).
func extendManifestLocks(ctx context.Context, store Store, recordKey string, retention kopiarepo.Retention, now time.Time) error {
	ls, ok := store.(lockingStore)
	if !retention.Enabled() || !ok || recordKey == "" {
		return nil
	}
	prefix := recordKey[:strings.LastIndex(recordKey, "/")+1]
	objs, err := store.ListTop(ctx, prefix)
	if err != nil {
		return fmt.Errorf("extend the manifests' locks: list %s: %w", prefix, err)
	}
	var errs []error
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, mover.ManifestSuffix) {
			continue
		}
		if err := ls.ExtendLock(ctx, o.Key, retention.Mode, now.Add(retention.Period)); err != nil {
			errs = append(errs, fmt.Errorf("extend the lock of %s: %w", o.Key, err))
		}
	}
	return errors.Join(errs...)
}
