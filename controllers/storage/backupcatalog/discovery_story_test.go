package backupcatalog

import (
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The disaster-recovery story: two teams back up with PVCBackups in two namespaces (one archive,
// one kopia). A third namespace that has nothing but the credentials (as a new cluster would)
// creates a BackupCatalog, finds both PVCBackups' backups in its status, and restores each with a
// PVCRestore built from nothing but that status: the data is byte-identical.
func TestCatalogFindsEveryPVCBackupAndItsStatusRestoresThem(t *testing.T) {
	w := newWorld(t)
	teamA, teamB := w.namespace("team-a-", nil), w.namespace("team-b-", nil)
	volA, volB := storagetest.Volume(t), storagetest.Volume(t)
	pbA := teamA.backupNow(teamA.Backup("files", "@daily"), volA)
	pbB := teamB.backupNow(teamB.KopiaBackup("db", "@daily"), volB)

	fresh := w.namespace("recovery-", nil)
	bc := fresh.catalog("everything")
	res := fresh.reconcileCatalog(bc)

	if c := meta.FindStatusCondition(bc.Status.Conditions, storagev1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonRefreshed {
		t.Fatalf("Ready: %+v", c)
	}
	if res.RequeueAfter != DefaultRefreshInterval {
		t.Errorf("next refresh in %v, want the default %v", res.RequeueAfter, DefaultRefreshInterval)
	}
	if bc.Status.Backups != 2 || len(bc.Status.Sources) != 2 || bc.Status.ObservedGeneration != bc.Generation {
		t.Fatalf("status: %+v", bc.Status)
	}
	byNS := map[string]storagev1.CatalogSource{}
	for _, s := range bc.Status.Sources {
		byNS[s.Namespace] = s
	}
	a, b := byNS[teamA.NS], byNS[teamB.NS]
	if a.PVCBackup != "files" || a.Engine != storagev1.EngineArchive || a.Prefix != storagekit.BackupPrefix(pbA) || a.RepositoryBytes != nil {
		t.Errorf("team A's source: %+v", a)
	}
	if b.PVCBackup != "db" || b.Engine != storagev1.EngineKopia || b.RepositoryBytes == nil || *b.RepositoryBytes <= 0 {
		t.Errorf("team B's source: %+v", b)
	}
	checkListed(t, a, pbA)
	checkListed(t, b, pbB)

	for _, src := range []storagev1.CatalogSource{a, b} {
		dst := t.TempDir()
		pr := restoreFrom(bc, src, src.Backups[0].ID, "restore-"+src.PVCBackup)
		fresh.restore(pr, dst)
		if pr.Status.Phase != storagev1.RestoreSucceeded {
			t.Fatalf("restore of %s/%s: %+v", src.Namespace, src.PVCBackup, pr.Status)
		}
		vol := map[string]string{teamA.NS: volA, teamB.NS: volB}[src.Namespace]
		if got, want := treeDigest(t, dst), treeDigest(t, vol); !maps.Equal(got, want) {
			t.Errorf("restore of %s/%s differs from the volume backed up:\n got %v\nwant %v", src.Namespace, src.PVCBackup, got, want)
		}
	}
}

// checkListed checks that the catalog's source src lists the one backup of pb as pb's own
// status has it, with the sizes and counts of its manifest.
func checkListed(t *testing.T, src storagev1.CatalogSource, pb *storagev1.PVCBackup) {
	t.Helper()
	run := pb.Status.LastRun
	if len(src.Backups) != 1 || src.MoreBackups != 0 || len(src.BrokenBackups) != 0 {
		t.Fatalf("%s/%s: backups %+v, broken %+v", src.Namespace, src.PVCBackup, src.Backups, src.BrokenBackups)
	}
	got := src.Backups[0]
	if got.ID != run.ID || got.Files != run.Files || got.ContentBytes <= 3<<20 || got.CompletionTime == nil {
		t.Errorf("%s/%s: listed %+v, the PVCBackup's run %+v", src.Namespace, src.PVCBackup, got, run)
	}
	switch got.Engine {
	case storagev1.EngineArchive:
		if got.StoredBytes == nil || *got.StoredBytes != run.Bytes || got.Confirmed != nil {
			t.Errorf("archive backup listed %+v, run wrote %d bytes", got, run.Bytes)
		}
	case storagev1.EngineKopia:
		if got.SnapshotID == "" || got.SnapshotID != run.SnapshotID || got.Confirmed == nil || !*got.Confirmed || got.StoredBytes != nil {
			t.Errorf("kopia backup listed %+v, run %+v", got, run)
		}
	default:
		t.Errorf("engine %q", got.Engine)
	}
}

// restoreFrom is the PVCRestore a person writes from a catalog's status: spec.source.s3 is the
// catalog's bucket and location with the source's namespace and PVCBackup; backupID one of the
// source's backups.
func restoreFrom(bc *storagev1.BackupCatalog, src storagev1.CatalogSource, id, name string) *storagev1.PVCRestore {
	return &storagev1.PVCRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: bc.Namespace, Name: name},
		Spec: storagev1.PVCRestoreSpec{
			Source: storagev1.RestoreSource{BackupID: id, S3: &storagev1.RestoreS3Source{
				Bucket: bc.Spec.Bucket, Location: bc.Spec.Location, Namespace: src.Namespace, PVCBackup: src.PVCBackup}},
			Target: &storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: name, Size: resource.MustParse("1Gi")}},
		},
	}
}

