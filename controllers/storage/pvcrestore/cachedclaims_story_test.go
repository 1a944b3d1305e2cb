package pvcrestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcbackup"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// TestPVCsAreCachedAsMetadataOnly runs both storage controllers under a real manager whose cache
// reports any use of typed PVCs: a backup whose PVC appears later waits for it and then starts
// its run, a run's objects are found and removed, and at no point does a controller read, list
// or watch the PVCs of the cluster other than as metadata.
func TestPVCsAreCachedAsMetadataOnly(t *testing.T) {
	w := newWorld(t)
	guard := &typedClaimGuard{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// TestBadInputBecomesConditionsWithoutHotLoop runs a pvcbackup controller in this process too.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		NewCache: func(config *rest.Config, opts cache.Options) (cache.Cache, error) {
			c, err := cache.New(config, opts)
			guard.Cache = c
			return guard, err
		},
	})
	w.Must(err)
	deps := w.Deps(mgr.GetAPIReader())
	deps.Clock = schedule.RealClock{}
	w.Must((&pvcbackup.PVCBackupReconciler{Client: mgr.GetClient(), Deps: deps, SnapshotsAvailable: true}).
		SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: 2}))
	w.Must((&PVCRestoreReconciler{Client: mgr.GetClient(), Deps: deps}).SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: 2}))
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A backup of a PVC that does not exist yet waits for it.
	pb := w.Backup("later", "@daily")
	pb.Spec.PVCName = "later"
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.Must(k8s.Create(testCtx, pb))
	waitFor(t, "PVCNotFound", func() (bool, error) {
		got := &storagev1.PVCBackup{}
		err := k8s.Get(testCtx, client.ObjectKeyFromObject(pb), got)
		return err == nil && storagetest.Condition(got, storagev1.ConditionReady).Reason == pvcbackup.ReasonPVCNotFound, err
	})
	// Once the PVC exists, the metadata in the cache is enough to start the run.
	w.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "later"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	job := &batchv1.Job{}
	waitFor(t, "the run's Job", func() (bool, error) {
		jobs := &batchv1.JobList{}
		err := k8s.List(testCtx, jobs, client.InNamespace(w.NS), client.MatchingLabels{storagekit.LabelBackup: pb.Name})
		if err == nil && len(jobs.Items) == 1 {
			*job = jobs.Items[0]
			return true, nil
		}
		return false, err
	})
	// The Job's creation wakes the reconcile that records the run (else only the 30 s safety net
	// would).
	waitFor(t, "the run recorded", func() (bool, error) {
		got := &storagev1.PVCBackup{}
		err := k8s.Get(testCtx, client.ObjectKeyFromObject(pb), got)
		return err == nil && got.Status.ActiveRun != nil && got.Status.ActiveRun.ID == job.Labels[storagekit.LabelRun], err
	})
	// The run fails (the test plays the Job controller); its Job is removed once that is recorded.
	w.FinishJob(job, false)
	waitFor(t, "the finished run's Job removed", func() (bool, error) {
		got := &batchv1.Job{}
		err := k8s.Get(testCtx, client.ObjectKeyFromObject(job), got)
		return client.IgnoreNotFound(err) == nil && (err != nil || !got.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
	})
	if uses := guard.typedUses(); len(uses) > 0 {
		t.Fatalf("the controllers used typed PVCs from the manager's cache (a full informer of every PVC): %v", uses)
	}
}

func (g *typedClaimGuard) typedUses() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.uses...)
}

// waitFor polls done for up to 30 s.
func waitFor(t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(testCtx, 100*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return done() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// typedClaimGuard is a manager's cache that records every read, list or informer of typed
// PersistentVolumeClaims: each would start a full informer of every PVC of the cluster (beside
// the metadata-only one), which is what the manager's memory at scale must not hold.
type typedClaimGuard struct {
	cache.Cache
	mu   sync.Mutex
	uses []string
}

func (g *typedClaimGuard) note(obj runtime.Object, what string) {
	switch obj.(type) {
	case *corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList:
		g.mu.Lock()
		defer g.mu.Unlock()
		g.uses = append(g.uses, fmt.Sprintf("%s %T", what, obj))
	}
}

func (g *typedClaimGuard) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	g.note(obj, "Get")
	return g.Cache.Get(ctx, key, obj, opts...)
}

func (g *typedClaimGuard) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	g.note(list, "List")
	return g.Cache.List(ctx, list, opts...)
}

func (g *typedClaimGuard) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	g.note(obj, "GetInformer")
	return g.Cache.GetInformer(ctx, obj, opts...)
}
