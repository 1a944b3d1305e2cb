//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// makeTree fills /data/tree with a generated tree: nested directories, an empty directory, 40 files
// of 1–40 KiB and an 8 MiB file of random bytes, an empty file, names with spaces and non-ASCII
// letters, a relative symlink, a hard link, read-only and executable modes, and an old mtime.
const makeTree = `set -e
mkdir -p /data/tree && cd /data/tree
mkdir -p a/b/c empty "with space" "ünïcödé"
i=1; while [ $i -le 40 ]; do dd if=/dev/urandom of=a/f$i bs=1024 count=$i 2>/dev/null; i=$((i+1)); done
dd if=/dev/urandom of=a/b/c/big bs=1048576 count=8 2>/dev/null
: > zero
echo hello > "with space/hello world.txt"
echo unicode > "ünïcödé/データ.txt"
ln -s ../f1 a/b/rel-link
ln a/f2 a/b/hard
chmod 0444 a/f4
chmod 0755 a/f5
touch -d "2001-02-03 04:05:06" a/f6
`

// fingerprint prints one line per entry of /data/tree: type, path, mode, and for files size, link
// count, mtime and sha256; for symlinks the target. Two trees with the same fingerprint are the
// same tree (owners aside: the restore mover is not root).
const fingerprint = `set -e
cd /data/tree
find . -mindepth 1 | sort | while IFS= read -r p; do
  if [ -L "$p" ]; then echo "link $p -> $(readlink "$p")"
  elif [ -d "$p" ]; then echo "dir $p $(stat -c %a "$p")"
  else echo "file $p $(stat -c '%a %s %h %Y' "$p") $(sha256sum < "$p" | cut -d' ' -f1)"; fi
done
`

