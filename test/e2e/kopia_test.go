//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kopiaFingerprint is fingerprint without link counts: kopia restores hard links as copies.
var kopiaFingerprint = strings.Replace(fingerprint, "'%a %s %h %Y'", "'%a %s %Y'", 1)

// TestKopiaBackupAndRestoreWithRealPods: a PVCBackup with the default engine backs the generated
// tree up with kopia, in real pods (non-root, read-only root filesystem, kopia's cache in its
// emptyDir): the repository in MinIO holds nothing of the volume in clear; a second backup after a
// small change uploads a small fraction of the first; verify reads the snapshot back; a PVCRestore
// of "latest" gives back the same tree.
func TestKopiaBackupAndRestoreWithRealPods(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-kopia")
	s3 := deployMinIO(t, ns)
	claim(t, ns, "data")
	vols, mounts := claimVolume("data", false)
	runPod(t, ns, "make-tree", makeTree, vols, mounts)
	vols, mounts = claimVolume("data", true)
	source := runPod(t, ns, "fingerprint-source", kopiaFingerprint, vols, mounts)

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: hourly, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  s3Bucket: %s
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
  verify: true
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	// waitRun waits for the run of trigger to be recorded: a run other than previous (the
	// trigger is recorded when its run starts, while lastRun still holds the one before).
	waitRun := func(trigger, previous string) map[string]any {
		var lastRun map[string]any
		eventually(t, "kopia backup run "+trigger, 5*time.Minute, func() (bool, string) {
			got := get(t, backup)
			lastRun, _, _ = unstructured.NestedMap(got.Object, "status", "lastRun")
			if str(got, "status", "lastRun", "result") == "Failed" {
				t.Fatalf("backup failed:\n%s", statusJSON(got))
			}
			return str(got, "status", "lastManualTrigger") == trigger && str(got, "status", "lastRun", "result") == "Succeeded" &&
				str(got, "status", "lastRun", "id") != previous && lastRun["verified"] != nil, statusJSON(got)
		})
		return lastRun
	}
	first := waitRun("e2e-1", "")
	got := get(t, backup)
	if first["engine"] != "Kopia" || first["snapshotID"] == nil || first["verified"] != true {
		t.Fatalf("first run: %v", first)
	}
	if str(got, "status", "engine") != "Kopia" {
		t.Errorf("status.engine = %q", str(got, "status", "engine"))
	}
	repoBytes, _ := strconv.ParseInt(str(got, "status", "repository", "bytes"), 10, 64)
	if repoBytes < 8<<20 {
		t.Errorf("status.repository.bytes = %d, want at least the 8 MiB file", repoBytes)
	}

	t.Run("the repository holds nothing in clear", func(t *testing.T) {
		keys := s3.keys(t, "")
		n := 0
		for key := range keys {
			if !strings.Contains(key, "/kopia/") {
				continue
			}
			n++
			obj, err := s3.client.GetObject(ctx, s3.bucket, key, minio.GetObjectOptions{})
			must(t, err)
			data, err := io.ReadAll(obj)
			obj.Close()
			must(t, err)
			for _, clear := range []string{"hello world.txt", "データ.txt", "rel-link"} {
				if strings.Contains(string(data), clear) {
					t.Errorf("%s holds %q in clear", key, clear)
				}
			}
		}
		if n == 0 {
			t.Fatalf("no kopia repository in the bucket: %v", keys)
		}
	})

	t.Run("a second backup uploads what changed", func(t *testing.T) {
		vols, mounts := claimVolume("data", false)
		runPod(t, ns, "change-one-file", "echo changed >> '/data/tree/with space/hello world.txt'", vols, mounts)
		must(t, k8s.Patch(ctx, backup, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"trigger":{"manual":"e2e-2"}}}`))))
		second := waitRun("e2e-2", fmt.Sprint(first["id"]))
		b1, _ := strconv.ParseInt(fmt.Sprint(first["bytes"]), 10, 64)
		b2, _ := strconv.ParseInt(fmt.Sprint(second["bytes"]), 10, 64)
		t.Logf("uploaded: first backup %d bytes, second %d bytes", b1, b2)
		if b2*10 > b1 {
			t.Errorf("the second backup uploaded %d bytes, the first %d", b2, b1)
		}
		vols, mounts = claimVolume("data", true)
		source = runPod(t, ns, "fingerprint-source-2", kopiaFingerprint, vols, mounts)
	})

	t.Run("restore latest into a new PVC", func(t *testing.T) {
		volumeFor(t, ns, "data-restored", "65532:65532")
		newPVC := "{name: data-restored, size: 1Gi}"
		if cfg.storageClass != "" {
			newPVC = fmt.Sprintf("{name: data-restored, size: 1Gi, storageClassName: %s}", cfg.storageClass)
		}
		restore := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: restore, namespace: %s}
spec:
  source: {pvcBackup: hourly, backupID: latest}
  target:
    newPVC: %s
`, ns, newPVC))
		must(t, k8s.Create(ctx, restore))
		eventually(t, "restore finished", 5*time.Minute, func() (bool, string) {
			got := get(t, restore)
			if str(got, "status", "phase") == "Failed" {
				t.Fatalf("restore failed:\n%s", statusJSON(got))
			}
			return str(got, "status", "phase") == "Succeeded", statusJSON(got)
		})
		got := get(t, restore)
		if str(got, "status", "engine") != "Kopia" || str(got, "status", "snapshotID") == "" {
			t.Errorf("restore status:\n%s", statusJSON(got))
		}
		vols, mounts := claimVolume("data-restored", true)
		restored := runPod(t, ns, "fingerprint-restored", kopiaFingerprint, vols, mounts)
		if restored != source {
			t.Errorf("the restored tree differs from the source:\n%s", lineDiff(source, restored))
		}
	})
}
