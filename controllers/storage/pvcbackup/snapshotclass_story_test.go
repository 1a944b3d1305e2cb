package pvcbackup

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
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// csiClaim creates a StorageClass of a driver of this test's own and a PVC of that class, so
// the operator can tell the PVC's CSI driver while no provisioner binds it.
func (w *world) csiClaim(name string) (driver string) {
	w.T.Helper()
	driver = w.NS + ".csi.example.com"
	sc := &storagek8sv1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: w.NS}, Provisioner: driver}
	if err := k8s.Create(testCtx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		w.T.Fatal(err)
	}
	w.T.Cleanup(func() { _ = k8s.Delete(testCtx, sc) })
	w.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(w.NS),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	return driver
}

// snapshotClass creates a VolumeSnapshotClass of driver, marked default or not.
func (w *world) snapshotClass(name, driver string, isDefault bool) *snapshotv1.VolumeSnapshotClass {
	w.T.Helper()
	c := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	if isDefault {
		c.Annotations = map[string]string{defaultSnapshotClassAnnotation: "true"}
	}
	w.Must(k8s.Create(testCtx, c))
	w.T.Cleanup(func() { _ = k8s.Delete(testCtx, c) })
	return c
}

func (w *world) snapshots() []snapshotv1.VolumeSnapshot {
	list := &snapshotv1.VolumeSnapshotList{}
	w.Must(k8s.List(testCtx, list, client.InNamespace(w.NS)))
	return list.Items
}

// A PVCBackup with `snapshot: {}` takes its snapshots with the default class of the PVC's driver;
// while there is none (or two) it says so precisely, names the classes it could use, and starts
// no run: nothing is created that could never become ready.
func TestNoDefaultSnapshotClassIsAPreciseCondition(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	pb := w.Backup("snap-default", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.Create(pb)

	expect := func(reason string, parts ...string) {
		t.Helper()
		w.Reconcile(pb)
		c := storagetest.Condition(pb, storagev1.ConditionReady)
		if c.Status != metav1.ConditionFalse || c.Reason != reason {
			t.Fatalf("Ready = %+v, want False %s", c, reason)
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				t.Errorf("Ready message %q does not say %q", c.Message, p)
			}
		}
		if pb.Status.ActiveRun != nil || len(w.snapshots()) != 0 || len(w.Jobs()) != 0 {
			t.Errorf("a run started without a snapshot class: run %+v, %d snapshots, %d jobs", pb.Status.ActiveRun, len(w.snapshots()), len(w.Jobs()))
		}
	}
	expect(ReasonNoDefaultSnapshotClass, `no VolumeSnapshotClass for driver "`+driver+`"`, "spec.snapshot.volumeSnapshotClassName")

	w.snapshotClass(w.NS+"-b", driver, false)
	w.snapshotClass(w.NS+"-a", driver, false)
	w.snapshotClass(w.NS+"-other", "other."+driver, true) // another driver's default does not count
	expect(ReasonNoDefaultSnapshotClass, `no VolumeSnapshotClass of driver "`+driver+`" (the driver of PersistentVolumeClaim "app") is marked default`,
		"set spec.snapshot.volumeSnapshotClassName to one of "+w.NS+"-a, "+w.NS+"-b", defaultSnapshotClassAnnotation)

	w.snapshotClass(w.NS+"-d1", driver, true)
	w.snapshotClass(w.NS+"-d2", driver, true)
	expect(ReasonNoDefaultSnapshotClass, `2 VolumeSnapshotClasses of driver "`+driver+`" are marked default (`+w.NS+"-d1, "+w.NS+"-d2)")

	// Naming a class settles it; the run starts with that class.
	pb.Spec.Snapshot.VolumeSnapshotClassName = w.NS + "-a"
	w.Must(k8s.Update(testCtx, pb))
	w.Reconcile(pb)
	vs := w.snapshots()
	if pb.Status.ActiveRun == nil || len(vs) != 1 || ptr.Deref(vs[0].Spec.VolumeSnapshotClassName, "") != w.NS+"-a" {
		t.Fatalf("run %+v, snapshots %+v", pb.Status.ActiveRun, vs)
	}
}

func TestTheOneDefaultSnapshotClassOfTheDriverIsUsed(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	w.snapshotClass(w.NS+"-plain", driver, false)
	w.snapshotClass(w.NS+"-default", driver, true)
	pb := w.Backup("snap-default", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	w.StartManual(pb, "now")
	vs := w.snapshots()
	if len(vs) != 1 || ptr.Deref(vs[0].Spec.VolumeSnapshotClassName, "") != w.NS+"-default" {
		t.Fatalf("snapshots %+v, want one of class %s-default", vs, w.NS)
	}
}

// A class that does not exist, or is another driver's, is a condition before any snapshot.
func TestANamedSnapshotClassMustExistAndBeThePVCsDriver(t *testing.T) {
	w := newWorld(t)
	driver := w.csiClaim("app")
	pb := w.Backup("snap-named", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: w.NS + "-missing"}
	w.StartManual(pb, "now")
	c := storagetest.Condition(pb, storagev1.ConditionReady)
	if c.Reason != ReasonSnapshotClassNotFound || !strings.Contains(c.Message, `VolumeSnapshotClass "`+w.NS+`-missing" named by spec.snapshot.volumeSnapshotClassName does not exist`) {
		t.Fatalf("Ready = %+v", c)
	}
	w.snapshotClass(w.NS+"-missing", "another.csi.example.com", false)
	w.Reconcile(pb)
	c = storagetest.Condition(pb, storagev1.ConditionReady)
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
	w.snapshotClass(w.NS+"-default", driver, true)
	pb := w.Backup("snap-stuck", "@hourly")
	pb.Spec.PVCName = "app"
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	pb.Spec.Mover = &storagev1.MoverOptions{ActiveDeadlineSeconds: ptr.To[int64](60)}
	w.Create(pb)
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonSnapshotPending {
		t.Fatalf("Running = %+v", c)
	}
	vs := w.snapshots()[0]
	// The snapshot controller binds a content; the driver never cuts the snapshot.
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To("snapcontent-x"), ReadyToUse: ptr.To(false)}
	w.Must(k8s.Status().Update(testCtx, &vs))

	w.Clock.Set(pb.Status.ActiveRun.StartTime.Add(59 * time.Second))
	if res := w.Reconcile(pb); pb.Status.ActiveRun == nil || res.RequeueAfter > 10*time.Second {
		t.Fatalf("before the deadline: run %+v, requeue %s", pb.Status.ActiveRun, res.RequeueAfter)
	}
	w.Clock.Set(pb.Status.ActiveRun.StartTime.Add(60 * time.Second))
	w.Reconcile(pb)
	run := pb.Status.LastRun
	if pb.Status.ActiveRun != nil || run == nil || run.Result != storagev1.RunFailed || run.Reason != ReasonSnapshotNotReady ||
		!strings.Contains(run.Message, "VolumeSnapshotContent snapcontent-x has no snapshot yet: is the CSI driver (its csi-snapshotter sidecar) running?") ||
		!strings.Contains(run.Message, "spec.mover.activeDeadlineSeconds 60") {
		t.Fatalf("last run %+v", run)
	}
	w.Reconcile(pb) // the outcome is saved: the run's objects go
	for _, s := range w.snapshots() {
		if s.DeletionTimestamp.IsZero() {
			t.Errorf("snapshot %s left behind", s.Name)
		}
	}
	if len(w.Jobs()) != 0 {
		t.Errorf("%d jobs", len(w.Jobs()))
	}
}
