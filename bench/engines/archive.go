package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The archive engine's steps (-engine archive): issue 13's yardsticks are `tar | PutObject` of
// the same tree (GNU tar, uncompressed, streamed by minio-go with the mover's part size) and
// the mover of an earlier commit (-base-mover), measured interleaved with -mover.
const (
	archiveNew  = "archive"
	archiveBase = "archive-base"
	tarPut      = "tar-put"
)

func (b *bench) archivePrefix(engine string) string { return engine + "-" + b.d.name + "/" }

// archiveBackup runs a mover's backup with the archive engine and returns its manifest key.
func (b *bench) archiveBackup(ctx context.Context, engine, bin string) (string, error) {
	id := "20261205T010000Z"
	prefix := b.archivePrefix(engine)
	err := b.step(ctx, engine+"/backup", prefix, func() measurement {
		env := append(b.moverEnvAt("kopia-"+b.d.name+"/repo"), backupEnv(id, prefix)...)
		env = append(env, mover.EnvEngine+"="+mover.EngineArchive, mover.EnvSourceDir+"="+b.source())
		return runChild(ctx, b.work, env, bin, "backup")
	})
	return prefix + "backups/" + id + ".manifest.json", err
}

func (b *bench) archiveRestore(ctx context.Context, engine, bin, manifestKey string) error {
	target := b.fresh(engine + "-restore")
	if b.f.restoreDir != "" {
		var err error
		if target, err = os.MkdirTemp(b.f.restoreDir, engine+"-restore-"); err != nil {
			return err
		}
	}
	err := b.step(ctx, engine+"/restore", "", func() measurement {
		env := append(b.moverEnvAt("kopia-"+b.d.name+"/repo"), mover.EnvTargetDir+"="+target, mover.EnvManifestKey+"="+manifestKey,
			mover.EnvArchiveKey+"="+strings.TrimSuffix(manifestKey, ".manifest.json")+".tar.zst", mover.EnvEngine+"="+mover.EngineArchive)
		return runChild(ctx, b.work, env, bin, "restore")
	})
	if err == nil {
		b.identical(engine, 0, target)
	}
	return err
}

// tarPutBackup is the yardstick: `tar -cf - .` of the source streamed into one object (tarPut).
func (b *bench) tarPutBackup(ctx context.Context) error {
	return b.step(ctx, tarPut+"/backup", b.archivePrefix(tarPut), func() measurement {
		return b.tarPut(ctx, b.archivePrefix(tarPut)+"tree.tar")
	})
}

// runArchive measures the archive engine on the dataset: the base mover's backup (when given)
// and the mover's (in the order -base-last says), tar | PutObject, then both restores in the
// same order, each checked against the source.
func (b *bench) runArchive(ctx context.Context) (datasetResults, error) {
	manifests := map[string]string{}
	movers := []struct{ engine, bin string }{{archiveNew, b.f.mover}}
	if b.f.baseMover != "" {
		base := struct{ engine, bin string }{archiveBase, b.f.baseMover}
		if b.f.baseLast {
			movers = append(movers, base)
		} else {
			movers = append(movers[:0:0], base, movers[0])
		}
	}
	for _, m := range movers {
		key, err := b.archiveBackup(ctx, m.engine, m.bin)
		if err != nil {
			return b.res, err
		}
		manifests[m.engine] = key
	}
	if err := b.tarPutBackup(ctx); err != nil {
		return b.res, err
	}
	if b.f.restore {
		for _, m := range movers {
			if err := b.archiveRestore(ctx, m.engine, m.bin, manifests[m.engine]); err != nil {
				return b.res, err
			}
		}
	}
	b.res.Targets = archiveTargets(b.res)
	return b.res, nil
}

// archiveTargets evaluates issue 13's mover targets that apply to the dataset.
func archiveTargets(r datasetResults) []target {
	var t []target
	nb, okNew := r.Steps[archiveNew+"/backup"]
	if tp, ok := r.Steps[tarPut+"/backup"]; ok && okNew && r.Name == "random-1MiB" {
		t = append(t, target{"archive backup ≥ 0.9 × tar | PutObject speed",
			fmt.Sprintf("%.2f × (%.1f s vs %.1f s)", tp.Seconds/nb.Seconds, nb.Seconds, tp.Seconds),
			tp.Seconds/nb.Seconds >= 0.9})
	}
	if r.Name == "small-4KiB" {
		for _, step := range []string{"backup", "restore"} {
			n, okN := r.Steps[archiveNew+"/"+step]
			o, okO := r.Steps[archiveBase+"/"+step]
			if okN && okO {
				t = append(t, target{"archive " + step + " ≥ 1.3 × the base mover's speed",
					fmt.Sprintf("%.2f × (%.1f s vs %.1f s)", o.Seconds/n.Seconds, n.Seconds, o.Seconds),
					o.Seconds/n.Seconds >= 1.3})
			}
		}
	}
	for _, e := range []string{archiveNew, archiveBase} {
		if v, ok := r.Identical[e]; ok {
			t = append(t, target{e + " restored tree identical", v, v == "identical"})
		}
	}
	return t
}
