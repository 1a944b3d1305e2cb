package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// bench runs the steps of one dataset.
type bench struct {
	f    flags
	s    *server
	work string
	d    dataset
	res  datasetResults
	dirs int // counter for fresh directories
}

func (b *bench) source() string { return filepath.Join(b.work, b.d.name, "source") }

// fresh is a new empty directory under the dataset's directory.
func (b *bench) fresh(kind string) string {
	b.dirs++
	p := filepath.Join(b.work, b.d.name, fmt.Sprintf("%s-%d", kind, b.dirs))
	if err := os.MkdirAll(p, 0o755); err != nil {
		panic(err)
	}
	return p
}

func (b *bench) kopiaPrefix() string  { return "kopia-" + b.d.name + "/" }
func (b *bench) resticPrefix() string { return "restic-" + b.d.name + "/" }

// moverEnv is the environment of a mover Job: S3, the kopia repository, a new (emptyDir) cache.
func (b *bench) moverEnv() []string {
	e := []string{
		mover.EnvEndpoint + "=" + b.s.endpoint, mover.EnvBucket + "=" + bucket, mover.EnvInsecure + "=true",
		mover.EnvAccessKey + "=" + b.s.accessKey, mover.EnvSecretKey + "=" + b.s.secretKey,
		mover.EnvEngine + "=" + mover.EngineKopia, mover.EnvKopiaPrefix + "=" + b.kopiaPrefix() + "repo",
		mover.EnvKopiaPassword + "=" + kopiaPassword, mover.EnvKopiaCacheDir + "=" + b.fresh("kopia-cache"),
		mover.EnvKopiaCacheLimit + "=" + fmt.Sprint(512<<20), // the controller's kopiaCacheLimit
		mover.EnvSourceNamespace + "=bench", mover.EnvSourcePVC + "=" + b.d.name,
		mover.EnvTerminationLog + "=" + filepath.Join(b.work, b.d.name, "termination-log"),
	}
	if b.f.moverEnv != "" {
		e = append(e, strings.Split(b.f.moverEnv, ",")...)
	}
	return e
}

func backupEnv(id string, prefix string) []string {
	return []string{mover.EnvBackupID + "=" + id, mover.EnvScheduledTime + "=" + time.Now().UTC().Format(time.RFC3339),
		mover.EnvArchiveKey + "=" + prefix + "backups/" + id + ".tar.zst",
		mover.EnvManifestKey + "=" + prefix + "backups/" + id + ".manifest.json",
		mover.EnvProgressKey + "=" + prefix + "backups/" + id + ".progress.json"}
}

// resticEnv is restic's environment, with a new cache directory (as the mover's).
func (b *bench) resticEnv() []string {
	return []string{"RESTIC_REPOSITORY=s3:http://" + b.s.endpoint + "/" + bucket + "/" + strings.TrimSuffix(b.resticPrefix(), "/"),
		"RESTIC_PASSWORD=" + resticPassword, "AWS_ACCESS_KEY_ID=" + b.s.accessKey, "AWS_SECRET_ACCESS_KEY=" + b.s.secretKey,
		"RESTIC_CACHE_DIR=" + b.fresh("restic-cache")}
}

// step runs one measured step and records it; uploads are counted under prefix when not empty.
func (b *bench) step(ctx context.Context, name, prefix string, run func() measurement) error {
	var before int64
	if prefix != "" {
		var err error
		if before, err = b.s.prefixBytes(ctx, bucket, prefix); err != nil {
			return err
		}
	}
	log.Printf("%s: %s", b.d.name, name)
	syscall.Sync() // the previous step's writes (a restored tree, its removal) are not this step's
	m := run()
	if prefix != "" && m.Error == "" {
		after, err := b.s.prefixBytes(ctx, bucket, prefix)
		if err != nil {
			return err
		}
		m.Uploaded = after - before
	}
	b.res.Steps[name] = m
	log.Printf("%s: %s %.1fs (CPU %.1fs), peak RSS %.0f MiB, uploaded %.1f MiB %s", b.d.name, name, m.Seconds, m.CPUSeconds,
		float64(m.PeakRSS)/(1<<20), float64(m.Uploaded)/(1<<20), m.Error)
	if m.Error != "" {
		return fmt.Errorf("%s: %s", name, m.Error)
	}
	return nil
}