// TestBackupAndRestoreWithRealPods: a PVC holding a generated tree is backed up (engine Archive)
// by a mover Job running as a real pod into MinIO running in the cluster; the status reports the size and sha256
// of the object actually in the bucket; a PVCRestore restores it into a new PVC, and a pod reading
// that PVC sees the same tree.
func TestBackupAndRestoreWithRealPods(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-backup")
	s3 := deployMinIO(t, ns)
	claim(t, ns, "data")
	vols, mounts := claimVolume("data", false)
	runPod(t, ns, "make-tree", makeTree, vols, mounts)
	vols, mounts = claimVolume("data", true)
	source := runPod(t, ns, "fingerprint-source", fingerprint, vols, mounts)
	if n := strings.Count(source, "\n"); n < 45 {
		t.Fatalf("the generated tree has %d entries:\n%s", n, source)
	}

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: nightly, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: e2e-1}
  s3Bucket: %s
  engine: Archive
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
  verify: true
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))

	var lastRun map[string]any
	eventually(t, "backup run finished", 4*time.Minute, func() (bool, string) {
		got := get(t, backup)
		lastRun, _, _ = unstructured.NestedMap(got.Object, "status", "lastRun")
		if str(got, "status", "lastRun", "result") == "Failed" {
			t.Fatalf("backup failed:\n%s", statusJSON(got))
		}
		// Done when the verify Job has reported too (spec.verify).
		return str(got, "status", "lastRun", "result") == "Succeeded" && lastRun["verified"] != nil, statusJSON(got)
	})
	got := get(t, backup)
	if status, reason, msg := condition(got, "Ready"); status != "True" || reason != "Scheduled" {
		t.Errorf("Ready = %s %s %q, want True Scheduled", status, reason, msg)
	}
	if lastRun["verified"] != true {
		t.Errorf("lastRun.verified = %v, want true", lastRun["verified"])
	}
	key, sum := fmt.Sprint(lastRun["objectKey"]), fmt.Sprint(lastRun["sha256"])
	size, _ := strconv.ParseInt(fmt.Sprint(lastRun["bytes"]), 10, 64)
	content, _ := strconv.ParseInt(fmt.Sprint(lastRun["contentBytes"]), 10, 64)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) || size <= 0 {
		t.Fatalf("lastRun: sha256 %q, bytes %d", sum, size)
	}
	if content < 8<<20 {
		t.Errorf("lastRun.contentBytes = %d, want at least the 8 MiB file", content)
	}

	t.Run("the backup is in MinIO as reported", func(t *testing.T) {
		keys := s3.keys(t, "")
		if _, ok := keys[key]; !ok {
			t.Fatalf("object %s of lastRun not in the bucket: %v", key, keys)
		}
		manifest := strings.TrimSuffix(key, ".tar.zst") + ".manifest.json"
		if _, ok := keys[manifest]; !ok {
			t.Errorf("manifest %s not in the bucket: %v", manifest, keys)
		}
		gotSize, gotSum := s3.sha256Of(t, key)
		if gotSize != size || gotSum != sum {
			t.Errorf("object in MinIO: %d bytes sha256 %s; status says %d bytes sha256 %s", gotSize, gotSum, size, sum)
		}
	})

	t.Run("the movers ran as pods of Jobs", func(t *testing.T) {
		// Two: the backup mover and the verify mover, each once.
		if started, completed := startedPods(t, ns, "nightly-"), completedJobs(t, ns, "nightly-"); started != 2 || completed != 2 {
			t.Errorf("events: %d mover pods started, %d Jobs completed; want 2 and 2", started, completed)
		}
	})

	t.Run("restore into a new PVC", func(t *testing.T) {
		volumeFor(t, ns, "data-restored", "65532:65532") // the mover's uid (distroless nonroot)
		newPVC := "{name: data-restored, size: 1Gi}"
		if cfg.storageClass != "" {
			newPVC = fmt.Sprintf("{name: data-restored, size: 1Gi, storageClassName: %s}", cfg.storageClass)
		}
		restore := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: restore, namespace: %s}
spec:
  source: {pvcBackup: nightly, backupID: latest}
  target:
    newPVC: %s
`, ns, newPVC))
		must(t, k8s.Create(ctx, restore))
		eventually(t, "restore finished", 4*time.Minute, func() (bool, string) {
			got := get(t, restore)
			if str(got, "status", "phase") == "Failed" {
				t.Fatalf("restore failed:\n%s", statusJSON(got))
			}
			return str(got, "status", "phase") == "Succeeded", statusJSON(got)
		})
		got := get(t, restore)
		if v := str(got, "status", "verifiedSHA256"); v != sum {
			t.Errorf("verifiedSHA256 = %s, want the backup's %s", v, sum)
		}
		if id := str(got, "status", "backupID"); id != fmt.Sprint(lastRun["id"]) {
			t.Errorf("restored backup %s, want the latest %v", id, lastRun["id"])
		}
		if files := str(got, "status", "files"); files != fmt.Sprint(lastRun["files"]) {
			t.Errorf("restored %s files, the backup has %v", files, lastRun["files"])
		}
		if n := startedPods(t, ns, "restore-"); n != 1 {
			t.Errorf("%d restore mover pods ran, want 1: a finished restore must not run again", n)
		}
		vols, mounts := claimVolume("data-restored", true)
		restored := runPod(t, ns, "fingerprint-restored", fingerprint, vols, mounts)
		if restored != source {
			t.Errorf("the restored tree differs from the source:\n%s", lineDiff(source, restored))
		}
	})
}

// startedPods counts the pods named prefix* whose container the kubelet started (their events
// outlive the Jobs, which the operator deletes once it has recorded the result).
func startedPods(t *testing.T, ns, prefix string) int {
	return countEvents(t, ns, "Pod", "Started", prefix)
}

func completedJobs(t *testing.T, ns, prefix string) int {
	return countEvents(t, ns, "Job", "Completed", prefix)
}

func countEvents(t *testing.T, ns, kind, reason, prefix string) int {
	t.Helper()
	var events corev1.EventList
	must(t, k8s.List(ctx, &events, client.InNamespace(ns)))
	n := 0
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == kind && e.Reason == reason && strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			n++
		}
	}
	return n
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out.WriteString("+ " + l + "\n")
		}
	}
	return out.String()
}
