//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// csiGroupSnapshotClass is the local cluster's VolumeGroupSnapshotClass of the hostpath driver
// (hack/csi/groupsnapshotclass.yaml).
const csiGroupSnapshotClass = "csi-hostpath-groupsnapclass"

var volumeGroupSnapshotGVK = schema.GroupVersionKind{Group: "groupsnapshot.storage.k8s.io", Version: "v1beta2", Kind: "VolumeGroupSnapshot"}

// twoVolumeWriter is the application of the group story: a shell that writes the next sequence
// number to /a/seq, then to /b/seq (each by a rename, so a file is never seen half written), as
// fast as it can, without pause. It runs as a child of the container's first process (a signal
// from inside the container cannot stop PID 1) and leaves its PID in /tmp/writer.pid for the hooks.
const twoVolumeWriter = `sh -c 'i=0
while :; do
  i=$((i+1))
  echo $i > /a/seq.tmp && mv /a/seq.tmp /a/seq
  echo $i > /b/seq.tmp && mv /b/seq.tmp /b/seq
done' &
echo $! > /tmp/writer.pid
exec sleep 3600
`

// TestConsistentGroupBackupAndRestore: an application writes a sequence number to two volumes of
// the CSI hostpath driver in turn, without pause. A PVCBackup of the two as a group (a label
// selector) captures them with one VolumeGroupSnapshot between a before-hook that stops the
// writer (SIGSTOP) and an after-hook that lets it go on (SIGCONT); one PVCRestore restores both
// into new PVCs of the driver. The restored numbers differ by at most one step (the writer
// stopped between its two writes), the writer went on after the backup, and the run left no
// group snapshot, snapshot or temporary PVC behind.
func TestConsistentGroupBackupAndRestore(t *testing.T) {
	alongside(t)
	class := csiClass(t)
	ns := namespace(t, "e2e-group")
	must(t, k8s.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"storage.okgoes.com/allow-hooks":"true"}}}`))))
	s3 := deployMinIO(t, ns)
	for _, name := range []string{"db", "wal"} {
		csiClaim(t, ns, name, class)
		must(t, k8s.Patch(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"twovol"}}}`))))
	}
	writer := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer", Labels: map[string]string{"app": "twovol"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Volumes: []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db"}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "wal"}}},
			},
			Containers: []corev1.Container{{Name: "main", Image: cfg.toolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:      []string{"sh", "-c", twoVolumeWriter},
				VolumeMounts: []corev1.VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/b"}}}},
		},
	}
	must(t, k8s.Create(ctx, writer))
	seq := func() (a, b int64) {
		out, err := kubectl("-n", ns, "exec", "writer", "--", "sh", "-c", "cat /b/seq; cat /a/seq")
		f := strings.Fields(out)
		if err != nil || len(f) != 2 {
			return 0, 0
		}
		b, _ = strconv.ParseInt(f[0], 10, 64)
		a, _ = strconv.ParseInt(f[1], 10, 64)
		return a, b
	}
	eventually(t, "the writer has written 1,000 steps", 2*time.Minute, func() (bool, string) {
		a, b := seq()
		return b >= 1000, fmt.Sprintf("a=%d b=%d", a, b)
	})

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: app, namespace: %s}
spec:
  group:
    selector: {matchLabels: {app: twovol}}
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  snapshot: {}
  s3Bucket: %s
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
  hooks:
    before:
    - selector: {matchLabels: {app: twovol}}
      command: [sh, -c, "kill -STOP $(cat /tmp/writer.pid)"]
      timeout: 10s
    after:
    - selector: {matchLabels: {app: twovol}}
      command: [sh, -c, "kill -CONT $(cat /tmp/writer.pid)"]
      timeout: 10s
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	groupSnapshots := map[string]bool{}
	eventually(t, "group backup run finished", 5*time.Minute, func() (bool, string) {
		for _, g := range listGroupSnapshots(t, ns) {
			groupSnapshots[g.GetName()] = true
		}
		got := get(t, backup)
		if str(got, "status", "lastRun", "result") == "Failed" {
			t.Fatalf("group backup failed:\n%s", statusJSON(got))
		}
		return str(got, "status", "lastRun", "result") == "Succeeded", statusJSON(got)
	})
	if len(groupSnapshots) != 1 {
		t.Errorf("the run made the VolumeGroupSnapshots %v: want one (the driver supports group snapshots)", groupSnapshots)
	}
	got := get(t, backup)
	members, _, _ := unstructured.NestedStringSlice(got.Object, "status", "lastRun", "pvcs")
	if strings.Join(members, ",") != "db,wal" || str(got, "status", "lastRun", "volumeGroupSnapshotClass") != csiGroupSnapshotClass {
		t.Errorf("status.lastRun: members %v, group snapshot class %q; want db,wal and %s\n%s",
			members, str(got, "status", "lastRun", "volumeGroupSnapshotClass"), csiGroupSnapshotClass, statusJSON(got))
	}
	backupSeq, _ := seq()
	eventually(t, "the writer goes on after the after-hook", time.Minute, func() (bool, string) {
		a, b := seq()
		return b > backupSeq, fmt.Sprintf("a=%d b=%d, at the backup's end a=%d", a, b, backupSeq)
	})

	restore := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: app, namespace: %s}