func (b *bench) kopiaBackup(ctx context.Context, name, id string) error {
	return b.step(ctx, name, b.kopiaPrefix(), func() measurement {
		env := append(b.moverEnv(), backupEnv(id, b.kopiaPrefix())...)
		env = append(env, mover.EnvSourceDir+"="+b.source())
		return runChild(ctx, b.work, env, b.f.mover, "backup")
	})
}

func (b *bench) resticBackup(ctx context.Context, name string) error {
	return b.step(ctx, name, b.resticPrefix(), func() measurement {
		return runChild(ctx, b.source(), b.resticEnv(), b.f.restic, "backup", "--quiet", "--host", "bench", ".")
	})
}

func (b *bench) run(ctx context.Context) (datasetResults, error) {
	d := b.d
	b.res = datasetResults{Name: d.name, Files: d.files, Bytes: d.bytes(), Steps: map[string]measurement{}, Identical: map[string]string{}}
	start := time.Now()
	log.Printf("%s: generating %d files of %d bytes", d.name, d.files, d.fileSize)
	if err := d.generate(b.source()); err != nil {
		return b.res, err
	}
	b.res.Generate = time.Since(start).Seconds()
	if err := settle(b.source()); err != nil {
		return b.res, err
	}
	if b.f.engine == mover.EngineArchive {
		return b.runArchive(ctx)
	}
	if b.f.withRestic {
		if m := runChild(ctx, b.work, b.resticEnv(), b.f.restic, "init"); m.Error != "" {
			return b.res, fmt.Errorf("restic init: %s", m.Error)
		}
	}
	if err := b.kopiaBackup(ctx, "kopia/first-backup", "20261205T010000Z"); err != nil {
		return b.res, err
	}
	if b.f.withRestic {
		if err := b.resticBackup(ctx, "restic/first-backup"); err != nil {
			return b.res, err
		}
	}
	n, err := d.rewrite(b.source())
	if err != nil {
		return b.res, err
	}
	b.res.Rewritten = n
	if err := settle(b.source()); err != nil {
		return b.res, err
	}
	if err := b.kopiaBackup(ctx, "kopia/second-backup", "20261205T020000Z"); err != nil {
		return b.res, err
	}
	if b.f.withRestic {
		if err := b.resticBackup(ctx, "restic/second-backup"); err != nil {
			return b.res, err
		}
	}
	if b.f.restore {
		target := b.fresh("kopia-restore")
		err := b.step(ctx, "kopia/restore", "", func() measurement {
			env := append(b.moverEnv(), mover.EnvTargetDir+"="+target,
				mover.EnvManifestKey+"="+b.kopiaPrefix()+"backups/20261205T020000Z.manifest.json")
			return runChild(ctx, b.work, env, b.f.mover, "restore")
		})
		if err != nil {
			return b.res, err
		}
		b.identical("kopia", target)
		if b.f.withRestic {
			target := b.fresh("restic-restore")
			err := b.step(ctx, "restic/restore", "", func() measurement {
				return runChild(ctx, b.work, b.resticEnv(), b.f.restic, "restore", "latest", "--host", "bench", "--target", target)
			})
			if err != nil {
				return b.res, err
			}
			// restic 0.14 restores a backup of "." under the source's absolute path
			if _, err := os.Stat(filepath.Join(target, b.source())); err == nil {
				target = filepath.Join(target, b.source())
			}
			b.identical("restic", target)
		}
	}
	b.res.Targets = targets(b.res)
	return b.res, nil
}

// identical records whether the restored tree equals the source, then removes it.
func (b *bench) identical(engine, target string) {
	start := time.Now()
	verdict := "identical"
	if err := sameTree(b.source(), target); err != nil {
		verdict = "DIFFERENT: " + err.Error()
	}
	b.res.Identical[engine] = verdict
	log.Printf("%s: %s restore %s (checked in %v)", b.d.name, engine, verdict, time.Since(start).Round(time.Second))
	os.RemoveAll(target)
}

// settle reads every file under root once and writes all dirty data to disk, so that no measured
// step pays for what came before it: the first read of a new file updates its atime (relatime),
// which on a busy ext4 journal costs far more than the read, and writeback of the new files would
// compete with the step's own I/O.
func settle(root string) error {
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(io.Discard, f, buf)
		return err
	})
	syscall.Sync()
	return err
}
