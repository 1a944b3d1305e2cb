package storagekit

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// S3Cache bounds what reconciles ask of the API server and of S3 for the same bucket: thousands
// of PVCBackups usually share one credentials Secret and a few buckets, and without it each
// reconcile read the Secret uncached, opened a new S3 client (which looks the bucket's region up
// again) and checked the bucket.
//
//   - A credentials or CA Secret read is reused for TTL (only reads that found it: a missing
//     Secret is looked for again at once). The mover Jobs take the credentials by secretKeyRef,
//     so none is built from a stale copy.
//   - An ObjectStore is reused per (endpoint, region, bucket, TLS settings, Secret and its
//     resourceVersion): a changed Secret opens a new one, and the old one is dropped.
//   - A bucket check is answered from the last one of that store for TTL, errors included, so
//     that S3 is asked at most once per bucket per TTL whatever the number of PVCBackups.
//
// The manager sets TTL to the poll interval: a fixed Secret or a created bucket is noticed as
// fast as the poll would notice it. A nil *S3Cache caches nothing.
type S3Cache struct {
	TTL time.Duration

	mu      sync.Mutex
	secrets map[types.NamespacedName]cachedSecret
	stores  map[storeKey]*cachedStore
	pruned  time.Time
}

type cachedSecret struct {
	secret *corev1.Secret
	read   time.Time
}

// storeKey is what an ObjectStore is opened from, without the credentials themselves.
type storeKey struct {
	endpoint, region, bucket string
	insecure                 bool
	secret, secretVersion    string // namespace/name, resourceVersion
	ca, caVersion            string
	accessKey, secretKey     string // the key names in the Secret
}

// cachedStore is an ObjectStore whose bucket checks are reused for the cache's TTL.
type cachedStore struct {
	ObjectStore
	ttl  time.Duration
	used time.Time

	mu      sync.Mutex
	checked time.Time
	exists  bool
	err     error
}

// BucketExists answers from the last check when it is younger than the TTL.
func (c *cachedStore) BucketExists(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked.IsZero() && time.Since(c.checked) < c.ttl {
		return c.exists, c.err
	}
	c.exists, c.err = c.ObjectStore.BucketExists(ctx)
	c.checked = time.Now()
	return c.exists, c.err
}

// getSecret reads a Secret through the cache.
func (c *S3Cache) getSecret(ctx context.Context, reader client.Reader, key types.NamespacedName) (*corev1.Secret, error) {
	if c != nil {
		c.mu.Lock()
		e, ok := c.secrets[key]
		c.mu.Unlock()
		if ok && time.Since(e.read) < c.TTL {
			return e.secret, nil
		}
	}
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, key, secret); err != nil {
		if c != nil {
			c.mu.Lock()
			delete(c.secrets, key)
			c.mu.Unlock()
		}
		return nil, err
	}
	if c != nil {
		c.mu.Lock()
		if c.secrets == nil {
			c.secrets = map[types.NamespacedName]cachedSecret{}
		}
		c.secrets[key] = cachedSecret{secret: secret, read: time.Now()}
		c.mu.Unlock()
	}
	return secret, nil
}

// store returns the ObjectStore of key, opening it with open on first use.
func (c *S3Cache) store(key storeKey, open func() (ObjectStore, error)) (ObjectStore, error) {
	if c == nil {
		return open()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.prune(now)
	if s, ok := c.stores[key]; ok {
		s.used = now
		return s, nil
	}
	s, err := open()
	if err != nil {
		return nil, err
	}
	if c.stores == nil {
		c.stores = map[storeKey]*cachedStore{}
	}
	// The store of an older version of the same Secret and bucket is not used again.
	for k := range c.stores {
		old := k
		old.secretVersion, old.caVersion = key.secretVersion, key.caVersion
		if old == key {
			delete(c.stores, k)
		}
	}
	cs := &cachedStore{ObjectStore: s, ttl: c.TTL, used: now}
	c.stores[key] = cs
	return cs, nil
}

// prune drops, at most once per TTL, the stores and Secrets not used for ten TTLs: the cache
// stays as small as the set of buckets and Secrets in use.
func (c *S3Cache) prune(now time.Time) {
	if now.Sub(c.pruned) < c.TTL {
		return
	}
	c.pruned = now
	idle := 10 * c.TTL
	for k, s := range c.stores {
		if now.Sub(s.used) > idle {
			delete(c.stores, k)
		}
	}
	for k, s := range c.secrets {
		if now.Sub(s.read) > idle {
			delete(c.secrets, k)
		}
	}
}

// keyOf is the storeKey of cfg opened from secret (and ca, when set).
func keyOf(cfg objectstore.Config, secret, ca *corev1.Secret, accessKey, secretKey, caKey string) storeKey {
	k := storeKey{endpoint: cfg.Endpoint, region: cfg.Region, bucket: cfg.Bucket, insecure: cfg.Insecure,
		secret: fmt.Sprintf("%s/%s", secret.Namespace, secret.Name), secretVersion: secret.ResourceVersion,
		accessKey: accessKey, secretKey: secretKey}
	if ca != nil {
		k.ca, k.caVersion = fmt.Sprintf("%s/%s#%s", ca.Namespace, ca.Name, caKey), ca.ResourceVersion
	}
	return k
}
