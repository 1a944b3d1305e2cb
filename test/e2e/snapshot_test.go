//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The CSI stack of the local cluster (hack/csi): the hostpath driver, its default StorageClass and
// default VolumeSnapshotClass. E2E_CSI_STORAGE_CLASS names another class with snapshot support.
const (
	csiDriver        = "hostpath.csi.k8s.io"
	csiSnapshotClass = "csi-hostpath-snapclass"
	csiPluginNS      = "default"
	csiPlugin        = "csi-hostpathplugin" // the StatefulSet of the driver and its sidecars
)

var (
	volumeSnapshotGVK        = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}
	volumeSnapshotContentGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}
	volumeSnapshotClassGVK   = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotClass"}
)

// csiClass is the StorageClass the snapshot stories provision with; they skip without one.
func csiClass(t *testing.T) string {
	t.Helper()
	name := env("E2E_CSI_STORAGE_CLASS", "csi-hostpath-sc")
	sc := &unstructured.Unstructured{}
	sc.SetGroupVersionKind(schema.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "StorageClass"})
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		t.Skipf("no CSI StorageClass %s (the local cluster has one, hack/csi): %v", name, err)
	}
	return name
}

// csiClaim creates a PVC of class and waits until the driver has provisioned it.
func csiClaim(t *testing.T, ns, name, class string) *corev1.PersistentVolume {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Mi")}},
		},
	}
	must(t, k8s.Create(ctx, pvc))
	return boundVolume(t, ns, name)
}

// boundVolume waits until PVC ns/name is bound and returns its PersistentVolume.
func boundVolume(t *testing.T, ns, name string) *corev1.PersistentVolume {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	eventually(t, "PVC "+name+" bound", 2*time.Minute, func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc); err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
	pv := &corev1.PersistentVolume{}
	must(t, k8s.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv))
	return pv
}

// recordLog is the application: it appends numbered, checksummed records to /data/log, one
// write per record, as fast as a shell can (with a short pause), until it is killed.
const recordLog = `i=1
while :; do
  r=$(printf 'record %08d %s' $i "$(date +%s)")
  echo "$r $(printf %s "$r" | sha256sum | cut -c1-64)" >> /data/log
  i=$((i+1))
  sleep 0.02
done
`

// checkLog judges /data/log: every line a whole record with the right checksum, numbered 1..n
// without a gap; it prints "records <n> bytes <size> sha256 <of the file>" and a BAD line for
// each broken record.
const checkLog = `n=0
while IFS= read -r line; do
  n=$((n+1))
  set -- $line
  want=$(printf %s "$1 $2 $3" | sha256sum | cut -c1-64)
  if [ "$#" != 4 ] || [ "$2" != "$(printf %08d $n)" ] || [ "$4" != "$want" ]; then echo "BAD $n: $line"; fi
done < /data/log
[ -z "$(tail -c 1 /data/log)" ] || echo "BAD: the last record has no newline"
echo "records $n bytes $(stat -c %s /data/log) sha256 $(sha256sum < /data/log | cut -c1-64)"
`

