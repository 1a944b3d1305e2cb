package storage

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// snapshotsOf lists the snapshots in the kopia repository of pb, by ID.
func (w *world) snapshotsOf(pb *storagev1.PVCBackup) []string {
	w.t.Helper()
	cfg := objectstore.Config{Endpoint: w.minio.Endpoint, Bucket: bucket, Insecure: true, AccessKey: w.minio.AccessKey, SecretKey: w.minio.SecretKey}
	r, err := kopiarepo.Open(testCtx, kopiarepo.S3Config{Config: cfg, Prefix: storagekit.KopiaPrefix(storagekit.BackupPrefix(pb))},
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

// kopiaRun runs the i-th hourly kopia backup of dir through the controller and the real mover,
// as TestKopiaBackupsPrunedRestoredThroughTheController does, and returns the mover's Result
// (a failed run is recorded, not fatal).
func (w *world) kopiaRun(pb *storagev1.PVCBackup, first time.Time, i int, dir string) mover.Result {
	w.t.Helper()
	w.clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
	w.reconcile(pb)
	job := w.job(pb)
	res := w.runMover(job, dir)
	w.finishPod(job, res)
	w.finishJob(job, res.Succeeded())
	w.clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
	w.reconcile(pb)
	if run := pb.Status.LastRun; run == nil || run.ID != job.Labels[storagekit.LabelRun] {
		w.t.Fatalf("run %d not recorded: %+v", i, pb.Status.LastRun)
	}
	return res
}

// handMadeManifest writes a kopia manifest for backup id that is a copy of backup of's, naming
// snapshot instead: a manifest the repository does not back (a hand edit, a copy).
func (w *world) handMadeManifest(pb *storagev1.PVCBackup, of, id, snapshot string) {
	w.t.Helper()
	body, err := w.s3.GetObject(testCtx, bucket, storagekit.ManifestKey(pb, of), minio.GetObjectOptions{})
	w.must(err)
	m, err := mover.ReadManifest(body)
	body.Close()
	w.must(err)
	m.ID, m.Kopia.SnapshotID = id, snapshot
	w.putObject(storagekit.ManifestKey(pb, id), mustJSON(w.t, m))
}

// repositoryBlobs lists the kopia repository's blobs of kind (q, x, p) of pb, oldest first.
func (w *world) repositoryBlobs(pb *storagev1.PVCBackup, kind string) []string {
	w.t.Helper()
	type blob struct {
		key string
		t   time.Time
	}
	var blobs []blob
	for o := range w.s3.ListObjects(testCtx, bucket, minio.ListObjectsOptions{Prefix: storagekit.KopiaPrefix(storagekit.BackupPrefix(pb)) + "/" + kind, Recursive: true}) {
		w.must(o.Err)
		blobs = append(blobs, blob{o.Key, o.LastModified})
	}
	sort.SliceStable(blobs, func(i, j int) bool { return blobs[i].t.Before(blobs[j].t) })
	var keys []string
	for _, b := range blobs {
		keys = append(keys, b.key)
	}
	return keys
}

func backupIDs(refs []storagev1.BackupRef) []string {
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.ID)
	}
	return ids
}

func brokenProblem(pb *storagev1.PVCBackup, id string) string {
	for _, b := range pb.Status.BrokenBackups {
		if b.ID == id {
			return b.Problem
		}
	}
	return ""
}

// Issue 30, finding 3: a kopia manifest naming a snapshot the repository does not hold takes no
// keepLast slot. The run after it lists the repository once and records it; the manifest is
// reported broken (not deleted) and the good older backup is kept.
func TestKopiaManifestWithoutItsSnapshotTakesNoRetentionSlot(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 2}
	w.create(pb)
	first := pb.CreationTimestamp.Time
	if res := w.kopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1: %+v", res)
	}
	good := pb.Status.LastRun.ID
	bogus := storagekit.RunID(first.Add(90*time.Minute), false) // between run 1 and run 2
	w.handMadeManifest(pb, good, bogus, "k0123456789abcdef0123456789abcdef")
	if res := w.kopiaRun(pb, first, 2, src); !res.Succeeded() {
		t.Fatalf("run 2: %+v", res)
	}
	newest := pb.Status.LastRun.ID
	if got, want := backupIDs(pb.Status.Backups), []string{newest, good}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v (the manifest without a snapshot takes no slot)", got, want)
	}
	if !w.exists(storagekit.ManifestKey(pb, good)) {
		t.Errorf("the good backup %s was pruned", good)
	}
	if p := brokenProblem(pb, bogus); !strings.Contains(p, "is not in the repository") {
		t.Errorf("status.brokenBackups = %+v, want %s: not in the repository", pb.Status.BrokenBackups, bogus)
	}
	if !w.exists(storagekit.ManifestKey(pb, bogus)) {
		t.Errorf("the broken manifest %s was deleted; it must stay for a person to look at", bogus)
	}
}

