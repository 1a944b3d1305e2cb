package kopia

import (
	"context"
	"errors"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
)

// List lists job.Path of the kopia backup whose manifest is job.ManifestKey, job.Depth levels
// deep, reading only directory objects (kopiarepo.Repo.Tree): the sizes come from the summaries
// kopia keeps of each directory, so no file content is read. The snapshot is proven as a restore
// proves it (openSnapshot) first.
func (e Engine) List(ctx context.Context, s3 engine.S3, job engine.ListJob) (mover.Result, error) {
	m, err := readKopiaManifest(ctx, s3.Store, job.ManifestKey, nil)
	if err != nil {
		return mover.Result{}, err
	}
	res := mover.Result{ID: m.ID, SnapshotID: m.Kopia.SnapshotID, Files: m.Files, Bytes: m.ContentBytes}
	r, err := openSnapshot(ctx, s3.Config, e.Options.watched(s3.Watch), m)
	if err != nil {
		return res, err
	}
	defer r.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	tree, err := r.Tree(ctx, m.Kopia.SnapshotID, job.Path, job.Depth)
	var missing *kopiarepo.PathsNotFoundError
	switch {
	case errors.As(err, &missing), errors.Is(err, kopiarepo.ErrNotADirectory):
		return res, mover.Fail(mover.ReasonPathNotInBackup, "backup %s holds no directory %q", m.ID, job.Path)
	case err != nil:
		return res, readError(ctx, m, "list", err)
	}
	entries := make([]archive.TreeEntry, len(tree))
	for i, t := range tree {
		entries[i] = archive.TreeEntry{Path: t.Path, Type: t.Type, Bytes: t.Bytes, Files: t.Files}
	}
	res.Entries, res.EntriesMore = mover.BoundEntries(entries, mover.ListBudget)
	return res, nil
}
