package pvcbackup

import (
	"reflect"
	"strings"
	"testing"

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The group snapshot stories: envtest runs no snapshot-controller, so the story plays it: it
// makes the member VolumeSnapshots of a VolumeGroupSnapshot (owned by it, each of one PVC) and
// reports them and the group ready, as external-snapshotter v8.6 does.

// labelledCSIClaim creates PVC name of this test's CSI driver (csiClaim) with labels.
func (w *world) labelledCSIClaim(name string, labels map[string]string) (driver string) {
	w.T.Helper()
	driver = w.csiClaim(name)
	pvc := &corev1.PersistentVolumeClaim{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: name}, pvc))
	pvc.Labels = labels
	w.Must(k8s.Update(testCtx, pvc))
	return driver
}

// groupSnapshotClass creates a VolumeGroupSnapshotClass of driver.
func (w *world) groupSnapshotClass(name, driver string) {
	w.T.Helper()
	c := &groupsnapshotv1beta2.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	w.Must(k8s.Create(testCtx, c))
	w.T.Cleanup(func() { _ = k8s.Delete(testCtx, c) })
}

func (w *world) groupSnapshots() []groupsnapshotv1beta2.VolumeGroupSnapshot {
	list := &groupsnapshotv1beta2.VolumeGroupSnapshotList{}
	w.Must(k8s.List(testCtx, list, client.InNamespace(w.NS)))
	return list.Items
}

// cutGroup plays the snapshot-controller and the CSI driver for vgs: one ready VolumeSnapshot per
// PVC, owned by vgs, then vgs cut and ready.
func (w *world) cutGroup(vgs *groupsnapshotv1beta2.VolumeGroupSnapshot, pvcs ...string) map[string]string {
	w.T.Helper()
	names := map[string]string{}
	for _, pvc := range pvcs {
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, GenerateName: "snapshot-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: groupsnapshotv1beta2.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot",
				Name: vgs.Name, UID: vgs.UID}}},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(pvc)}}}
		w.Must(k8s.Create(testCtx, vs))
		vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true), CreationTime: ptr.To(metav1.Now()), VolumeGroupSnapshotName: ptr.To(vgs.Name)}
		w.Must(k8s.Status().Update(testCtx, vs))
		names[pvc] = vs.Name
	}
	vgs.Status = &groupsnapshotv1beta2.VolumeGroupSnapshotStatus{ReadyToUse: ptr.To(true), CreationTime: ptr.To(metav1.Now())}
	w.Must(k8s.Status().Update(testCtx, vgs))
	return names
}