// Issue 30, finding 3: a kopia manifest dated in the future is never "latest" (it would be
// forever): restoring latest restores the newest good backup, and the manifest is broken.
func TestKopiaManifestFromTheFutureIsNotLatest(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	w.create(pb)
	first := pb.CreationTimestamp.Time
	w.must(os.WriteFile(filepath.Join(src, "README"), []byte("first"), 0o644))
	w.kopiaRun(pb, first, 1, src)
	w.must(os.WriteFile(filepath.Join(src, "README"), []byte("second"), 0o644))
	w.kopiaRun(pb, first, 2, src)
	newest := pb.Status.LastRun.ID
	future := storagekit.RunID(first.AddDate(1, 0, 0), false)
	w.handMadeManifest(pb, newest, future, "k0123456789abcdef0123456789abcdef")

	pr := newRestore(w.ns, "back", "app")
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != newest {
		t.Fatalf("restore of latest chose %q (%+v), want the newest good backup %s", pr.Status.BackupID, pr.Status, newest)
	}
	dst := t.TempDir()
	w.restoreInto(pr, dst)
	if got, _ := os.ReadFile(filepath.Join(dst, "README")); pr.Status.Phase != storagev1.RestoreSucceeded || string(got) != "second" {
		t.Fatalf("restore: %+v, README %q", pr.Status, got)
	}

	w.kopiaRun(pb, first, 3, src)
	if slices.Contains(backupIDs(pb.Status.Backups), future) || !strings.Contains(brokenProblem(pb, future), "in the future") {
		t.Errorf("status.backups %v, brokenBackups %+v: want %s broken, dated in the future", backupIDs(pb.Status.Backups), pb.Status.BrokenBackups, future)
	}
}

// Issue 30, finding 4: one lost index blob (the one the second backup wrote) took that
// backup's snapshot with it. The next run rebuilds the index from the packs (kopiarepo.Repo.Heal)
// and succeeds: every backup is listed restorable again, and the repository is healthy.
func TestKopiaLostIndexBlobIsRebuiltByTheNextRun(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	w.create(pb)
	first := pb.CreationTimestamp.Time
	w.kopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	if c := condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after a good run = %+v", c)
	}
	before := w.repositoryBlobs(pb, "x")
	w.must(os.WriteFile(filepath.Join(src, "db/new"), []byte("new data"), 0o644))
	w.kopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	var lost []string
	for _, k := range w.repositoryBlobs(pb, "x") {
		if !slices.Contains(before, k) {
			lost = append(lost, k)
			w.must(w.s3.RemoveObject(testCtx, bucket, k, minio.RemoveObjectOptions{}))
		}
	}
	if len(lost) == 0 {
		t.Fatal("the second run wrote no index blob")
	}

	res := w.kopiaRun(pb, first, 3, src)
	if !res.Succeeded() || !strings.Contains(res.Repair, "rebuilt the lost index") {
		t.Fatalf("run 3 after a lost index blob: %+v, want it to rebuild the index", res)
	}
	three := pb.Status.LastRun.ID
	if got, want := backupIDs(pb.Status.Backups), []string{three, two, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v: the rebuilt index holds backup %s again", got, want, two)
	}
	if len(pb.Status.BrokenBackups) != 0 {
		t.Errorf("status.brokenBackups = %+v, want none", pb.Status.BrokenBackups)
	}
	if c := condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after the index was rebuilt = %+v", c)
	}
}

