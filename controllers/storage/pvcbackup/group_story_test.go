package pvcbackup

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The group stories: one PVCBackup over several PVCs (spec.group) makes one backup per run, of
// members resolved when the run starts, each mounted by the one mover Job at /data/<pvc>.

// claim creates PVC name with labels.
func (w *world) claim(name string, labels map[string]string) {
	w.T.Helper()
	w.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
}

// groupBackup is an archive PVCBackup of the group g.
func (w *world) groupBackup(name string, g storagev1.PVCGroup) *storagev1.PVCBackup {
	pb := w.Backup(name, "@hourly")
	pb.Spec.PVCName, pb.Spec.Group = "", &g
	return pb
}

// groupVolumes plays the kubelet's mounts of a group Job: a directory with one tree per member.
func groupVolumes(t *testing.T, members ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range members {
		p := filepath.Join(dir, m, "owner")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(m+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A group of listed PVCs, without snapshots: one run mounts every member at /data/<pvc>
// (read-only, the PVCs themselves), makes one backup that names its members, and the run's
// record, the listed backups and the retention count it as one backup.
func TestGroupOfListedPVCsIsOneBackup(t *testing.T) {
	w := newWorld(t)
	w.claim("wal", nil)
	w.claim("db", nil)
	pb := w.groupBackup("app", storagev1.PVCGroup{PVCNames: []string{"wal", "db"}})
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 1}
	w.StartManual(pb, "first")
	if run := pb.Status.ActiveRun; run == nil || !reflect.DeepEqual(run.PVCs, []string{"db", "wal"}) {
		t.Fatalf("active run %+v: want the members db and wal recorded", pb.Status.ActiveRun)
	}
	job := w.Job(pb)
	mounts := storagetest.ClaimMounts(job)
	if want := map[string]string{"/data/db": "db (read-only)", "/data/wal": "wal (read-only)"}; !reflect.DeepEqual(mounts, want) {
		t.Fatalf("mover mounts %v, want %v", mounts, want)
	}
	if env := envOf(job); env[mover.EnvSourcePVCs] != "db,wal" || env[mover.EnvSourceDir] != "/data" {
		t.Errorf("mover env %s=%q %s=%q", mover.EnvSourcePVCs, env[mover.EnvSourcePVCs], mover.EnvSourceDir, env[mover.EnvSourceDir])
	}
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() || res.Files != 2 {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	last := pb.Status.LastRun
	if last == nil || last.Result != storagev1.RunSucceeded || !reflect.DeepEqual(last.PVCs, []string{"db", "wal"}) || last.Files != 2 {
		t.Fatalf("last run %+v", last)
	}
	if len(pb.Status.Backups) != 1 || !reflect.DeepEqual(pb.Status.Backups[0].PVCs, []string{"db", "wal"}) {
		t.Fatalf("backups %+v: want one backup of the members db and wal", pb.Status.Backups)
	}

	// A second run: retention keeps one backup (the group counts once, not once per member).
	first := pb.Status.Backups[0].ID
	pb.Spec.Trigger.Manual = "second"
	w.Must(k8s.Update(testCtx, pb))
	w.Clock.Set(w.Clock.Now().Add(time.Minute))
	w.Reconcile(pb)
	job = w.Job(pb)
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if len(pb.Status.Backups) != 1 || pb.Status.Backups[0].ID == first {
		t.Fatalf("backups %+v after the second run with keepLast 1: want only the second", pb.Status.Backups)
	}
}

// A listed member that is missing is the PVC-missing condition naming it; no run starts, and the
// reconcile polls instead of retrying at once.
func TestGroupMemberMissingIsNamed(t *testing.T) {
	w := newWorld(t)
	w.claim("db", nil)
	pb := w.groupBackup("app", storagev1.PVCGroup{PVCNames: []string{"db", "wal"}})
	w.StartManual(pb, "now")
	c := storagetest.Condition(pb, storagev1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonPVCNotFound || !strings.Contains(c.Message, `PersistentVolumeClaim "wal" (a member of spec.group.pvcNames) does not exist`) {
		t.Fatalf("Ready = %+v", c)
	}
	if pb.Status.ActiveRun != nil || len(w.Jobs()) != 0 {
		t.Fatalf("a run started with a member missing: %+v", pb.Status.ActiveRun)
	}
	w.claim("wal", nil)
	w.Reconcile(pb)
	if run := pb.Status.ActiveRun; run == nil || !reflect.DeepEqual(run.PVCs, []string{"db", "wal"}) {
		t.Fatalf("active run %+v once wal exists", run)
	}
}

// A selector is evaluated when a run starts: matching nothing is GroupEmpty (polled, no run);
// the members it matched then are the run's, snapshotted in the same step; a PVC labelled during
// the run does not join it. The mover waits for every snapshot, and mounts the PVC restored from
// each at /data/<member>.
func TestGroupSelectorIsResolvedWhenTheRunStarts(t *testing.T) {
	w := newWorld(t)
	w.Must(k8s.Create(testCtx, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-snap-" + w.NS},
		Driver: "hostpath.csi.k8s.io", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}))
	app := map[string]string{"app": "db"}
	w.claim("other", map[string]string{"app": "web"})
	pb := w.groupBackup("app", storagev1.PVCGroup{Selector: &metav1.LabelSelector{MatchLabels: app}})
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: "csi-snap-" + w.NS}
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.Create(pb)
	res := w.Reconcile(pb)
	c := storagetest.Condition(pb, storagev1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonGroupEmpty || !strings.Contains(c.Message, "app=db") {
		t.Fatalf("Ready = %+v, want GroupEmpty naming the selector", c)
	}
	if res.RequeueAfter <= 0 || pb.Status.ActiveRun != nil || len(w.snapshots()) != 0 {
		t.Fatalf("requeue %v, run %+v, %d snapshots: want a poll and no run", res.RequeueAfter, pb.Status.ActiveRun, len(w.snapshots()))
	}

	w.claim("wal", app)
	w.claim("db", app)
	w.Reconcile(pb)
	run := pb.Status.ActiveRun
	if run == nil || !reflect.DeepEqual(run.PVCs, []string{"db", "wal"}) {
		t.Fatalf("active run %+v: want the members db and wal", run)
	}
	snaps := map[string]snapshotv1.VolumeSnapshot{}
	for _, vs := range w.snapshots() {
		snaps[ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "")] = vs
	}
	if len(snaps) != 2 || snaps["db"].Name == "" || snaps["wal"].Name == "" {
		t.Fatalf("snapshots of %v: want one of each member, taken in the same step", snaps)
	}

	w.claim("late", app) // labelled during the run: not a member of it
	ready := func(member string) {
		vs := snaps[member]
		vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true), CreationTime: ptr.To(metav1.Now())}
		w.Must(k8s.Status().Update(testCtx, &vs))
	}
	ready("db")
	w.Reconcile(pb)
	if len(w.Jobs()) != 0 || len(w.snapshots()) != 2 {
		t.Fatalf("%d Jobs, %d snapshots with one snapshot of two ready: want the run to wait", len(w.Jobs()), len(w.snapshots()))
	}
	ready("wal")
	w.Reconcile(pb)
	job := w.Job(pb)
	mounts := storagetest.ClaimMounts(job)
	if want := map[string]string{"/data/db": snaps["db"].Name + " (read-only)", "/data/wal": snaps["wal"].Name + " (read-only)"}; !reflect.DeepEqual(mounts, want) {
		t.Fatalf("mover mounts %v, want the PVCs restored from the snapshots %v", mounts, want)
	}
	for _, member := range []string{"db", "wal"} {
		tmp := &corev1.PersistentVolumeClaim{}
		w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: snaps[member].Name}, tmp))
		if tmp.Spec.DataSource == nil || tmp.Spec.DataSource.Name != snaps[member].Name {
			t.Errorf("temporary PVC of %s: data source %+v", member, tmp.Spec.DataSource)
		}
	}
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if last := pb.Status.LastRun; last == nil || last.Result != storagev1.RunSucceeded || !reflect.DeepEqual(last.PVCs, []string{"db", "wal"}) {
		t.Fatalf("last run %+v", last)
	}
	w.Reconcile(pb) // the record is saved: the run's snapshots and PVCs go
	for _, vs := range w.snapshots() {
		if vs.DeletionTimestamp.IsZero() {
			t.Errorf("snapshot %s of the recorded run left behind", vs.Name)
		}
	}
}

