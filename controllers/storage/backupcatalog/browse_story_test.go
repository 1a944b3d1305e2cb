package backupcatalog

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// browse asks bc for the tree of req, runs the browse Job with the real mover as the kubelet
// would, and returns bc's status.browse once the outcome is recorded; the Job is gone after.
func (w *world) browse(bc *storagev1.BackupCatalog, req storagev1.CatalogBrowse) *storagev1.CatalogBrowseStatus {
	w.T.Helper()
	bc.Spec.Browse = &req
	w.Must(k8s.Update(testCtx, bc))
	w.reconcileCatalog(bc)
	if st := bc.Status.Browse; st == nil || st.Phase != storagev1.BrowseRunning {
		w.T.Fatalf("browse did not start: %+v", st)
	}
	jobs := &batchv1.JobList{}
	w.Must(k8s.List(testCtx, jobs, client.InNamespace(bc.Namespace), client.MatchingLabels{LabelCatalog: bc.Name}))
	if len(jobs.Items) != 1 {
		w.T.Fatalf("%d browse Jobs, want 1", len(jobs.Items))
	}
	job := &jobs.Items[0]
	res := w.RunMover(job, "")
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.reconcileCatalog(bc)
	st := bc.Status.Browse
	w.reconcileCatalog(bc) // the outcome is saved: the Job goes
	w.Must(k8s.List(testCtx, jobs, client.InNamespace(bc.Namespace), client.MatchingLabels{LabelCatalog: bc.Name}))
	for _, j := range jobs.Items {
		if j.DeletionTimestamp.IsZero() {
			w.T.Errorf("browse Job %s is still there after its outcome was saved", j.Name)
		}
	}
	return st
}

// A BackupCatalog lists the top level of a backup of either engine, with each directory's total
// size and file count, without restoring it; an absent directory or backup is a precise failure.
func TestCatalogBrowsesABackupsTopLevelWithSizes(t *testing.T) {
	w := newWorld(t)
	kopiaTeam, archiveTeam := w.namespace("kopia-", nil), w.namespace("archive-", nil)
	vol := storagetest.Volume(t)
	kopiaTeam.backupNow(kopiaTeam.KopiaBackup("db", "@daily"), vol)
	archiveTeam.backupNow(archiveTeam.Backup("files", "@daily"), vol)
	fresh := w.namespace("recovery-", nil)
	bc := fresh.catalog("browse")
	fresh.reconcileCatalog(bc)

	// storagetest.Volume: db/data.bin (3 MiB), db/empty, README (6 bytes), latest -> db/data.bin.
	want := []storagev1.CatalogTreeEntry{
		{Path: "db", Type: "dir", Bytes: 3 << 20, Files: 2},
		{Path: "README", Type: "file", Bytes: 6, Files: 1},
		{Path: "latest", Type: "symlink"},
	}
	for _, src := range []struct {
		ns, name string
		engine   storagev1.BackupEngine
	}{{kopiaTeam.NS, "db", storagev1.EngineKopia}, {archiveTeam.NS, "files", storagev1.EngineArchive}} {
		st := fresh.browse(bc, storagev1.CatalogBrowse{Namespace: src.ns, PVCBackup: src.name, BackupID: "latest", Depth: 1})
		if st.Phase != storagev1.BrowseSucceeded || st.Engine != src.engine || st.BackupID == "" || !slices.Equal(st.Entries, want) || st.MoreEntries != 0 {
			t.Errorf("%s browse: %+v\nwant entries %+v", src.engine, st, want)
		}
	}

	deep := fresh.browse(bc, storagev1.CatalogBrowse{Namespace: kopiaTeam.NS, PVCBackup: "db", BackupID: "latest", Path: "db", Depth: 1})
	if deep.Phase != storagev1.BrowseSucceeded || !slices.Equal(deep.Entries, []storagev1.CatalogTreeEntry{
		{Path: "db/data.bin", Type: "file", Bytes: 3 << 20, Files: 1}, {Path: "db/empty", Type: "file", Files: 1}}) {
		t.Errorf("kopia browse of db: %+v", deep)
	}
	absent := fresh.browse(bc, storagev1.CatalogBrowse{Namespace: kopiaTeam.NS, PVCBackup: "db", BackupID: "latest", Path: "nope", Depth: 1})
	if absent.Phase != storagev1.BrowseFailed || absent.Reason != "PathNotInBackup" || !strings.Contains(absent.Message, `"nope"`) {
		t.Errorf("browse of an absent directory: %+v", absent)
	}

	bc.Spec.Browse = &storagev1.CatalogBrowse{Namespace: archiveTeam.NS, PVCBackup: "files", BackupID: "20200101T000000Z", Depth: 1}
	w.Must(k8s.Update(testCtx, bc))
	fresh.reconcileCatalog(bc)
	if st := bc.Status.Browse; st == nil || st.Phase != storagev1.BrowseFailed || st.Reason != ReasonBrowseBackupNotFound || !strings.Contains(st.Message, "20200101T000000Z") {
		t.Errorf("browse of a backup that does not exist: %+v", st)
	}
}
