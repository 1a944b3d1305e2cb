package storage

import (
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagek8sv1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// csiClaim creates a StorageClass of a driver of this test's own and a PVC of that class, so
// the operator can tell the PVC's CSI driver while no provisioner binds it.
func (w *world) csiClaim(name string) (driver string) {
	w.t.Helper()
	driver = w.ns + ".csi.example.com"
	sc := &storagek8sv1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: w.ns}, Provisioner: driver}
	if err := k8s.Create(testCtx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = k8s.Delete(testCtx, sc) })
	w.must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(w.ns),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	return driver
}

// snapshotClass creates a VolumeSnapshotClass of driver, marked default or not.
func (w *world) snapshotClass(name, driver string, isDefault bool) *snapshotv1.VolumeSnapshotClass {
	w.t.Helper()
	c := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	if isDefault {
		c.Annotations = map[string]string{defaultSnapshotClassAnnotation: "true"}
	}
	w.must(k8s.Create(testCtx, c))
	w.t.Cleanup(func() { _ = k8s.Delete(testCtx, c) })
	return c
}

func (w *world) snapshots() []snapshotv1.VolumeSnapshot {
	list := &snapshotv1.VolumeSnapshotList{}
	w.must(k8s.List(testCtx, list, client.InNamespace(w.ns)))
	return list.Items
}

// A PVCBackup with `snapshot: {}` takes its snapshots with the default class of the PVC's driver;
// while there is none (or two) it says so precisely, names the classes it could use, and starts
// no run: nothing is created that could never become ready.
func TestNoDefaultSnapshotClassIsAPreciseCondition(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	pb := w.backup("snap-default", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.create(pb)

	expect := func(reason string, parts ...string) {
		t.Helper()
		w.reconcile(pb)
		c := condition(pb, storagev1.ConditionReady)
		if c.Status != metav1.ConditionFalse || c.Reason != reason {
			t.Fatalf("Ready = %+v, want False %s", c, reason)
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				t.Errorf("Ready message %q does not say %q", c.Message, p)
			}
		}
		if pb.Status.ActiveRun != nil || len(w.snapshots()) != 0 || len(w.jobs()) != 0 {
			t.Errorf("a run started without a snapshot class: run %+v, %d snapshots, %d jobs", pb.Status.ActiveRun, len(w.snapshots()), len(w.jobs()))
		}
	}
	expect(ReasonNoDefaultSnapshotClass, `no VolumeSnapshotClass for driver "`+driver+`"`, "spec.snapshot.volumeSnapshotClassName")

	w.snapshotClass(w.ns+"-b", driver, false)
	w.snapshotClass(w.ns+"-a", driver, false)
	w.snapshotClass(w.ns+"-other", "other."+driver, true) // another driver's default does not count
	expect(ReasonNoDefaultSnapshotClass, `no VolumeSnapshotClass of driver "`+driver+`" (the driver of PersistentVolumeClaim "app") is marked default`,
		"set spec.snapshot.volumeSnapshotClassName to one of "+w.ns+"-a, "+w.ns+"-b", defaultSnapshotClassAnnotation)

	w.snapshotClass(w.ns+"-d1", driver, true)
	w.snapshotClass(w.ns+"-d2", driver, true)
	expect(ReasonNoDefaultSnapshotClass, `2 VolumeSnapshotClasses of driver "`+driver+`" are marked default (`+w.ns+"-d1, "+w.ns+"-d2)")

	// Naming a class settles it; the run starts with that class.
	pb.Spec.Snapshot.VolumeSnapshotClassName = w.ns + "-a"
	w.must(k8s.Update(testCtx, pb))
	w.reconcile(pb)
	vs := w.snapshots()
	if pb.Status.ActiveRun == nil || len(vs) != 1 || ptr.Deref(vs[0].Spec.VolumeSnapshotClassName, "") != w.ns+"-a" {
		t.Fatalf("run %+v, snapshots %+v", pb.Status.ActiveRun, vs)
	}
}

