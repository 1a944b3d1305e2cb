package storagekit

import (
	"context"
	"fmt"
	"io"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/okgoes/okgoes-operator/internal/flowcontrol"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

const (
	// DefaultPollInterval re-checks a missing PVC, Secret or bucket (the design's 30 s).
	DefaultPollInterval = 30 * time.Second
	// RunPollInterval is the safety-net requeue while a run is in progress; Job and snapshot
	// updates normally wake the reconciler first.
	RunPollInterval = 30 * time.Second
	// S3Timeout bounds every S3 call the controllers make.
	S3Timeout = 30 * time.Second
)

// ObjectStore is what the storage controllers need from S3: a bucket check before a run, the
// manifest after it, listing and pruning backups, the deletion of everything on finalization,
// and (BackupCatalog) the PVCBackup prefixes of a location and the size of a kopia repository.
// internal/objectstore implements it.
type ObjectStore interface {
	BucketExists(ctx context.Context) (bool, error)
	// ObjectLockEnabled reports whether the bucket was created with S3 Object Lock.
	ObjectLockEnabled(ctx context.Context) (bool, error)
	// GetAt opens the version of key that was current at t (a versioned bucket).
	GetAt(ctx context.Context, key string, t time.Time) (io.ReadCloser, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	ListTop(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error)
	ListDirs(ctx context.Context, prefix string) ([]string, error)
	List(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error)
	Delete(ctx context.Context, key string) error
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	IncompleteUploads(ctx context.Context, prefix string, keys ...string) ([]string, error)
	AbortUploads(ctx context.Context, key string) error
}

// StoreFactory opens an ObjectStore for a resolved configuration (with credentials).
type StoreFactory func(objectstore.Config) (ObjectStore, error)

// MinioStores is the StoreFactory of the real operator.
func MinioStores(cfg objectstore.Config) (ObjectStore, error) { return objectstore.New(cfg) }

// Deps is what the storage controllers share: uncached reads, events, the clock, S3 and the
// mover image.
type Deps struct {
	// APIReader reads Secrets and pods uncached: the operator needs only get/list on them and
	// keeps no Secret in its informer cache (S3Cache keeps the few credentials Secrets in use,
	// for a poll interval).
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     schedule.Clock
	Stores    StoreFactory
	// MoverImage is the image of the mover Jobs: the operator's own image.
	MoverImage string
	// PollInterval re-checks missing dependencies (default 30s).
	PollInterval time.Duration
	// S3Cache, when set, shares credentials Secret reads, S3 clients and bucket checks between
	// reconciles (the manager sets it; nil reads and checks on every reconcile).
	S3Cache *S3Cache
	// Outages, when set, is where the manager's watches and the reconciles note an unreachable
	// API server: for a while after one, the Jobs of active runs are read uncached (apioutage.go).
	Outages *APIOutages
}

func (d Deps) Poll() time.Duration {
	if d.PollInterval > 0 {
		return d.PollInterval
	}
	return DefaultPollInterval
}

func (d Deps) Check() error {
	if d.APIReader == nil || d.Clock == nil || d.Stores == nil || d.MoverImage == "" {
		return fmt.Errorf("storage controllers need an APIReader, a Clock, a StoreFactory and a MoverImage")
	}
	return nil
}

// Options tune the PVCBackup and PVCRestore controllers.
type Options struct {
	MaxConcurrentReconciles int
	// Wrap, when set, wraps the reconciler (instrumentation, e.g. counting reconciles in tests).
	Wrap func(reconcile.Reconciler) reconcile.Reconciler
}

// Reconciler is r, wrapped when Wrap is set: what every storage controller registers.
func (o Options) Reconciler(r reconcile.Reconciler) reconcile.Reconciler {
	if o.Wrap != nil {
		return o.Wrap(r)
	}
	return r
}

// Controller is the controller options every storage controller runs with: the workers asked
// for and the operator's rate limiter.
func (o Options) Controller() controller.Options {
	return controller.Options{MaxConcurrentReconciles: o.MaxConcurrentReconciles, RateLimiter: flowcontrol.RateLimiter()}
}

// CachedObjects restricts the manager's Job informer to the operator's own Jobs (every mover Job
// is labelled app.kubernetes.io/managed-by=okgoes-operator): without it the cache holds every Job
// of the cluster. PersistentVolumeClaims are cached as metadata only (ClaimMetadata).
func CachedObjects() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "okgoes-operator"})},
	}
}

// ClaimMetadata is an empty PersistentVolumeClaim of which the cache keeps the metadata only.
// A PVCBackup needs the user's PVC cached (every reconcile checks that it exists and is not being
// deleted) but not its spec and status: cached whole, the PVCs of a cluster are a good part of
// the manager's memory. The few reads that need a PVC's spec (snapshot class, restored size) are
// uncached (sourceClaim). No reader of the manager's cache may ask for a typed PVC: that starts a
// second, full informer of every PVC.
func ClaimMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))
	return m
}

// ClaimMetadataList is the list of ClaimMetadata.
func ClaimMetadataList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
	return l
}