// A group chosen by a selector, whose members are volumes of one driver with a
// VolumeGroupSnapshotClass, is captured with one VolumeGroupSnapshot of that selector and class
// (no VolumeSnapshot of the operator's own): the after-hooks wait for it to be cut, each member's
// snapshot is restored into the member's temporary PVC, the mover mounts those at
// /data/<member>, the run's record names the class, and the group snapshot goes with the run.
func TestGroupSelectorIsCapturedWithOneVolumeGroupSnapshot(t *testing.T) {
	w := newHookWorld(t)
	pb, driver := w.selectedGroupOfTwo()
	w.groupSnapshotClass(w.NS+"-group", driver)
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	run := pb.Status.ActiveRun
	if run == nil || run.VolumeGroupSnapshotClass != w.NS+"-group" || !reflect.DeepEqual(run.PVCs, []string{"db", "wal"}) {
		t.Fatalf("active run %+v: want the members db and wal, captured with class %s-group", run, w.NS)
	}
	groups := w.groupSnapshots()
	if len(groups) != 1 || len(w.snapshots()) != 0 {
		t.Fatalf("%d VolumeGroupSnapshots, %d VolumeSnapshots: want one group snapshot and no snapshot of the operator's", len(groups), len(w.snapshots()))
	}
	vgs := groups[0]
	if !reflect.DeepEqual(vgs.Spec.Source.Selector, pb.Spec.Group.Selector) || ptr.Deref(vgs.Spec.VolumeGroupSnapshotClassName, "") != w.NS+"-group" ||
		!metav1.IsControlledBy(&vgs, pb) {
		t.Fatalf("VolumeGroupSnapshot spec %+v, owners %+v", vgs.Spec, vgs.OwnerReferences)
	}
	w.Reconcile(pb)
	if got := w.log(); got != "freeze" {
		t.Fatalf("log %q before the group is cut: want only the freeze", got)
	}

	w.note("group cut")
	snaps := w.cutGroup(&vgs, "db", "wal")
	w.Reconcile(pb)
	if got := w.log(); got != "freeze, group cut, thaw" {
		t.Fatalf("log %q: want the thaw once the group is cut", got)
	}
	w.Reconcile(pb)
	job := w.Job(pb)
	mounts := storagetest.ClaimMounts(job)
	want := map[string]string{"/data/db": memberObjectName(pb, run, 0) + " (read-only)", "/data/wal": memberObjectName(pb, run, 1) + " (read-only)"}
	if !reflect.DeepEqual(mounts, want) {
		t.Fatalf("mover mounts %v, want %v", mounts, want)
	}
	for i, member := range []string{"db", "wal"} {
		tmp := &corev1.PersistentVolumeClaim{}
		w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: memberObjectName(pb, run, i)}, tmp))
		if ds := tmp.Spec.DataSource; ds == nil || ds.Kind != "VolumeSnapshot" || ds.Name != snaps[member] {
			t.Errorf("temporary PVC of %s: data source %+v, want the group's snapshot %s", member, ds, snaps[member])
		}
	}
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	last := pb.Status.LastRun
	if last == nil || last.Result != storagev1.RunSucceeded || last.VolumeGroupSnapshotClass != w.NS+"-group" {
		t.Fatalf("last run %+v", last)
	}
	w.Reconcile(pb) // the record is saved: the run's objects go
	got := &groupsnapshotv1beta2.VolumeGroupSnapshot{}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(&vgs), got); !apierrors.IsNotFound(err) && got.DeletionTimestamp.IsZero() {
		t.Errorf("the VolumeGroupSnapshot of the recorded run is left behind: %v", err)
	}
}

// A group snapshot that holds no snapshot of a member (its selector matched other PVCs when it
// was cut) ends the run, naming the member; nothing is uploaded.
func TestAGroupSnapshotWithoutAMemberEndsTheRun(t *testing.T) {
	w := newWorld(t)
	pb, driver := w.selectedGroupOfTwo()
	w.groupSnapshotClass(w.NS+"-group", driver)
	w.StartManual(pb, "now")
	groups := w.groupSnapshots()
	if len(groups) != 1 {
		t.Fatalf("%d VolumeGroupSnapshots", len(groups))
	}
	w.cutGroup(&groups[0], "db")
	w.Reconcile(pb)
	last := pb.Status.LastRun
	if last == nil || last.Result != storagev1.RunFailed || last.Reason != ReasonSnapshotFailed ||
		!containsAll(last.Message, "holds no snapshot of group member wal") || len(w.Jobs()) != 0 {
		t.Fatalf("last run %+v, %d Jobs", last, len(w.Jobs()))
	}
}

// Without a group snapshot class for the members' driver, or with a list of PVCs, the group is
// snapshotted one VolumeSnapshot per member, as before.
func TestGroupWithoutAGroupSnapshotClassTakesOneSnapshotPerMember(t *testing.T) {
	w := newWorld(t)
	pb, driver := w.selectedGroupOfTwo()
	w.snapshotClass(w.NS+"-snap", driver, true)
	w.groupSnapshotClass(w.NS+"-other", "other."+driver) // another driver's: not for these members
	w.StartManual(pb, "now")
	if run := pb.Status.ActiveRun; run == nil || run.VolumeGroupSnapshotClass != "" || len(w.snapshots()) != 2 || len(w.groupSnapshots()) != 0 {
		t.Fatalf("run %+v, %d snapshots, %d group snapshots: want one VolumeSnapshot per member", run, len(w.snapshots()), len(w.groupSnapshots()))
	}
}

// selectedGroupOfTwo is a PVCBackup (not created yet) with spec.snapshot of the group chosen by
// the selector app=db, and its two members db and wal, volumes of driver.
func (w *world) selectedGroupOfTwo() (pb *storagev1.PVCBackup, driver string) {
	w.T.Helper()
	app := map[string]string{"app": "db"}
	driver = w.labelledCSIClaim("db", app)
	w.labelledCSIClaim("wal", app)
	pb = w.groupBackup("app", storagev1.PVCGroup{Selector: &metav1.LabelSelector{MatchLabels: app}})
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{}
	return pb, driver
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
