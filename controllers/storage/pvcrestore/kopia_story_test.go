package pvcrestore

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Four hourly kopia backups with keepLast 2, through the controller, the real mover and MinIO:
// each run records its snapshot and the repository; retention prunes a backup by its manifest
// and the next run's mover deletes its snapshot; a restore of "latest" gives the tree back.
func TestKopiaBackupsPrunedRestoredThroughTheController(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app", func(pb *storagev1.PVCBackup) { pb.Spec.Retention = &storagev1.Retention{KeepLast: 2} })

	var snaps []string
	for i := 1; i <= 4; i++ {
		w.Must(os.WriteFile(filepath.Join(src, "README"), []byte("run "+string(rune('0'+i))), 0o644))
		w.Clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
		w.Reconcile(pb)
		job := w.Job(pb)
		res := w.RunMover(job, src)
		w.FinishPod(job, res) // the Result reaches the controller as the termination message
		w.FinishJob(job, res.Succeeded())
		w.Clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
		w.Reconcile(pb)
		run := pb.Status.LastRun
		if run == nil || run.Result != storagev1.RunSucceeded || run.Engine != storagev1.EngineKopia || run.SnapshotID == "" {
			t.Fatalf("run %d: %+v", i, run)
		}
		// a new repository's first full maintenance is a day after its creation
		if r := pb.Status.Repository; r == nil || r.Bytes <= 0 || r.LastFullMaintenance != nil || r.KeyDerivation != "Scrypt" {
			t.Fatalf("run %d: status.repository = %+v", i, r)
		}
		snaps = append(snaps, run.SnapshotID)
	}
	if len(pb.Status.Backups) != 2 || pb.Status.Backups[0].SnapshotID != snaps[3] || pb.Status.Backups[1].SnapshotID != snaps[2] {
		t.Errorf("status.backups = %+v, want the snapshots of runs 4 and 3", pb.Status.Backups)
	}
	// Run 3 pruned run 1 and run 4 swept its snapshot; run 4 pruned run 2, swept by run 5.
	if got, want := w.snapshotsOf(pb), snaps[1:]; !slices.Equal(got, want) {
		t.Errorf("snapshots in the repository: %v, want %v", got, want)
	}

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.Engine != storagev1.EngineKopia || pr.Status.SnapshotID != snaps[3] {
		t.Fatalf("restore status: %+v", pr.Status)
	}
	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if pr.Status.Phase != storagev1.RestoreSucceeded {
		t.Fatalf("restore: %+v", pr.Status)
	}
	for _, f := range []string{"db/data.bin", "README"} {
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs after the round trip (%v)", f, err)
		}
	}
	if c := condition2(pr); c.Status != metav1.ConditionTrue || c.Reason != ReasonRestored {
		t.Errorf("Complete = %+v", c)
	}
}

// Issue 30, finding 3: a kopia manifest dated in the future is never "latest" (it would be
// forever): restoring latest restores the newest good backup, and the manifest is broken.
func TestKopiaManifestFromTheFutureIsNotLatest(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.Must(os.WriteFile(filepath.Join(src, "README"), []byte("first"), 0o644))
	w.KopiaRun(pb, first, 1, src)
	w.Must(os.WriteFile(filepath.Join(src, "README"), []byte("second"), 0o644))
	w.KopiaRun(pb, first, 2, src)
	newest := pb.Status.LastRun.ID
	future := storagekit.RunID(first.AddDate(1, 0, 0), false)
	w.HandMadeManifest(pb, newest, future, "k0123456789abcdef0123456789abcdef")

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != newest {
		t.Fatalf("restore of latest chose %q (%+v), want the newest good backup %s", pr.Status.BackupID, pr.Status, newest)
	}
	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if got, _ := os.ReadFile(filepath.Join(dst, "README")); pr.Status.Phase != storagev1.RestoreSucceeded || string(got) != "second" {
		t.Fatalf("restore: %+v, README %q", pr.Status, got)
	}

	w.KopiaRun(pb, first, 3, src)
	if slices.Contains(storagetest.BackupIDs(pb.Status.Backups), future) || !strings.Contains(storagetest.BrokenProblem(pb, future), "in the future") {
		t.Errorf("status.backups %v, brokenBackups %+v: want %s broken, dated in the future", storagetest.BackupIDs(pb.Status.Backups), pb.Status.BrokenBackups, future)
	}
}

// Issue 30: a stale repository record never vouches for a manifest written after it. A manifest
// that appears after the last run listed the repository (here a hand-made one naming no
// snapshot) is not "latest": restoring latest restores the newest checked backup and says which
// newer one it passed over.
func TestKopiaManifestNewerThanTheLastCheckIsNotLatest(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.KopiaRun(pb, first, 1, src)
	good := pb.Status.LastRun.ID
	unchecked := storagekit.RunID(first.Add(90*time.Minute), false)
	w.HandMadeManifest(pb, good, unchecked, "k0123456789abcdef0123456789abcdef")
	w.Clock.Set(first.Add(100 * time.Minute))

	pr := newRestore(w.NS, "back", "app")
	w.Must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != good {
		t.Fatalf("restore of latest chose %q, want %s, the newest backup the last run checked", pr.Status.BackupID, good)
	}
	if c := condition2(pr); !strings.Contains(c.Message, unchecked) || !strings.Contains(c.Message, "not checked") {
		t.Errorf("Complete = %+v, want it to name %s as not checked yet", c, unchecked)
	}
}

// snapshotsOf lists the snapshots in the kopia repository of pb, by ID.
func (w *world) snapshotsOf(pb *storagev1.PVCBackup) []string {
	w.T.Helper()
	cfg := objectstore.Config{Endpoint: w.MinIO.Endpoint, Bucket: storagetest.Bucket, Insecure: true, AccessKey: w.MinIO.AccessKey, SecretKey: w.MinIO.SecretKey}
	r, err := kopiarepo.Open(testCtx, kopiarepo.S3Config{Config: cfg, Prefix: storagekit.KopiaPrefix(storagekit.BackupPrefix(pb))},
		"correct horse battery staple", kopiarepo.Options{NoCreate: true})
	w.Must(err)
	defer r.Close(testCtx)
	snaps, err := r.List(testCtx)
	w.Must(err)
	var ids []string
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return ids
}
