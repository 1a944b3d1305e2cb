package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"slices"
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
	cur  map[string]measurement // the steps of the current round
	dirs int                    // counter for fresh directories
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

// moverEnvAt is the environment of a mover Job whose kopia repository is at prefix: S3, the
// repository, a new (emptyDir) cache.
func (b *bench) moverEnvAt(prefix string) []string {
	e := []string{
		mover.EnvEndpoint + "=" + b.s.endpoint, mover.EnvBucket + "=" + bucket, mover.EnvInsecure + "=true",
		mover.EnvAccessKey + "=" + b.s.accessKey, mover.EnvSecretKey + "=" + b.s.secretKey,
		mover.EnvEngine + "=" + mover.EngineKopia, mover.EnvKopiaPrefix + "=" + prefix,
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

// step runs one measured step and records it in the current round; uploads are counted under
// prefix when not empty, and what the prefix holds afterwards is the step's Stored.
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
		m.Uploaded, m.Stored = after-before, after
	}
	b.cur[name] = m
	log.Printf("%s: %s %.1fs (CPU %.1fs), peak RSS %.0f MiB, uploaded %.1f MiB %s", b.d.name, name, m.Seconds, m.CPUSeconds,
		float64(m.PeakRSS)/(1<<20), float64(m.Uploaded)/(1<<20), m.Error)
	if m.Error != "" {
		return fmt.Errorf("%s: %s", name, m.Error)
	}
	return nil
}

// run measures the dataset: -rounds rounds, each on a freshly generated source with new
// repositories, the tools taking turns in an order rotated by one per round (a tool that ran
// right after another's removal of a big tree, or with a warmer MinIO, does not always do so):
// every tool's first backup, the shape's change, every tool's second backup, every tool's
// restore into a new directory, each restored tree compared with the source. Steps holds the
// medians over the rounds.
func (b *bench) run(ctx context.Context) (datasetResults, error) {
	d := b.d
	b.res = datasetResults{Name: d.name, Files: d.files, Steps: map[string]measurement{}, Identical: map[string]string{}}
	if b.f.engine == mover.EngineArchive {
		b.cur = b.res.Steps
		if err := b.generate(); err != nil {
			return b.res, err
		}
		return b.runArchive(ctx)
	}
	var err error
	for round := range b.f.rounds {
		if err = b.round(ctx, round); err != nil {
			err = fmt.Errorf("round %d: %w", round+1, err)
			break
		}
	}
	b.res.Steps = medians(b.res.Rounds)
	b.res.Targets = targets(b.res)
	return b.res, err
}

// generate writes the source anew (generation 0) and settles it.
func (b *bench) generate() error {
	start := time.Now()
	if err := os.RemoveAll(b.source()); err != nil {
		return err
	}
	log.Printf("%s: generating", b.d.name)
	if err := b.d.generate(b.source()); err != nil {
		return err
	}
	files, bytes, err := treeSize(b.source())
	if err != nil {
		return err
	}
	b.res.Files, b.res.Bytes, b.res.Generate = files, bytes, time.Since(start).Seconds()
	return settle(b.source())
}

// round runs round r of the dataset (see run).
func (b *bench) round(ctx context.Context, r int) error {
	b.cur = map[string]measurement{}
	b.res.Rounds = append(b.res.Rounds, b.cur)
	if err := b.generate(); err != nil {
		return err
	}
	tools := rotate(b.tools(), r)
	log.Printf("%s: round %d of %d, order %v", b.d.name, r+1, b.f.rounds, tools)
	for _, t := range tools {
		if err := b.initRepo(ctx, t, r); err != nil {
			return err
		}
	}
	for _, t := range tools {
		if err := b.backup(ctx, t, "first-backup", r); err != nil {
			return err
		}
	}
	n, err := b.d.rewrite(b.source())
	if err != nil {
		return err
	}
	b.res.Rewritten = n
	if err := settle(b.source()); err != nil {
		return err
	}
	for _, t := range tools {
		if err := b.backup(ctx, t, "second-backup", r); err != nil {
			return err
		}
	}
	if !b.f.restore {
		return nil
	}
	for _, t := range tools {
		target, err := b.restore(ctx, t, r)
		if err != nil {
			return err
		}
		b.identical(t, r, target)
	}
	return nil
}

// tools are the tools measured, in -tools order.
func (b *bench) tools() []string {
	var ts []string
	for _, t := range strings.Split(b.f.tools, ",") {
		if t == toolRestic && !b.f.withRestic {
			continue
		}
		ts = append(ts, t)
	}
	return ts
}

// rotate is ts rotated left by r.
func rotate(ts []string, r int) []string {
	if len(ts) == 0 {
		return ts
	}
	r %= len(ts)
	return append(slices.Clone(ts[r:]), ts[:r]...)
}

// treeSize counts the regular files under root and their bytes.
func treeSize(root string) (files int, bytes int64, err error) {
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			files++
			bytes += info.Size()
		}
		return err
	})
	return files, bytes, err
}

// identical records whether the restored tree equals the source (the first difference of any
// round is kept), then removes it.
func (b *bench) identical(engine string, round int, target string) {
	start := time.Now()
	verdict := "identical"
	if err := sameTree(b.source(), target); err != nil {
		verdict = fmt.Sprintf("DIFFERENT in round %d: %v", round+1, err)
	}
	if prev, ok := b.res.Identical[engine]; !ok || prev == "identical" {
		b.res.Identical[engine] = verdict
	}
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
