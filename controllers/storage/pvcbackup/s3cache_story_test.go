package pvcbackup

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// countingReader counts the Secret and PVCBackup reads that reach the API server.
type countingReader struct {
	client.Reader
	mu               sync.Mutex
	secrets, backups int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	switch obj.(type) {
	case *corev1.Secret:
		c.secrets++
	case *storagev1.PVCBackup:
		c.backups++
	}
	c.mu.Unlock()
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) backupReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.backups
}

func (c *countingReader) secretReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.secrets
}

// countingStores opens real MinIO stores and counts the stores opened and the bucket checks
// that reach S3.
type countingStores struct {
	mu            sync.Mutex
	opened, check int
}

func (c *countingStores) open(cfg objectstore.Config) (storagekit.ObjectStore, error) {
	s, err := storagekit.MinioStores(cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.opened++
	c.mu.Unlock()
	return &bucketCheckCounter{ObjectStore: s, c: c}, nil
}

func (c *countingStores) counts() (opened, checks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, c.check
}

type bucketCheckCounter struct {
	storagekit.ObjectStore
	c *countingStores
}

func (b *bucketCheckCounter) BucketExists(ctx context.Context) (bool, error) {
	b.c.mu.Lock()
	b.c.check++
	b.c.mu.Unlock()
	return b.ObjectStore.BucketExists(ctx)
}

// Many PVCBackups sharing one credentials Secret and bucket (the usual cluster) cost the API
// server one Secret read and S3 one bucket check per poll interval, not one per PVCBackup, run
// starts included; a changed Secret gets a new S3 client once its cached read has expired.
func TestSharedCredentialsAreReadOnceAndTheBucketCheckedOncePerPoll(t *testing.T) {
	w := newWorld(t)
	reader := &countingReader{Reader: k8s}
	stores := &countingStores{}
	deps := w.Deps(reader)
	deps.Stores, deps.PollInterval = stores.open, time.Minute
	deps.S3Cache = &storagekit.S3Cache{TTL: time.Minute}
	w.r.Deps = deps

	const n = 20
	var backups []string
	for i := range n {
		pb := w.Backup(fmt.Sprintf("app-%02d", i), "0 * * * *")
		w.Create(pb)
		if w.Reconcile(pb); pb.Status.ObservedGeneration != pb.Generation || storagetest.Condition(pb, "Ready").Status != "True" {
			t.Fatalf("%s: not Ready after its first reconcile: %+v", pb.Name, pb.Status.Conditions)
		}
		backups = append(backups, pb.Name)
	}
	opened, checks := stores.counts()
	if got := reader.secretReads(); got != 1 || opened != 1 || checks != 1 {
		t.Errorf("%d PVCBackups of one Secret and bucket: %d Secret reads, %d S3 clients, %d bucket checks; want 1 each", n, got, opened, checks)
	}

	// The tick: the runs start without another Secret read or bucket check.
	pb := w.Backup(backups[0], "")
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	if w.Reconcile(pb); pb.Status.ActiveRun == nil {
		t.Fatal("no run started at the tick")
	}
	opened, checks = stores.counts()
	if got := reader.secretReads(); got != 1 || opened != 1 || checks != 1 {
		t.Errorf("a run start: %d Secret reads, %d S3 clients, %d bucket checks; want 1 each still", got, opened, checks)
	}

	// Rotated credentials: once the cached read has expired (here at once), the next reconcile
	// reads the new Secret and opens a new client.
	secret := &corev1.Secret{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: "s3-creds"}, secret))
	secret.StringData = map[string]string{"rotated": "yes"}
	w.Must(k8s.Update(testCtx, secret))
	w.r.S3Cache.TTL = 0
	pb = w.Backup(backups[1], "")
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if w.Reconcile(pb); pb.Status.ActiveRun == nil {
		t.Fatal("no run started at the tick")
	}
	if opened, _ = stores.counts(); opened != 2 {
		t.Errorf("after the Secret changed, %d S3 clients were opened; want a new one (2)", opened)
	}
}

// A run is started, and then polled (and woken by its Job), without uncached reads of its
// PVCBackup: the copy the run is started from is the one the reconciler wrote itself (seen), so
// the stale-cache guard needs no read.
func TestAnActiveRunIsFollowedWithoutReadingThePVCBackupUncached(t *testing.T) {
	w := newWorld(t)
	reader := &countingReader{Reader: k8s}
	deps := w.Deps(reader)
	deps.S3Cache = &storagekit.S3Cache{TTL: time.Minute}
	w.r.Deps = deps
	pb := w.Backup("app", "0 * * * *")
	w.Create(pb)
	w.Reconcile(pb)
	w.Clock.Set(pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour + time.Second))
	if w.Reconcile(pb); pb.Status.ActiveRun == nil || len(w.Jobs()) != 1 {
		t.Fatalf("no run started at the tick: %+v", pb.Status)
	}
	if got := reader.backupReads(); got != 0 {
		t.Errorf("starting a run read the PVCBackup uncached %d times, want none", got)
	}
	for range 3 {
		w.Clock.Set(w.Clock.Now().Add(30 * time.Second))
		w.Reconcile(pb)
	}
	if got := reader.backupReads(); got != 0 {
		t.Errorf("3 polls of the active run read the PVCBackup uncached %d times, want none", got)
	}
}
