package storage

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// snapshotsOf lists the snapshots in the kopia repository of pb, by ID.
func (w *world) snapshotsOf(pb *storagev1.PVCBackup) []string {
	w.t.Helper()
	cfg := objectstore.Config{Endpoint: w.minio.Endpoint, Bucket: bucket, Insecure: true, AccessKey: w.minio.AccessKey, SecretKey: w.minio.SecretKey}
	r, err := kopiarepo.Open(testCtx, kopiarepo.S3Config{Config: cfg, Prefix: kopiaPrefix(backupPrefix(pb))},
		"correct horse battery staple", kopiarepo.Options{NoCreate: true})
	w.must(err)
	defer r.Close(testCtx)
	snaps, err := r.List(testCtx)
	w.must(err)
	var ids []string
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return ids
}

// Four hourly kopia backups with keepLast 2, through the controller, the real mover and MinIO:
// each run records its snapshot and the repository; retention prunes a backup by its manifest
// and the next run's mover deletes its snapshot; a restore of "latest" gives the tree back.
func TestKopiaBackupsPrunedRestoredThroughTheController(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 2}
	w.create(pb)
	first := pb.CreationTimestamp.Time

	var snaps []string
	for i := 1; i <= 4; i++ {
		w.must(os.WriteFile(filepath.Join(src, "README"), []byte("run "+string(rune('0'+i))), 0o644))
		w.clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
		w.reconcile(pb)
		job := w.job(pb)
		res := w.runMover(job, src)
		w.finishPod(job, res) // the Result reaches the controller as the termination message
		w.finishJob(job, res.Succeeded())
		w.clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
		w.reconcile(pb)
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

	pr := newRestore(w.ns, "back", "app")
	w.must(k8s.Create(testCtx, pr))
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

// spec.kopia.keyDerivation PBKDF2 reaches the mover of the first backup, which creates the
// repository with it; status.repository says what the repository has (the real mover, MinIO).
func TestKopiaKeyDerivationThroughTheController(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	pb.Spec.Kopia = &storagev1.KopiaOptions{KeyDerivation: storagev1.KeyDerivationPBKDF2}
	w.create(pb)
	w.clock.Set(pb.CreationTimestamp.Add(time.Hour + time.Minute))
	w.reconcile(pb)
	job := w.job(pb)
	if got := envOf(job)[mover.EnvKopiaKeyDerivation]; got != kopiarepo.KeyDerivationPBKDF2 {
		t.Fatalf("backup Job env %s = %q, want %q", mover.EnvKopiaKeyDerivation, got, kopiarepo.KeyDerivationPBKDF2)
	}
	res := w.runMover(job, src)
	w.finishPod(job, res)
	w.finishJob(job, res.Succeeded())
	w.clock.Set(pb.CreationTimestamp.Add(time.Hour + 2*time.Minute))
	w.reconcile(pb)
	if run := pb.Status.LastRun; run == nil || run.Result != storagev1.RunSucceeded {
		t.Fatalf("run: %+v", run)
	}
	if r := pb.Status.Repository; r == nil || r.KeyDerivation != "PBKDF2" {
		t.Errorf("status.repository = %+v, want keyDerivation PBKDF2", r)
	}
}