// TestSnapshotBackupOfALiveVolume: an application writes a record log to a volume of the CSI
// hostpath driver without pause; a PVCBackup with `snapshot: {}` (the driver's default
// VolumeSnapshotClass) backs it up from a real VolumeSnapshot, through a temporary PVC the real
// csi-provisioner makes from it; the restored log is a prefix of the live one with every record
// whole (crash-consistent), and the temporary snapshot, its content and the PVC are gone
// afterwards. A PVCRestore into a new PVC provisioned by the driver is read back by a pod.
func TestSnapshotBackupOfALiveVolume(t *testing.T) {
	alongside(t)
	class := csiClass(t)
	ns := namespace(t, "e2e-snapshot")
	s3 := deployMinIO(t, ns)
	if pv := csiClaim(t, ns, "log", class); pv.Spec.CSI == nil || pv.Spec.CSI.Driver != csiDriver {
		t.Fatalf("PV of the claim: %+v, want a volume of %s", pv.Spec.PersistentVolumeSource, csiDriver)
	}
	writer := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "log"}}}},
			Containers: []corev1.Container{{Name: "main", Image: cfg.toolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", recordLog}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		},
	}
	must(t, k8s.Create(ctx, writer))
	eventually(t, "the writer has written 50 records", 2*time.Minute, func() (bool, string) {
		out, _ := kubectl("-n", ns, "exec", "writer", "--", "sh", "-c", "wc -l < /data/log")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n >= 50, out
	})

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: live, namespace: %s}
spec:
  pvcName: log
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  snapshot: {}
  s3Bucket: %s
  engine: Archive
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))

	// While the run goes: its VolumeSnapshot, of the default class, and the temporary PVC made
	// from it by the driver's provisioner.
	var snapClass, tmpDriver, tmpSource, content string
	eventually(t, "backup run finished", 5*time.Minute, func() (bool, string) {
		got := get(t, backup)
		for _, vs := range listSnapshots(t, ns) {
			snapClass = str(&vs, "spec", "volumeSnapshotClassName")
			if c := str(&vs, "status", "boundVolumeSnapshotContentName"); c != "" {
				content = c
			}
			tmp := &corev1.PersistentVolumeClaim{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: vs.GetName()}, tmp); err == nil && tmp.Spec.DataSource != nil {
				tmpSource = tmp.Spec.DataSource.Kind + "/" + tmp.Spec.DataSource.Name
				if tmp.Spec.VolumeName != "" {
					pv := &corev1.PersistentVolume{}
					if k8s.Get(ctx, client.ObjectKey{Name: tmp.Spec.VolumeName}, pv) == nil && pv.Spec.CSI != nil {
						tmpDriver = pv.Spec.CSI.Driver
					}
				}
			}
		}
		if str(got, "status", "lastRun", "result") == "Failed" {
			t.Fatalf("backup failed:\n%s", statusJSON(got))
		}
		return str(got, "status", "lastRun", "result") == "Succeeded", statusJSON(got)
	})
	if snapClass != csiSnapshotClass || content == "" {
		t.Errorf("the run's VolumeSnapshot: class %q content %q, want the default class %s and a bound content", snapClass, content, csiSnapshotClass)
	}
	if !strings.HasPrefix(tmpSource, "VolumeSnapshot/live-") || tmpDriver != csiDriver {
		t.Errorf("the temporary PVC: data source %q, provisioned by %q; want a VolumeSnapshot of the run and %s", tmpSource, tmpDriver, csiDriver)
	}
	got := get(t, backup)
	key := str(got, "status", "lastRun", "objectKey")
	if _, ok := s3.keys(t, "")[key]; !ok {
		t.Fatalf("the backup %s is not in the bucket", key)
	}

	t.Run("the temporary snapshot, its content and the PVC are gone", func(t *testing.T) {
		eventually(t, "no snapshot, content or temporary PVC left", 2*time.Minute, func() (bool, string) {
			snaps := listSnapshots(t, ns)
			pvcs := &corev1.PersistentVolumeClaimList{}
			must(t, k8s.List(ctx, pvcs, client.InNamespace(ns)))
			left := []string{}
			for _, s := range snaps {
				left = append(left, "VolumeSnapshot/"+s.GetName())
			}
			for _, p := range pvcs.Items {
				if p.Name != "log" {
					left = append(left, "PVC/"+p.Name)
				}
			}
			if content != "" {
				c := &unstructured.Unstructured{}
				c.SetGroupVersionKind(volumeSnapshotContentGVK)
				if k8s.Get(ctx, client.ObjectKey{Name: content}, c) == nil {
					left = append(left, "VolumeSnapshotContent/"+content)
				}
			}
			return len(left) == 0, strings.Join(left, " ")
		})
	})

	t.Run("restore into a new PVC of the driver: a whole prefix of the live log", func(t *testing.T) {
		restore := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: restore, namespace: %s}
spec:
  source: {pvcBackup: live, backupID: latest}
  target:
    newPVC: {name: restored, size: 100Mi, storageClassName: %s}
`, ns, class))
		must(t, k8s.Create(ctx, restore))
		eventually(t, "restore finished", 4*time.Minute, func() (bool, string) {
			got := get(t, restore)
			if str(got, "status", "phase") == "Failed" {
				t.Fatalf("restore failed:\n%s", statusJSON(got))
			}
			return str(got, "status", "phase") == "Succeeded", statusJSON(got)
		})
		if pv := boundVolume(t, ns, "restored"); pv.Spec.CSI == nil || pv.Spec.CSI.Driver != csiDriver {
			t.Errorf("the restored PVC is not a volume of %s: %+v", csiDriver, pv.Spec.PersistentVolumeSource)
		}
		vols, mounts := claimVolume("restored", true)
		report := runPod(t, ns, "check-restored", checkLog, vols, mounts)
		if strings.Contains(report, "BAD") {
			t.Fatalf("the restored log has broken records:\n%s", report)
		}
		var n, size int64
		var sum string
		if _, err := fmt.Sscanf(report[strings.LastIndex(report, "records "):], "records %d bytes %d sha256 %s", &n, &size, &sum); err != nil || n < 50 {
			t.Fatalf("report %q: %v (want at least the 50 records written before the backup)", report, err)
		}
		// The live log, still growing, starts with exactly those bytes.
		live, err := kubectl("-n", ns, "exec", "writer", "--", "sh", "-c",
			fmt.Sprintf("head -c %d /data/log | sha256sum | cut -c1-64; wc -l < /data/log", size))
		must(t, err)
		lines := strings.Fields(live)
		if len(lines) != 2 || lines[0] != sum {
			t.Errorf("the restored log (%d records, %d bytes) is not a prefix of the live log: %q", n, size, live)
		}
		t.Logf("restored %d whole records (%d bytes); the live log has %s by now", n, size, lines[len(lines)-1])
	})
}

// TestSnapshotOfAStoppedDriverEndsTheRun: with the CSI driver stopped, the run's snapshot is
// never cut; the run ends at spec.mover.activeDeadlineSeconds with SnapshotNotReady and a message
// saying how far the snapshot got; once the driver is back, nothing of the run is left.
func TestSnapshotOfAStoppedDriverEndsTheRun(t *testing.T) {
	class := csiClass(t)
	ns := namespace(t, "e2e-snapstuck")
	s3 := deployMinIO(t, ns)
	csiClaim(t, ns, "data", class)
	scaleDriver(t, 0)
	t.Cleanup(func() { scaleDriver(t, 1) })

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: stuck, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  snapshot: {volumeSnapshotClassName: %s}
  s3Bucket: %s
  engine: Archive
  mover: {activeDeadlineSeconds: 60}
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
`, ns, csiSnapshotClass, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	start := time.Now()
	eventually(t, "the run ended", 3*time.Minute, func() (bool, string) {
		got := get(t, backup)
		return str(got, "status", "lastRun", "result") != "", statusJSON(got)
	})
	got := get(t, backup)
	reason, msg := str(got, "status", "lastRun", "reason"), str(got, "status", "lastRun", "message")
	if str(got, "status", "lastRun", "result") != "Failed" || reason != "SnapshotNotReady" ||
		!strings.Contains(msg, "has no snapshot yet: is the CSI driver (its csi-snapshotter sidecar) running?") {
		t.Fatalf("lastRun: %s %q, want Failed SnapshotNotReady saying the driver cut no snapshot:\n%s", reason, msg, statusJSON(got))
	}
	took := time.Since(start)
	if took > 100*time.Second {
		t.Errorf("the run ended %s after it was created, its bound is 60 s (plus a reconcile)", took.Round(time.Second))
	}
	if keys := s3.keys(t, ""); len(keys) != 0 {
		t.Errorf("a failed run left objects in the bucket: %v", keys)
	}
	t.Logf("run ended after %s: %s", took.Round(time.Second), msg)

	scaleDriver(t, 1)
	eventually(t, "nothing of the run left once the driver is back", 2*time.Minute, func() (bool, string) {
		left := []string{}
		for _, s := range listSnapshots(t, ns) {
			left = append(left, "VolumeSnapshot/"+s.GetName())
		}
		contents := &unstructured.UnstructuredList{}
		contents.SetGroupVersionKind(volumeSnapshotContentGVK)
		must(t, k8s.List(ctx, contents))
		for _, c := range contents.Items {
			if str(&c, "spec", "volumeSnapshotRef", "namespace") == ns {
				left = append(left, "VolumeSnapshotContent/"+c.GetName())
			}
		}
		pvcs := &corev1.PersistentVolumeClaimList{}
		must(t, k8s.List(ctx, pvcs, client.InNamespace(ns)))
		for _, p := range pvcs.Items {
			if p.Name != "data" {
				left = append(left, "PVC/"+p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

// TestNoDefaultSnapshotClassIsReported: without a default VolumeSnapshotClass for the PVC's
// driver, a PVCBackup with `snapshot: {}` is Ready=False NoDefaultSnapshotClass naming the classes
// it could use, and takes no snapshot; marking one default lets the run start.
func TestNoDefaultSnapshotClassIsReported(t *testing.T) {
	class := csiClass(t)
	ns := namespace(t, "e2e-snapdefault")
	s3 := deployMinIO(t, ns)
	csiClaim(t, ns, "data", class)
	setDefaultSnapshotClass(t, false)
	t.Cleanup(func() { setDefaultSnapshotClass(t, true) })

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: nodefault, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  snapshot: {}
  s3Bucket: %s
  engine: Archive
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	eventually(t, "Ready=False NoDefaultSnapshotClass", time.Minute, func() (bool, string) {
		got := get(t, backup)
		_, reason, _ := condition(got, "Ready")
		return reason == "NoDefaultSnapshotClass", statusJSON(got)
	})
	got := get(t, backup)
	_, _, msg := condition(got, "Ready")
	if !strings.Contains(msg, fmt.Sprintf("no VolumeSnapshotClass of driver %q", csiDriver)) ||
		!strings.Contains(msg, "set spec.snapshot.volumeSnapshotClassName to one of "+csiSnapshotClass) {
		t.Errorf("Ready message %q does not say how to pick a class", msg)
	}
	if n := len(listSnapshots(t, ns)); n != 0 || str(got, "status", "activeRun", "id") != "" {
		t.Errorf("%d snapshots and a run %q without a snapshot class", n, str(got, "status", "activeRun", "id"))
	}
}

func listSnapshots(t *testing.T, ns string) []unstructured.Unstructured {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(volumeSnapshotGVK)
	must(t, k8s.List(ctx, list, client.InNamespace(ns)))
	return list.Items
}

// scaleDriver stops (0) or starts (1) the CSI driver's pod and waits for it.
func scaleDriver(t *testing.T, replicas int32) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: csiPluginNS, Name: csiPlugin}, sts))
	if ptr.Deref(sts.Spec.Replicas, 1) != replicas {
		sts.Spec.Replicas = ptr.To(replicas)
		must(t, k8s.Update(ctx, sts))
	}
	eventually(t, fmt.Sprintf("%s at %d ready pods", csiPlugin, replicas), 2*time.Minute, func() (bool, string) {
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts))
		pods := podsOf(t, csiPluginNS, sts.Spec.Selector.MatchLabels)
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		return ready == int(replicas) && len(pods) == int(replicas), fmt.Sprintf("%d pods, %d ready", len(pods), ready)
	})
}

// setDefaultSnapshotClass marks the driver's VolumeSnapshotClass default, or not.
func setDefaultSnapshotClass(t *testing.T, isDefault bool) {
	t.Helper()
	c := &unstructured.Unstructured{}
	c.SetGroupVersionKind(volumeSnapshotClassGVK)
	must(t, k8s.Get(ctx, client.ObjectKey{Name: csiSnapshotClass}, c))
	a := c.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a["snapshot.storage.kubernetes.io/is-default-class"] = strconv.FormatBool(isDefault)
	c.SetAnnotations(a)
	must(t, k8s.Update(ctx, c))
}