// Issue 30, finding 4: one lost metadata blob (the oldest q blob, holding the repository's
// policies) made every manifest lookup fail, so every later run. The next run writes the lost
// policies again and succeeds; every backup stays restorable (their manifests were in other
// blobs), none is deleted, and the repository is healthy.
func TestKopiaLostMetadataBlobIsHealedByTheNextRun(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	w.create(pb)
	first := pb.CreationTimestamp.Time
	w.kopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	w.kopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	q := w.repositoryBlobs(pb, "q")[0]
	w.must(w.s3.RemoveObject(testCtx, bucket, q, minio.RemoveObjectOptions{}))
	blobID := path.Base(q)

	res := w.kopiaRun(pb, first, 3, src)
	run := pb.Status.LastRun
	if !res.Succeeded() || run.Result != storagev1.RunSucceeded || !strings.Contains(res.Repair, blobID) {
		t.Fatalf("run 3 after a lost metadata blob: %+v (%+v), want it healed, naming %s", run, res, blobID)
	}
	three := run.ID
	if got, want := backupIDs(pb.Status.Backups), []string{three, two, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v", got, want)
	}
	for _, id := range []string{one, two} {
		if !w.exists(storagekit.ManifestKey(pb, id)) {
			t.Errorf("backup %s's manifest was deleted", id)
		}
	}
	if c := condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after the heal = %+v", c)
	}
}

// Issue 30: a stale repository record never vouches for a manifest written after it. A manifest
// that appears after the last run listed the repository (here a hand-made one naming no
// snapshot) is not "latest": restoring latest restores the newest checked backup and says which
// newer one it passed over.
func TestKopiaManifestNewerThanTheLastCheckIsNotLatest(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	w.create(pb)
	first := pb.CreationTimestamp.Time
	w.kopiaRun(pb, first, 1, src)
	good := pb.Status.LastRun.ID
	unchecked := storagekit.RunID(first.Add(90*time.Minute), false)
	w.handMadeManifest(pb, good, unchecked, "k0123456789abcdef0123456789abcdef")
	w.clock.Set(first.Add(100 * time.Minute))

	pr := newRestore(w.ns, "back", "app")
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if pr.Status.BackupID != good {
		t.Fatalf("restore of latest chose %q, want %s, the newest backup the last run checked", pr.Status.BackupID, good)
	}
	if c := condition2(pr); !strings.Contains(c.Message, unchecked) || !strings.Contains(c.Message, "not checked") {
		t.Errorf("Complete = %+v, want it to name %s as not checked yet", c, unchecked)
	}
}

// Issue 30, finding 4, what no run can heal: the metadata blobs the second backup wrote (its
// directories and its snapshot's manifest) are lost. The next run heals the repository around
// them and succeeds, but the second backup's snapshot is gone for good: it is listed broken
// (not deleted, never latest, no retention slot), the first backup stays restorable, and
// RepositoryHealthy is False/RepositoryDamaged naming the lost backup and what to do.
func TestKopiaBackupWhoseSnapshotWasLostIsListedBroken(t *testing.T) {
	w := newWorld(t)
	src := volume(t)
	pb := w.kopiaBackup("app", "0 * * * *")
	w.create(pb)
	first := pb.CreationTimestamp.Time
	w.kopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	before := w.repositoryBlobs(pb, "q")
	w.must(os.WriteFile(filepath.Join(src, "db/new"), []byte("new data"), 0o644))
	w.kopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	var lost []string
	for _, k := range w.repositoryBlobs(pb, "q") {
		if !slices.Contains(before, k) {
			lost = append(lost, k)
			w.must(w.s3.RemoveObject(testCtx, bucket, k, minio.RemoveObjectOptions{}))
		}
	}
	t.Logf("lost metadata blobs of the second backup: %v", lost)
	if len(lost) == 0 {
		t.Fatal("the second run wrote no metadata blob")
	}

	res := w.kopiaRun(pb, first, 3, src)
	t.Logf("run 3: %+v", res)
	three := pb.Status.LastRun.ID
	if got, want := backupIDs(pb.Status.Backups), []string{three, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v", got, want)
	}
	if p := brokenProblem(pb, two); !strings.Contains(p, "is not in the repository") {
		t.Errorf("status.brokenBackups = %+v, want %s: its snapshot is not in the repository", pb.Status.BrokenBackups, two)
	}
	if !w.exists(storagekit.ManifestKey(pb, two)) {
		t.Errorf("the manifest of the lost backup %s was deleted; it must stay for a person to decide", two)
	}
	c := condition(pb, storagev1.ConditionRepositoryHealthy)
	if c.Status != metav1.ConditionFalse || c.Reason != string(mover.ReasonRepositoryDamaged) || !strings.Contains(c.Message, two) {
		t.Errorf("RepositoryHealthy = %+v, want False/RepositoryDamaged naming backup %s", c, two)
	}
}
