package mover

import (
	"context"
	"io"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Verify downloads a backup and checks it against its manifest (sha256, size, counts) without
// writing anything anywhere: what PVCBackup spec.verify runs after each backup.
func Verify(ctx context.Context, store ObjectReader, archiveKey, manifestKey string) (archive.Manifest, archive.Stats, error) {
	return readBackup(ctx, store, archiveKey, manifestKey, nil,
		func(r io.Reader) (archive.Stats, error) { return archive.Check(ctx, r) })
}

// RunVerify is `mover verify`.
func RunVerify(ctx context.Context, getenv func(string) string) Result {
	res := runVerify(ctx, getenv)
	writeTerminationLog(getenv, &res)
	return res
}

func runVerify(ctx context.Context, getenv func(string) string) Result {
	cfg, err := storeFromEnv(getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	store, err := objectstore.New(cfg)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	w, err := watchReads(ctx, getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	defer w.stop()
	watched := watchedStore{store, w.act}
	if getenv(EnvEngine) == EngineKopia {
		opts, err := kopiaOptionsFromEnv(getenv)
		if err != nil {
			return failed(err, ReasonInvalidConfig)
		}
		m, st, err := VerifyKopia(w.ctx, watched, cfg, getenv(EnvManifestKey), w.kopia(opts))
		return kopiaReadResult(m, m.Files, st.Bytes, w.outcome(err))
	}
	key := getenv(EnvArchiveKey)
	m, st, err := Verify(w.ctx, watched, key, getenv(EnvManifestKey))
	return outcome(m, st, key, w.outcome(err))
}