func TestTheOneDefaultSnapshotClassOfTheDriverIsUsed(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	w.snapshotClass(w.ns+"-plain", driver, false)
	w.snapshotClass(w.ns+"-default", driver, true)
	pb := w.backup("snap-default", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.create(pb)
	w.reconcile(pb)
	vs := w.snapshots()
	if len(vs) != 1 || ptr.Deref(vs[0].Spec.VolumeSnapshotClassName, "") != w.ns+"-default" {
		t.Fatalf("snapshots %+v, want one of class %s-default", vs, w.ns)
	}
}

// A class that does not exist, or is another driver's, is a condition before any snapshot.
func TestANamedSnapshotClassMustExistAndBeThePVCsDriver(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	pb := w.backup("snap-named", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: w.ns + "-missing"}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.create(pb)
	w.reconcile(pb)
	c := condition(pb, storagev1.ConditionReady)
	if c.Reason != ReasonSnapshotClassNotFound || !strings.Contains(c.Message, `VolumeSnapshotClass "`+w.ns+`-missing" named by spec.snapshot.volumeSnapshotClassName does not exist`) {
		t.Fatalf("Ready = %+v", c)
	}
	w.snapshotClass(w.ns+"-missing", "another.csi.example.com", false)
	w.reconcile(pb)
	c = condition(pb, storagev1.ConditionReady)
	if c.Reason != ReasonSnapshotClassNotFound || !strings.Contains(c.Message, `is for driver "another.csi.example.com", but PersistentVolumeClaim "app" is a volume of "`+driver+`"`) {
		t.Fatalf("Ready = %+v", c)
	}
	if pb.Status.ActiveRun != nil || len(w.snapshots()) != 0 {
		t.Fatalf("run %+v, %d snapshots", pb.Status.ActiveRun, len(w.snapshots()))
	}
}

// A snapshot that never becomes ready (a stopped driver) ends the run at its deadline with the
// reason SnapshotNotReady and how far the snapshot got; the snapshot goes with the run.
func TestASnapshotThatNeverBecomesReadyEndsTheRunAtItsDeadline(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	w.snapshotClass(w.ns+"-default", driver, true)
	pb := w.backup("snap-stuck", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	pb.Spec.Mover = &storagev1.MoverOptions{ActiveDeadlineSeconds: ptr.To[int64](60)}
	w.create(pb)
	w.reconcile(pb)
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != ReasonSnapshotPending {
		t.Fatalf("Running = %+v", c)
	}
	vs := w.snapshots()[0]
	// The snapshot controller binds a content; the driver never cuts the snapshot.
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To("snapcontent-x"), ReadyToUse: ptr.To(false)}
	w.must(k8s.Status().Update(testCtx, &vs))

	w.clock.Set(pb.Status.ActiveRun.StartTime.Add(59 * time.Second))
	if res := w.reconcile(pb); pb.Status.ActiveRun == nil || res.RequeueAfter > 10*time.Second {
		t.Fatalf("before the deadline: run %+v, requeue %s", pb.Status.ActiveRun, res.RequeueAfter)
	}
	w.clock.Set(pb.Status.ActiveRun.StartTime.Add(60 * time.Second))
	w.reconcile(pb)
	run := pb.Status.LastRun
	if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunFailed || run.Reason != ReasonSnapshotNotReady ||
		!strings.Contains(run.Message, "VolumeSnapshotContent snapcontent-x has no snapshot yet: is the CSI driver (its csi-snapshotter sidecar) running?") ||
		!strings.Contains(run.Message, "spec.mover.activeDeadlineSeconds 60") {
		t.Fatalf("last run %+v", run)
	}
	w.reconcile(pb) // the outcome is saved: the run's objects go
	for _, s := range w.snapshots() {
		if s.DeletionTimestamp.IsZero() {
			t.Errorf("snapshot %s left behind", s.Name)
		}
	}
	if len(w.jobs()) != 0 {
		t.Errorf("%d jobs", len(w.jobs()))
	}
}