spec:
  source: {pvcBackup: app, backupID: latest}
  targets:
  - sourcePVC: db
    newPVC: {name: db-restored, size: 100Mi, storageClassName: %s}
  - sourcePVC: wal
    newPVC: {name: wal-restored, size: 100Mi, storageClassName: %s}
`, ns, class, class))
	must(t, k8s.Create(ctx, restore))
	eventually(t, "group restore finished", 5*time.Minute, func() (bool, string) {
		got := get(t, restore)
		if str(got, "status", "phase") == "Failed" {
			t.Fatalf("group restore failed:\n%s", statusJSON(got))
		}
		return str(got, "status", "phase") == "Succeeded", statusJSON(got)
	})
	report := runPod(t, ns, "read-restored", "cat /a/seq /b/seq",
		[]corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db-restored", ReadOnly: true}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "wal-restored", ReadOnly: true}}},
		},
		[]corev1.VolumeMount{{Name: "a", MountPath: "/a", ReadOnly: true}, {Name: "b", MountPath: "/b", ReadOnly: true}})
	f := strings.Fields(report)
	if len(f) != 2 {
		t.Fatalf("the restored volumes hold %q: want a number in each", report)
	}
	a, _ := strconv.ParseInt(f[0], 10, 64)
	b, _ := strconv.ParseInt(f[1], 10, 64)
	t.Logf("MEASURED: restored sequence numbers db=%d wal=%d (the writer had reached %d when the run ended)", a, b, backupSeq)
	if b < 1000 || a-b < 0 || a-b > 1 {
		t.Errorf("restored db=%d wal=%d: want the same number, or db one step ahead (written first), and at least 1,000", a, b)
	}

	eventually(t, "no group snapshot, snapshot or temporary PVC left", 2*time.Minute, func() (bool, string) {
		left := []string{}
		for _, g := range listGroupSnapshots(t, ns) {
			left = append(left, "VolumeGroupSnapshot/"+g.GetName())
		}
		for _, s := range listSnapshots(t, ns) {
			left = append(left, "VolumeSnapshot/"+s.GetName())
		}
		pvcs := &corev1.PersistentVolumeClaimList{}
		must(t, k8s.List(ctx, pvcs, client.InNamespace(ns)))
		for _, p := range pvcs.Items {
			switch p.Name {
			case "db", "wal", "db-restored", "wal-restored":
			default:
				left = append(left, "PVC/"+p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

func listGroupSnapshots(t *testing.T, ns string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(volumeGroupSnapshotGVK.GroupVersion().WithKind("VolumeGroupSnapshotList"))
	must(t, k8s.List(ctx, l, client.InNamespace(ns)))
	return l.Items
}
