package backupcatalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// found is what one refresh read from the bucket.
type found struct {
	sources []storagev1.CatalogSource
	// more counts the <namespace>/<name>/ prefixes past MaxCatalogSources listed sources, not read.
	more int32
	// backups counts the restorable backups of the sources read; kopiaBackups those of the kopia
	// engine.
	backups, kopiaBackups int
}

// readSources reads every PVCBackup prefix <prefix><namespace>/<name>/ under prefix: the one
// level of namespaces, the one of names under each, and the catalog of each (storagekit.ReadCatalog:
// its manifests, and the repository record of a kopia repository). A prefix whose catalog holds
// no manifest and no repository record is not a PVCBackup's and is left out. Each S3 call has
// its own timeout: a location with many PVCBackups takes many calls.
func readSources(ctx context.Context, store storagekit.ObjectStore, prefix string, now time.Time) (*found, error) {
	f := &found{}
	namespaces, err := listDirs(ctx, store, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	for _, nsDir := range namespaces {
		names, err := listDirs(ctx, store, nsDir)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", nsDir, err)
		}
		for _, dir := range names {
			if len(f.sources) == storagev1.MaxCatalogSources {
				f.more++
				continue
			}
			src, ok, err := readSource(ctx, store, prefix, dir, now)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			f.sources = append(f.sources, src.status)
			f.backups += src.backups
			f.kopiaBackups += src.kopiaBackups
		}
	}
	return f, nil
}

// listDirs lists the "directories" directly under prefix, under its own timeout.
func listDirs(ctx context.Context, store storagekit.ObjectStore, prefix string) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	return store.ListDirs(cctx, prefix)
}

// readSourceResult is one PVCBackup prefix read: its status entry and its backup counts (which the
// bounded status lists only in part).
type readSourceResult struct {
	status                storagev1.CatalogSource
	backups, kopiaBackups int
}

// readSource reads the catalog of the PVCBackup prefix dir (<prefix><namespace>/<name>/) and,
// when it has a kopia repository, the repository's size. ok is false when dir is not a
// PVCBackup's prefix.
func readSource(ctx context.Context, store storagekit.ObjectStore, prefix, dir string, now time.Time) (readSourceResult, bool, error) {
	ns, name, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(dir, prefix), "/"), "/")
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	cat, err := storagekit.ReadCatalog(cctx, store, dir, now)
	if err != nil {
		return readSourceResult{}, false, fmt.Errorf("read the backups of %s/%s: %w", ns, name, err)
	}
	if len(cat.Valid) == 0 && len(cat.Broken) == 0 && cat.Record == nil {
		return readSourceResult{}, false, nil
	}
	res := readSourceResult{status: sourceStatus(ns, name, dir, cat), backups: len(cat.Valid)}
	for _, b := range cat.Valid {
		if storagekit.EngineOf(b.Manifest) == storagev1.EngineKopia {
			res.kopiaBackups++
		}
	}
	if cat.Record != nil || res.kopiaBackups > 0 {
		size, err := repositoryBytes(ctx, store, dir)
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			// A repository too large to list within repositorySizeTimeout: its size stays
			// unknown (unset), the backups are listed all the same.
		case err != nil:
			return readSourceResult{}, false, fmt.Errorf("size the kopia repository of %s/%s: %w", ns, name, err)
		default:
			res.status.RepositoryBytes = &size
		}
	}
	return res, true, nil
}

// repositorySizeTimeout bounds the listing of one kopia repository's objects (a listing page holds
// 1000 objects: a repository of a million blobs takes a thousand requests).
var repositorySizeTimeout = 2 * storagekit.S3Timeout // a var: a story shortens it

// repositoryBytes sums the sizes of the kopia repository's objects under the PVCBackup prefix dir.
func repositoryBytes(ctx context.Context, store storagekit.ObjectStore, dir string) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, repositorySizeTimeout)
	defer cancel()
	objects, err := store.List(cctx, storagekit.KopiaPrefix(dir)+"/")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, o := range objects {
		n += o.Size
	}
	return n, nil
}

// maxProblem bounds each problem a source lists: with MaxCatalogSources sources of
// MaxCatalogBackups backups and MaxCatalogBroken broken ones the status stays under 1 MiB
// (TestSourceStatusIsBounded), below the API server's object size limit.
const maxProblem = 256

// sourceStatus is the status entry of one PVCBackup prefix: its restorable backups newest first
// and its broken ones, each list bounded (the rest counted).
func sourceStatus(ns, name, dir string, cat storagekit.Catalog) storagev1.CatalogSource {
	s := storagev1.CatalogSource{Namespace: ns, PVCBackup: name, Prefix: dir}
	if len(cat.Valid) > 0 {
		s.Engine = storagekit.EngineOf(cat.Valid[0].Manifest)
	}
	for i, b := range cat.Valid {
		if i == storagev1.MaxCatalogBackups {
			s.MoreBackups = int32(len(cat.Valid) - i)
			break
		}
		s.Backups = append(s.Backups, backupStatus(b, cat))
	}
	for i, b := range cat.Broken {
		if i == storagev1.MaxCatalogBroken {
			s.MoreBrokenBackups = int32(len(cat.Broken) - i)
			break
		}
		s.BrokenBackups = append(s.BrokenBackups, storagev1.BrokenBackup{ID: storagekit.Truncate(b.ID, 64), Problem: storagekit.Truncate(b.Problem, maxProblem)})
	}
	if cat.Record != nil {
		s.RepositoryDamage = storagekit.Truncate(cat.Record.Damage, maxProblem)
	}
	return s
}

// backupStatus is one restorable backup as its manifest describes it.
func backupStatus(b storagekit.BackupEntry, cat storagekit.Catalog) storagev1.CatalogBackup {
	m := b.Manifest
	out := storagev1.CatalogBackup{ID: b.ID, Time: metav1.NewTime(b.Time), Engine: storagekit.EngineOf(m),
		ContentBytes: m.ContentBytes, Files: m.Files, Dirs: m.Dirs, Symlinks: m.Symlinks, PVCs: m.Source.PVCs}
	if !m.CompletionTime.IsZero() {
		out.CompletionTime = &metav1.Time{Time: m.CompletionTime}
	}
	if out.Engine == storagev1.EngineKopia {
		if m.Kopia != nil {
			out.SnapshotID = m.Kopia.SnapshotID
		}
		confirmed := cat.Record != nil // ReadCatalog lists a kopia backup with a record only when the record confirms it
		out.Confirmed = &confirmed
	} else {
		stored := m.Archive.Bytes
		out.StoredBytes = &stored
	}
	return out
}
