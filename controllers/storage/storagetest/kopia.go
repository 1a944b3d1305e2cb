package storagetest

import (
	"time"

	"github.com/minio/minio-go/v7"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// KopiaRun runs the i-th hourly kopia backup of dir through the controller and the real mover,
// as TestKopiaBackupsPrunedRestoredThroughTheController does, and returns the mover's Result
// (a failed run is recorded, not fatal).
func (w *World) KopiaRun(pb *storagev1.PVCBackup, first time.Time, i int, dir string) mover.Result {
	w.T.Helper()
	w.Clock.Set(first.Add(time.Duration(i)*time.Hour + time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	res := w.RunMover(job, dir)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.Clock.Set(first.Add(time.Duration(i)*time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if run := pb.Status.LastRun; run == nil || run.ID != job.Labels[storagekit.LabelRun] {
		w.T.Fatalf("run %d not recorded: %+v", i, pb.Status.LastRun)
	}
	return res
}

// HandMadeManifest writes a kopia manifest for backup id that is a copy of backup of's, naming
// snapshot instead: a manifest the repository does not back (a hand edit, a copy).
func (w *World) HandMadeManifest(pb *storagev1.PVCBackup, of, id, snapshot string) {
	w.T.Helper()
	body, err := w.S3.GetObject(Ctx, Bucket, storagekit.ManifestKey(pb, of), minio.GetObjectOptions{})
	w.Must(err)
	m, err := mover.ReadManifest(body)
	body.Close()
	w.Must(err)
	m.ID, m.Kopia.SnapshotID = id, snapshot
	w.PutObject(storagekit.ManifestKey(pb, id), MustJSON(w.T, m))
}

func BackupIDs(refs []storagev1.BackupRef) []string {
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.ID)
	}
	return ids
}

func BrokenProblem(pb *storagev1.PVCBackup, id string) string {
	for _, b := range pb.Status.BrokenBackups {
		if b.ID == id {
			return b.Problem
		}
	}
	return ""
}

// KopiaStory creates the kopia PVCBackup name, hourly, over a fresh Volume, with edits applied
// to its spec: the start of a kopia story. It returns the PVCBackup, the volume's directory and
// the creation time the story's runs count their hours from (KopiaRun).
func (w *World) KopiaStory(name string, edits ...func(*storagev1.PVCBackup)) (pb *storagev1.PVCBackup, src string, first time.Time) {
	w.T.Helper()
	src = Volume(w.T)
	pb = w.KopiaBackup(name, "0 * * * *")
	for _, edit := range edits {
		edit(pb)
	}
	w.Create(pb)
	return pb, src, pb.CreationTimestamp.Time
}