// A manifest that does not decode, and one whose archive is gone, are listed as broken with the
// reason and never as restorable; the catalog sees them at its next refresh, not before.
func TestCatalogNeverListsADamagedBackupAsRestorable(t *testing.T) {
	w := newWorld(t)
	vol := storagetest.Volume(t)
	pb := w.backupNow(w.Backup("files", "@daily"), vol)
	bc := w.catalog("files", func(bc *storagev1.BackupCatalog) {
		bc.Spec.RefreshInterval = &metav1.Duration{Duration: 5 * time.Minute}
	})
	w.reconcileCatalog(bc)
	if bc.Status.Backups != 1 {
		t.Fatalf("before the damage: %+v", bc.Status)
	}

	garbled, gone := "20200101T000000Z", "20200102T000000Z"
	w.PutObject(storagekit.ManifestKey(pb, garbled), []byte(`{"formatVersion": 1, "id": `))
	w.PutObject(storagekit.ManifestKey(pb, gone), mustManifestCopy(t, w, pb, gone))

	if res := w.reconcileCatalog(bc); bc.Status.Backups != 1 || len(bc.Status.Sources[0].BrokenBackups) != 0 || res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Minute {
		t.Fatalf("the catalog read the bucket again before its refresh interval: %+v, %+v", bc.Status, res)
	}
	w.Clock.Set(w.Clock.Now().Add(5 * time.Minute))
	w.reconcileCatalog(bc)
	src := bc.Status.Sources[0]
	if ids := listedIDs(src); !slices.Equal(ids, []string{pb.Status.LastRun.ID}) {
		t.Errorf("restorable: %v, want only the good backup %s", ids, pb.Status.LastRun.ID)
	}
	broken := map[string]string{}
	for _, b := range src.BrokenBackups {
		broken[b.ID] = b.Problem
	}
	if len(broken) != 2 || broken[garbled] == "" || broken[gone] == "" {
		t.Errorf("broken: %+v, want %s and %s with their problems", src.BrokenBackups, garbled, gone)
	}
	if bc.Status.Backups != 1 {
		t.Errorf("status.backups %d counts a broken backup", bc.Status.Backups)
	}
}

// mustManifestCopy is the manifest of pb's last backup renamed to id, naming an archive that does
// not exist.
func mustManifestCopy(t *testing.T, w *world, pb *storagev1.PVCBackup, id string) []byte {
	t.Helper()
	store := storagetest.MustStore(t, w.World, pb)
	m, err := storagekit.GetManifest(testCtx, store, storagekit.ManifestKey(pb, pb.Status.LastRun.ID))
	w.Must(err)
	m.ID, m.Archive.Key = id, storagekit.ArchiveKey(pb, id)
	return storagetest.MustJSON(t, m)
}

func listedIDs(src storagev1.CatalogSource) []string {
	var ids []string
	for _, b := range src.Backups {
		ids = append(ids, b.ID)
	}
	return ids
}
