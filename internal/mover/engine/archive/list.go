package archive

import (
	"context"
	"errors"

	tarzstd "github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// List lists the top level of the archive backup whose manifest is job.ManifestKey from the
// tree its manifest records (tarzstd.Manifest.Tree, written by the backup): the archive itself is
// not read. Deeper levels, and backups made before manifests recorded their tree, are
// TreeNotRecorded: the only way to see them is to read the whole archive, which is a restore
// (of some paths: PVCRestore spec.paths).
func (Engine) List(ctx context.Context, s3 engine.S3, job engine.ListJob) (mover.Result, error) {
	body, err := s3.Store.Get(ctx, job.ManifestKey)
	if err != nil {
		if objectstore.IsNotFound(err) {
			return mover.Result{}, mover.Fail(mover.ReasonBackupNotFound, "manifest %s does not exist: the backup is incomplete or was pruned", job.ManifestKey)
		}
		return mover.Result{}, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", job.ManifestKey, err)
	}
	m, err := mover.ReadManifest(body)
	body.Close()
	switch {
	case errors.Is(err, mover.ErrBadManifest):
		return mover.Result{}, mover.Fail(mover.ReasonVerificationFailed, "manifest %s: %w", job.ManifestKey, err)
	case err != nil:
		return mover.Result{}, mover.Fail(mover.ReasonStorageFailed, "read manifest %s: %w", job.ManifestKey, err)
	}
	res := mover.Result{ID: m.ID, ArchiveKey: m.Archive.Key, Files: m.Files, Bytes: m.ContentBytes}
	switch {
	case !m.TreeRecorded:
		return res, mover.Fail(mover.ReasonTreeNotRecorded, "archive backup %s was made before archive manifests recorded the volume's top level "+
			"(operator %s): listing it would read the whole archive; restore it, or some paths of it (PVCRestore spec.paths), to see its files",
			m.ID, orUnknown(m.OperatorVersion))
	case job.Path != "" || job.Depth > 1:
		return res, mover.Fail(mover.ReasonTreeNotRecorded, "archive backup %s records only the top level of the volume: list the root with depth 1, "+
			"or restore the directory (PVCRestore spec.paths) to see what is below it", m.ID)
	}
	res.Entries, res.EntriesMore = mover.BoundEntries(m.Tree, mover.ListBudget)
	if m.TreeMore != nil { // left out of the manifest already: counted with what the Result leaves out
		addMore(&res, *m.TreeMore)
	}
	return res, nil
}

// addMore adds more to what res left out.
func addMore(res *mover.Result, more tarzstd.TreeMore) {
	if res.EntriesMore == nil {
		res.EntriesMore = &tarzstd.TreeMore{}
	}
	res.EntriesMore.Entries += more.Entries
	res.EntriesMore.Bytes += more.Bytes
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}
