//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The disaster-recovery story (issue 34) runs in two phases on two clusters, driven by
// hack/local-cluster.sh dr (make test-e2e runs it after the e2e suite):
//
//  1. E2E_DR_PHASE=backup, on the first cluster: a volume is filled and backed up (default engine,
//     kopia) into a bucket of a MinIO that runs on the node's address outside the cluster, the way a
//     real bucket outlives a cluster. The tree's fingerprint and what the backup reported go to
//     $E2E_DR_STATE. Nothing is deleted: the cluster is destroyed under its objects (`down`).
//  2. E2E_DR_PHASE=restore, on a brand-new cluster (`up`, then make deploy by TestMain) that knows
//     nothing but the bucket, its keys and the repository password: the backups are discovered and
//     one is restored into a new PVC; the restored tree is the backed-up one.
//
// Without E2E_DR_PHASE the story is skipped: the ordinary suite has one cluster.

// drState is what the backup phase leaves for the restore phase (in $E2E_DR_STATE/state.json).
type drState struct {
	Namespace   string `json:"namespace"`
	PVCBackup   string `json:"pvcBackup"`
	BackupID    string `json:"backupID"`
	SnapshotID  string `json:"snapshotID"`
	Fingerprint string `json:"fingerprint"`
}

// drBucket is the MinIO outside the cluster: E2E_DR_S3 (host:port on the node's address, which
// pods reach like the API server), E2E_DR_ACCESS_KEY, E2E_DR_SECRET_KEY.
type drBucket struct {
	endpoint, accessKey, secretKey, bucket string
	client                                 *minio.Client
}

func drSetup(t *testing.T) (phase string, b drBucket, stateFile string) {
	t.Helper()
	phase = os.Getenv("E2E_DR_PHASE")
	if phase == "" {
		t.Skip("the disaster-recovery story runs only from hack/local-cluster.sh dr (E2E_DR_PHASE)")
	}
	b = drBucket{endpoint: os.Getenv("E2E_DR_S3"), accessKey: os.Getenv("E2E_DR_ACCESS_KEY"),
		secretKey: os.Getenv("E2E_DR_SECRET_KEY"), bucket: "dr-backups"}
	if b.endpoint == "" || b.accessKey == "" || b.secretKey == "" || os.Getenv("E2E_DR_STATE") == "" {
		t.Fatal("E2E_DR_PHASE needs E2E_DR_S3, E2E_DR_ACCESS_KEY, E2E_DR_SECRET_KEY and E2E_DR_STATE")
	}
	var err error
	b.client, err = minio.New(b.endpoint, &minio.Options{Creds: credentials.NewStaticV4(b.accessKey, b.secretKey, "")})
	must(t, err)
	return phase, b, filepath.Join(os.Getenv("E2E_DR_STATE"), "state.json")
}

// drSecret is the only thing the user brings to the new cluster besides the operator: the bucket's
// keys and the repository password.
func (b drBucket) drSecret(t *testing.T, ns string) {
	t.Helper()
	must(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": b.accessKey, "AWS_SECRET_ACCESS_KEY": b.secretKey,
			"KOPIA_PASSWORD": kopiaPassword}}))
}

func TestDisasterRecovery(t *testing.T) {
	phase, bucket, stateFile := drSetup(t)
	switch phase {
	case "backup":
		drBackup(t, bucket, stateFile)
	case "restore":
		drRestore(t, bucket, stateFile)
	default:
		t.Fatalf("E2E_DR_PHASE=%q: want backup or restore", phase)
	}
}

// drBackup is phase 1. Its namespace is not deleted at the end (namespace() would delete the
// PVCBackup, and a deletion policy could touch the bucket): the cluster goes down under it.
func drBackup(t *testing.T, bucket drBucket, stateFile string) {
	must(t, bucket.client.MakeBucket(ctx, bucket.bucket, minio.MakeBucketOptions{}))
	ns := "e2e-dr-" + randomSuffix()
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, ns)
		}
	})
	bucket.drSecret(t, ns)
	claim(t, ns, "data")
	vols, mounts := claimVolume("data", false)
	runPod(t, ns, "make-tree", makeTree, vols, mounts)
	vols, mounts = claimVolume("data", true)
	source := runPod(t, ns, "fingerprint-source", kopiaFingerprint, vols, mounts)

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: app-data, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: before-the-disaster}
  s3Bucket: %s
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: s3-credentials}
  verify: true
