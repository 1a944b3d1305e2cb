package pvcbackup

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
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// spec.kopia.keyDerivation PBKDF2 reaches the mover of the first backup, which creates the
// repository with it; status.repository says what the repository has (the real mover, MinIO).
func TestKopiaKeyDerivationThroughTheController(t *testing.T) {
	w := newWorld(t)
	src := storagetest.Volume(t)
	pb := w.KopiaBackup("app", "0 * * * *")
	pb.Spec.Kopia = &storagev1.KopiaOptions{KeyDerivation: storagev1.KeyDerivationPBKDF2}
	w.Create(pb)
	w.Clock.Set(pb.CreationTimestamp.Add(time.Hour + time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	if got := envOf(job)[mover.EnvKopiaKeyDerivation]; got != kopiarepo.KeyDerivationPBKDF2 {
		t.Fatalf("backup Job env %s = %q, want %q", mover.EnvKopiaKeyDerivation, got, kopiarepo.KeyDerivationPBKDF2)
	}
	res := w.RunMover(job, src)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.Clock.Set(pb.CreationTimestamp.Add(time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if run := pb.Status.LastRun; run == nil || run.Result != storagev1.RunSucceeded {
		t.Fatalf("run: %+v", run)
	}
	if r := pb.Status.Repository; r == nil || r.KeyDerivation != "PBKDF2" {
		t.Errorf("status.repository = %+v, want keyDerivation PBKDF2", r)
	}
}

// Issue 30, finding 3: a kopia manifest naming a snapshot the repository does not hold takes no
// keepLast slot. The run after it lists the repository once and records it; the manifest is
// reported broken (not deleted) and the good older backup is kept.
func TestKopiaManifestWithoutItsSnapshotTakesNoRetentionSlot(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app", func(pb *storagev1.PVCBackup) { pb.Spec.Retention = &storagev1.Retention{KeepLast: 2} })
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1: %+v", res)
	}
	good := pb.Status.LastRun.ID
	bogus := storagekit.RunID(first.Add(90*time.Minute), false) // between run 1 and run 2
	w.HandMadeManifest(pb, good, bogus, "k0123456789abcdef0123456789abcdef")
	if res := w.KopiaRun(pb, first, 2, src); !res.Succeeded() {
		t.Fatalf("run 2: %+v", res)
	}
	newest := pb.Status.LastRun.ID
	if got, want := storagetest.BackupIDs(pb.Status.Backups), []string{newest, good}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v (the manifest without a snapshot takes no slot)", got, want)
	}
	if !w.Exists(storagekit.ManifestKey(pb, good)) {
		t.Errorf("the good backup %s was pruned", good)
	}
	if p := storagetest.BrokenProblem(pb, bogus); !strings.Contains(p, "is not in the repository") {
		t.Errorf("status.brokenBackups = %+v, want %s: not in the repository", pb.Status.BrokenBackups, bogus)
	}
	if !w.Exists(storagekit.ManifestKey(pb, bogus)) {
		t.Errorf("the broken manifest %s was deleted; it must stay for a person to look at", bogus)
	}
}

// Issue 30, finding 4: one lost index blob (the one the second backup wrote) took that
// backup's snapshot with it. The next run rebuilds the index from the packs (kopiarepo.Repo.Heal)
// and succeeds: every backup is listed restorable again, and the repository is healthy.
func TestKopiaLostIndexBlobIsRebuiltByTheNextRun(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.KopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	if c := storagetest.Condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after a good run = %+v", c)
	}
	before := w.repositoryBlobs(pb, "x")
	w.Must(os.WriteFile(filepath.Join(src, "db/new"), []byte("new data"), 0o644))
	w.KopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	var lost []string
	for _, k := range w.repositoryBlobs(pb, "x") {
		if !slices.Contains(before, k) {
			lost = append(lost, k)
			w.Must(w.S3.RemoveObject(testCtx, storagetest.Bucket, k, minio.RemoveObjectOptions{}))
		}
	}
	if len(lost) == 0 {
		t.Fatal("the second run wrote no index blob")
	}

	res := w.KopiaRun(pb, first, 3, src)
	if !res.Succeeded() || !strings.Contains(res.Repair, "rebuilt the lost index") {
		t.Fatalf("run 3 after a lost index blob: %+v, want it to rebuild the index", res)
	}
	three := pb.Status.LastRun.ID
	if got, want := storagetest.BackupIDs(pb.Status.Backups), []string{three, two, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v: the rebuilt index holds backup %s again", got, want, two)
	}
	if len(pb.Status.BrokenBackups) != 0 {
		t.Errorf("status.brokenBackups = %+v, want none", pb.Status.BrokenBackups)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after the index was rebuilt = %+v", c)
	}
}

// Issue 30, finding 4: one lost metadata blob (the oldest q blob, holding the repository's
// policies) made every manifest lookup fail, so every later run. The next run writes the lost
// policies again and succeeds; every backup stays restorable (their manifests were in other
// blobs), none is deleted, and the repository is healthy.
func TestKopiaLostMetadataBlobIsHealedByTheNextRun(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.KopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	w.KopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	q := w.repositoryBlobs(pb, "q")[0]
	w.Must(w.S3.RemoveObject(testCtx, storagetest.Bucket, q, minio.RemoveObjectOptions{}))
	blobID := path.Base(q)

	res := w.KopiaRun(pb, first, 3, src)
	run := pb.Status.LastRun
	if !res.Succeeded() || run.Result != storagev1.RunSucceeded || !strings.Contains(res.Repair, blobID) {
		t.Fatalf("run 3 after a lost metadata blob: %+v (%+v), want it healed, naming %s", run, res, blobID)
	}
	three := run.ID
	if got, want := storagetest.BackupIDs(pb.Status.Backups), []string{three, two, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v", got, want)
	}
	for _, id := range []string{one, two} {
		if !w.Exists(storagekit.ManifestKey(pb, id)) {
			t.Errorf("backup %s's manifest was deleted", id)
		}
	}
	if c := storagetest.Condition(pb, storagev1.ConditionRepositoryHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("RepositoryHealthy after the heal = %+v", c)
	}
}

// Issue 30, finding 4, what no run can heal: the metadata blobs the second backup wrote (its
// directories and its snapshot's manifest) are lost. The next run heals the repository around
// them and succeeds, but the second backup's snapshot is gone for good: it is listed broken
// (not deleted, never latest, no retention slot), the first backup stays restorable, and
// RepositoryHealthy is False/RepositoryDamaged naming the lost backup and what to do.
func TestKopiaBackupWhoseSnapshotWasLostIsListedBroken(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	w.KopiaRun(pb, first, 1, src)
	one := pb.Status.LastRun.ID
	before := w.repositoryBlobs(pb, "q")
	w.Must(os.WriteFile(filepath.Join(src, "db/new"), []byte("new data"), 0o644))
	w.KopiaRun(pb, first, 2, src)
	two := pb.Status.LastRun.ID
	var lost []string
	for _, k := range w.repositoryBlobs(pb, "q") {
		if !slices.Contains(before, k) {
			lost = append(lost, k)
			w.Must(w.S3.RemoveObject(testCtx, storagetest.Bucket, k, minio.RemoveObjectOptions{}))
		}
	}
	t.Logf("lost metadata blobs of the second backup: %v", lost)
	if len(lost) == 0 {
		t.Fatal("the second run wrote no metadata blob")
	}

	res := w.KopiaRun(pb, first, 3, src)
	t.Logf("run 3: %+v", res)
	three := pb.Status.LastRun.ID
	if got, want := storagetest.BackupIDs(pb.Status.Backups), []string{three, one}; !slices.Equal(got, want) {
		t.Errorf("status.backups = %v, want %v", got, want)
	}
	if p := storagetest.BrokenProblem(pb, two); !strings.Contains(p, "is not in the repository") {
		t.Errorf("status.brokenBackups = %+v, want %s: its snapshot is not in the repository", pb.Status.BrokenBackups, two)
	}
	if !w.Exists(storagekit.ManifestKey(pb, two)) {
		t.Errorf("the manifest of the lost backup %s was deleted; it must stay for a person to decide", two)
	}
	c := storagetest.Condition(pb, storagev1.ConditionRepositoryHealthy)
	if c.Status != metav1.ConditionFalse || c.Reason != string(mover.ReasonRepositoryDamaged) || !strings.Contains(c.Message, two) {
		t.Errorf("RepositoryHealthy = %+v, want False/RepositoryDamaged naming backup %s", c, two)
	}
}

// repositoryBlobs lists the kopia repository's blobs of kind (q, x, p) of pb, oldest first.
func (w *world) repositoryBlobs(pb *storagev1.PVCBackup, kind string) []string {
	w.T.Helper()
	type blob struct {
		key string
		t   time.Time
	}
	var blobs []blob
	for o := range w.S3.ListObjects(testCtx, storagetest.Bucket, minio.ListObjectsOptions{Prefix: storagekit.KopiaPrefix(storagekit.BackupPrefix(pb)) + "/" + kind, Recursive: true}) {
		w.Must(o.Err)
		blobs = append(blobs, blob{o.Key, o.LastModified})
	}
	sort.SliceStable(blobs, func(i, j int) bool { return blobs[i].t.Before(blobs[j].t) })
	var keys []string
	for _, b := range blobs {
		keys = append(keys, b.key)
	}
	return keys
}