// A selector matching more PVCs than a group holds is GroupTooLarge, and no run starts.
func TestGroupSelectorMatchingTooManyIsAPreciseCondition(t *testing.T) {
	w := newWorld(t)
	app := map[string]string{"app": "db"}
	for i := range storagev1.MaxGroupMembers + 1 {
		w.claim(fmt.Sprintf("part-%02d", i), app)
	}
	pb := w.groupBackup("app", storagev1.PVCGroup{Selector: &metav1.LabelSelector{MatchLabels: app}})
	w.StartManual(pb, "now")
	c := storagetest.Condition(pb, storagev1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonGroupTooLarge || !strings.Contains(c.Message, "matches 17 PersistentVolumeClaims") {
		t.Fatalf("Ready = %+v", c)
	}
	if pb.Status.ActiveRun != nil || len(w.Jobs()) != 0 {
		t.Fatalf("a run started: %+v", pb.Status.ActiveRun)
	}
}

// A group's after-hooks wait until every member's snapshot is cut: the application stays frozen
// until the last one holds its data, and is thawed before any upload.
func TestGroupAfterHooksWaitForEverySnapshot(t *testing.T) {
	w := newHookWorld(t)
	w.Must(k8s.Create(testCtx, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-snap-" + w.NS},
		Driver: "hostpath.csi.k8s.io", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}))
	w.claim("wal", nil)
	w.claim("db", nil)
	pb := w.groupBackup("app", storagev1.PVCGroup{PVCNames: []string{"db", "wal"}})
	pb.Spec.Snapshot = &storagev1.SnapshotOptions{VolumeSnapshotClassName: "csi-snap-" + w.NS}
	pb.Spec.Hooks = &storagev1.BackupHooks{Before: []storagev1.BackupHook{logHook("freeze")}, After: []storagev1.BackupHook{logHook("thaw")}}
	w.startRun(pb)
	snaps := w.snapshots()
	if len(snaps) != 2 || w.log() != "freeze" {
		t.Fatalf("%d snapshots, log %q: want both snapshots taken right after the freeze", len(snaps), w.log())
	}
	cut := func(vs *snapshotv1.VolumeSnapshot) {
		w.note("cut " + ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, ""))
		vs.Status = &snapshotv1.VolumeSnapshotStatus{CreationTime: ptr.To(metav1.Now()), ReadyToUse: ptr.To(false),
			BoundVolumeSnapshotContentName: ptr.To("snapcontent-" + vs.Name)}
		w.Must(k8s.Status().Update(testCtx, vs))
	}
	cut(&snaps[0])
	w.Reconcile(pb)
	if got := w.log(); strings.Contains(got, "thaw") {
		t.Fatalf("log %q: thawed with one snapshot of two cut", got)
	}
	cut(&snaps[1])
	w.Reconcile(pb)
	src0, src1 := ptr.Deref(snaps[0].Spec.Source.PersistentVolumeClaimName, ""), ptr.Deref(snaps[1].Spec.Source.PersistentVolumeClaimName, "")
	if got, want := w.log(), "freeze, cut "+src0+", cut "+src1+", thaw"; got != want || len(w.Jobs()) != 0 {
		t.Fatalf("log %q, %d Jobs: want %q, before any upload", got, len(w.Jobs()), want)
	}
	for i := range snaps {
		snaps[i].Status.ReadyToUse = ptr.To(true)
		w.Must(k8s.Status().Update(testCtx, &snaps[i]))
	}
	w.Reconcile(pb)
	job := w.Job(pb)
	w.note("mover")
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if last := pb.Status.LastRun; last == nil || last.Result != storagev1.RunSucceeded || len(last.Hooks) != 2 {
		t.Fatalf("last run %+v", last)
	}
}

