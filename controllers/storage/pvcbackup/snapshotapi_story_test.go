package pvcbackup

import (
	"context"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// withoutSnapshotAPI removes the VolumeSnapshot CRD from the API server for the rest of the test
// (a cluster without the snapshot API), and returns what installs it again (also done when the
// test ends, for the stories that follow).
func withoutSnapshotAPI(t *testing.T) (install func()) {
	t.Helper()
	crd := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "volumesnapshots." + snapshotv1.GroupName}}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := k8s.Delete(testCtx, crd); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testCtx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("the VolumeSnapshot CRD did not go: %v", err)
	}
	waitForDiscovery(t, false)
	installed := false
	install = func() {
		t.Helper()
		if installed {
			return
		}
		installed = true
		files, err := storagetest.SnapshotCRDs()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: files[2:], Scheme: scheme}); err != nil {
			t.Fatalf("install the VolumeSnapshot CRD again: %v", err)
		}
		waitForDiscovery(t, true)
	}
	t.Cleanup(install)
	return install
}

// waitForDiscovery waits until the API server's discovery does (served) or does not list
// volumesnapshots: it follows the CRD a moment later.
func waitForDiscovery(t *testing.T, served bool) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(testCtx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(snapshotv1.SchemeGroupVersion.String())
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		found := false
		for _, r := range listResources(list) {
			found = found || r == "volumesnapshots"
		}
		return found == served, nil
	})
	if err != nil {
		t.Fatalf("discovery of volumesnapshots never became %v: %v", served, err)
	}
}

func listResources(l *metav1.APIResourceList) []string {
	if l == nil {
		return nil
	}
	var names []string
	for _, r := range l.APIResources {
		names = append(names, r.Name)
	}
	return names
}

// snapshotAPIProbe is the operator's own probe (SnapshotAPIServed's question) through a fresh
// discovery RESTMapper of the test's API server, as the manager's.
func snapshotAPIProbe(t *testing.T) func(context.Context) (bool, error) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return func(context.Context) (bool, error) {
		_, err := mapper.RESTMapping(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot").GroupKind(), "v1")
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return err == nil, err
	}
}

// A snapshot backup on a cluster without the VolumeSnapshot API: one precise condition
// (Ready=False SnapshotsUnsupported, naming what to install), found at once rather than when a
// run is due, with no run started (so never next to Uploading); and once the CRDs are installed,
// the next look (within a poll interval) finds them, without a restart.
func TestASnapshotBackupWithoutTheSnapshotAPIIsOnePreciseConditionAndHeals(t *testing.T) {
	w := newWorld(t)
	install := withoutSnapshotAPI(t)
	w.r = &PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s), SnapshotAPIProbe: snapshotAPIProbe(t)}

	pb := w.Backup("snap", "@daily")
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	w.Create(pb)
	res := w.Reconcile(pb)
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonSnapshotsUnsupported || !strings.Contains(ready.Message, "install the VolumeSnapshot CRDs") {
		t.Fatalf("Ready before any run is due: %+v, want False SnapshotsUnsupported naming what to install", ready)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > w.r.Poll() {
		t.Errorf("requeue after %s, want a look again within the poll interval %s", res.RequeueAfter, w.r.Poll())
	}

	// A manual trigger: no run starts, nothing says it uploads.
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.Must(k8s.Update(testCtx, pb))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); pb.Status.ActiveRun != nil || len(w.Jobs()) != 0 || c.Reason == ReasonUploading {
		t.Fatalf("a triggered run without the snapshot API: active %+v, %d Jobs, Running %+v", pb.Status.ActiveRun, len(w.Jobs()), c)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason != ReasonSnapshotsUnsupported {
		t.Errorf("Ready after the trigger: %+v", c)
	}

	// The CRDs are installed: the next look after the poll interval no longer says unsupported
	// (here the PVC's driver has no snapshot class, the next precise condition).
	install()
	w.Clock.Set(w.Clock.Now().Add(w.r.Poll()))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionReady); c.Reason == ReasonSnapshotsUnsupported {
		t.Fatalf("Ready after the CRDs were installed: %+v, want the snapshot API found", c)
	}
}

// The same under a real manager, as main wires it: the probe is the manager's own discovery
// (SnapshotAPIServed), and the watch on VolumeSnapshots that the setup skipped starts on the
// running controller once the CRDs are installed.
func TestTheSnapshotAPIInstalledLaterIsFoundByARunningManager(t *testing.T) {
	w := newWorld(t)
	install := withoutSnapshotAPI(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}}) // other stories run a "pvcbackup" controller too
	w.Must(err)
	served, err := SnapshotAPIServed(mgr)
	if err != nil || served {
		t.Fatalf("SnapshotAPIServed without the CRD: %v, %v", served, err)
	}
	deps := w.Deps(mgr.GetAPIReader())
	deps.Clock = schedule.RealClock{}
	r := &PVCBackupReconciler{Client: mgr.GetClient(), Deps: deps,
		SnapshotAPIProbe: func(context.Context) (bool, error) { return SnapshotAPIServed(mgr) }}
	w.Must(r.SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: 2}))
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pb := w.Backup("snap", "@daily")
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	w.Must(k8s.Create(testCtx, pb))
	readyReason := func() string {
		w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
		return storagetest.Condition(pb, storagev1.ConditionReady).Reason
	}
	pollReason(t, "Ready SnapshotsUnsupported", func() bool { return readyReason() == ReasonSnapshotsUnsupported })

	install()
	pollReason(t, "Ready past SnapshotsUnsupported", func() bool { return readyReason() != ReasonSnapshotsUnsupported })
	if got := readyReason(); got != ReasonNoDefaultSnapshotClass {
		t.Errorf("Ready reason with the API and no snapshot class: %s, want %s", got, ReasonNoDefaultSnapshotClass)
	}
	r.snapshotAPI.mu.Lock()
	started := r.snapshotAPI.started
	r.snapshotAPI.mu.Unlock()
	if !started {
		t.Error("the watch on VolumeSnapshots did not start on the running controller")
	}
}

// pollReason polls cond every 100 ms for up to 30 s.
func pollReason(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