`, ns, bucket.bucket, bucket.endpoint))
	must(t, k8s.Create(ctx, backup))
	var lastRun map[string]any
	eventually(t, "backup verified", 5*time.Minute, func() (bool, string) {
		got := get(t, backup)
		lastRun, _, _ = unstructured.NestedMap(got.Object, "status", "lastRun")
		if str(got, "status", "lastRun", "result") == "Failed" {
			t.Fatalf("backup failed:\n%s", statusJSON(got))
		}
		return str(got, "status", "lastRun", "result") == "Succeeded" && lastRun["verified"] == true, statusJSON(got)
	})
	state := drState{Namespace: ns, PVCBackup: "app-data", BackupID: fmt.Sprint(lastRun["id"]),
		SnapshotID: fmt.Sprint(lastRun["snapshotID"]), Fingerprint: source}
	data, err := json.MarshalIndent(state, "", "  ")
	must(t, err)
	must(t, os.WriteFile(stateFile, data, 0o600))
	t.Logf("backup %s (snapshot %s) of %s/%s in bucket %s at %s: the cluster can go", state.BackupID, state.SnapshotID,
		ns, state.PVCBackup, bucket.bucket, bucket.endpoint)
}

// drRestore is phase 2, on a cluster that has never seen the backup.
func drRestore(t *testing.T, bucket drBucket, stateFile string) {
	data, err := os.ReadFile(stateFile)
	must(t, err)
	var want drState
	must(t, json.Unmarshal(data, &want))
	if out, err := kubectl("get", "namespace", want.Namespace); err == nil {
		t.Fatalf("namespace %s of the backup exists: this is not a new cluster\n%s", want.Namespace, out)
	}

	ns := namespace(t, "e2e-dr-restore")
	bucket.drSecret(t, ns)
	source := drDiscover(t, ns, bucket, want)

	volumeFor(t, ns, "data-restored", "65532:65532") // the mover's uid (distroless nonroot)
	restore := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: after-the-disaster, namespace: %s}
spec:
  source:
    backupID: %s
    s3:
      bucket: %s
      namespace: %s
      pvcBackup: %s
      location:
        endpoint: %q
        insecure: true
        credentialsSecretRef: {name: s3-credentials}
  target:
    newPVC: {name: data-restored, size: 1Gi}
`, ns, source.BackupID, bucket.bucket, source.Namespace, source.PVCBackup, bucket.endpoint))
	must(t, k8s.Create(ctx, restore))
	eventually(t, "restore finished", 5*time.Minute, func() (bool, string) {
		got := get(t, restore)
		if str(got, "status", "phase") == "Failed" {
			t.Fatalf("restore failed:\n%s", statusJSON(got))
		}
		return str(got, "status", "phase") == "Succeeded", statusJSON(got)
	})
	got := get(t, restore)
	if id, snap := str(got, "status", "backupID"), str(got, "status", "snapshotID"); id != want.BackupID || snap != want.SnapshotID {
		t.Errorf("restored backup %s (snapshot %s), the first cluster made %s (snapshot %s)", id, snap, want.BackupID, want.SnapshotID)
	}
	vols, mounts := claimVolume("data-restored", true)
	restored := runPod(t, ns, "fingerprint-restored", kopiaFingerprint, vols, mounts)
	if restored != want.Fingerprint {
		t.Errorf("the restored tree differs from the one backed up on the destroyed cluster:\n%s", lineDiff(want.Fingerprint, restored))
	}
	if n := strings.Count(restored, "\n"); n < 45 {
		t.Errorf("the restored tree has %d entries", n)
	}
}

// drDiscover finds the backup to restore the way a user on the new cluster does: a BackupCatalog
// of the bucket lists the PVCBackups that wrote into it and their restorable backups (newest
// first); the state file only checks the answer.
func drDiscover(t *testing.T, ns string, bucket drBucket, want drState) drState {
	t.Helper()
	catalog := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: BackupCatalog
metadata: {name: what-survived, namespace: %s}
spec:
  bucket: %s
  location:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: s3-credentials}
`, ns, bucket.bucket, bucket.endpoint))
	must(t, k8s.Create(ctx, catalog))
	var found drState
	eventually(t, "the catalog lists the backup", 2*time.Minute, func() (bool, string) {
		got := get(t, catalog)
		if status, _, _ := condition(got, "Ready"); status != "True" {
			return false, statusJSON(got)
		}
		sources, _, _ := unstructured.NestedSlice(got.Object, "status", "sources")
		for _, s := range sources {
			source, _ := s.(map[string]any)
			backups, _ := source["backups"].([]any)
			if len(backups) == 0 {
				continue
			}
			newest, _ := backups[0].(map[string]any)
			found = drState{Namespace: fmt.Sprint(source["namespace"]), PVCBackup: fmt.Sprint(source["pvcBackup"]),
				BackupID: fmt.Sprint(newest["id"]), SnapshotID: fmt.Sprint(newest["snapshotID"])}
			if source["engine"] != "Kopia" || newest["confirmed"] != true {
				t.Errorf("catalog source %s/%s: engine %v, newest backup %v; want Kopia and confirmed", found.Namespace, found.PVCBackup, source["engine"], newest)
			}
		}
		return len(sources) == 1 && found.BackupID != "", statusJSON(got)
	})
	if found.Namespace != want.Namespace || found.PVCBackup != want.PVCBackup || found.BackupID != want.BackupID || found.SnapshotID != want.SnapshotID {
		t.Fatalf("the catalog found %+v; the destroyed cluster backed up %s/%s, backup %s (snapshot %s)", found,
			want.Namespace, want.PVCBackup, want.BackupID, want.SnapshotID)
	}
	return found
}