// The run of a group started in one reconcile and recorded by the next (the one-request start:
// nothing but the run's first object says what it is) keeps its members: they travel in the
// object's annotations.
func TestGroupMembersSurviveTheOneRequestStart(t *testing.T) {
	w := newWorld(t)
	w.claim("db", map[string]string{"app": "db"})
	w.claim("wal", map[string]string{"app": "db"})
	pb := w.groupBackup("app", storagev1.PVCGroup{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}})
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"}
	w.Create(pb)
	if _, err := w.r.Reconcile(testCtx, storagetest.ReqFor(pb)); err != nil {
		t.Fatal(err)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.Status.ActiveRun != nil || !w.StartedUnrecorded(pb) {
		t.Fatalf("the start recorded the run itself: %+v", pb.Status.ActiveRun)
	}
	jobs := w.Jobs()
	if len(jobs) != 1 || jobs[0].Annotations[storagekit.AnnotationPVCs] != "db,wal" {
		t.Fatalf("Jobs %d, annotations %v", len(jobs), jobs[0].Annotations)
	}
	w.Reconcile(pb)
	if run := pb.Status.ActiveRun; run == nil || !reflect.DeepEqual(run.PVCs, []string{"db", "wal"}) {
		t.Fatalf("adopted run %+v: want the members db and wal", run)
	}
}

// A kopia group backup with spec.verify is verified as one backup: one verify Job, which mounts
// nothing, reads the whole group back; the record says verified, and the listed backup names
// its members.
func TestKopiaGroupBackupIsVerifiedAsOneBackup(t *testing.T) {
	w := newWorld(t)
	w.claim("wal", nil)
	w.claim("db", nil)
	pb := w.groupBackup("app", storagev1.PVCGroup{PVCNames: []string{"db", "wal"}})
	pb.Spec.Engine, pb.Spec.Verify = "", true
	w.StartManual(pb, "now")
	job := w.Job(pb)
	if res := w.RunMover(job, groupVolumes(t, "db", "wal")); !res.Succeeded() || res.SnapshotID == "" {
		t.Fatalf("kopia group backup: %+v", res)
	}
	w.FinishJob(job, true)
	w.Reconcile(pb)
	verify := &batchv1.Job{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: w.NS, Name: storagekit.VerifyJobName(pb, pb.Status.ActiveRun)}, verify))
	if len(verify.Spec.Template.Spec.Volumes) != 1 { // kopia's cache only
		t.Errorf("the verify Job mounts %+v", verify.Spec.Template.Spec.Volumes)
	}
	res := w.RunMover(verify, "")
	w.FinishPod(verify, res)
	w.FinishJob(verify, res.Succeeded())
	w.Reconcile(pb)
	last := pb.Status.LastRun
	if last == nil || last.Result != storagev1.RunSucceeded || last.Verified == nil || !*last.Verified || last.Engine != storagev1.EngineKopia {
		t.Fatalf("last run %+v", last)
	}
	if len(pb.Status.Backups) != 1 || !reflect.DeepEqual(pb.Status.Backups[0].PVCs, []string{"db", "wal"}) || pb.Status.Backups[0].SnapshotID != last.SnapshotID {
		t.Fatalf("backups %+v", pb.Status.Backups)
	}
}
