package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The tools a round measures, each with its own prefix in the bucket and a new repository per
// round, each run as a child process with a new cache directory (as the mover in its Job):
//
//   - mover: the mover's kopia engine (cmd/mover backup|restore with a Job's environment);
//   - restic: restic (-restic, 0.18.1 from hack/tools/restic/build.sh), its default zstd;
//   - kopia-cli: the stock kopia CLI (-kopia, bin/kopia: the kopia the mover links, with its
//     stock policy: no compression, 4 MiB-average dynamic chunks);
//   - raw: `tar -cf - . | PutObject` and `GetObject | tar -xf -`, no repository: the floor a
//     restore of a tree could reach; its second backup is a whole copy again (it has nothing
//     incremental), kept beside the first as a second backup is.
const (
	toolMover    = "mover"
	toolRestic   = "restic"
	toolKopiaCLI = "kopia-cli"
	toolRaw      = "raw"
)

var allTools = []string{toolMover, toolRestic, toolKopiaCLI, toolRaw}

// prefix is the tool's prefix in the bucket in round.
func (b *bench) prefix(tool string, round int) string {
	return fmt.Sprintf("%s-%s-r%d/", tool, b.d.name, round)
}

// initRepo creates the tool's repository of round, untimed (the mover's first backup creates
// its own, and is timed with it, as in a Job).
func (b *bench) initRepo(ctx context.Context, tool string, round int) error {
	var m measurement
	switch tool {
	case toolRestic:
		m = runChild(ctx, b.work, b.resticEnv(round), b.f.restic, "init")
	case toolKopiaCLI:
		m = runChild(ctx, b.work, b.kopiaEnv(round), b.f.kopia, "repository", "create", "s3", "--bucket", bucket,
			"--endpoint", b.s.endpoint, "--disable-tls", "--access-key", b.s.accessKey, "--secret-access-key", b.s.secretKey,
			"--prefix", b.prefix(tool, round), "--cache-directory", b.kopiaCache(round), "--no-check-for-updates")
	}
	if m.Error != "" {
		return fmt.Errorf("%s init: %s", tool, m.Error)
	}
	return nil
}

// backup runs the tool's backup of the source in round as step (first-backup, second-backup).
func (b *bench) backup(ctx context.Context, tool, step string, round int) error {
	prefix := b.prefix(tool, round)
	return b.step(ctx, tool+"/"+step, prefix, func() measurement {
		switch tool {
		case toolMover:
			id := "20261205T010000Z"
			if step == "second-backup" {
				id = "20261205T020000Z"
			}
			env := append(b.moverEnv(round), backupEnv(id, prefix)...)
			env = append(env, mover.EnvSourceDir+"="+b.source())
			return runChild(ctx, b.work, env, b.f.mover, "backup")
		case toolRestic:
			return runChild(ctx, b.source(), b.resticEnv(round), b.f.restic, "backup", "--quiet", "--host", "bench", ".")
		case toolKopiaCLI:
			b.clearKopiaCache(round)
			return runChild(ctx, b.work, b.kopiaEnv(round), b.f.kopia, "snapshot", "create", "--no-progress", b.source())
		default:
			return b.tarPut(ctx, prefix+step+".tar") // a new object: its bytes are the step's upload
		}
	})
}

// restore runs the tool's restore of its last backup of round into a new directory, and returns
// the directory that holds the restored tree.
func (b *bench) restore(ctx context.Context, tool string, round int) (string, error) {
	target := b.fresh(tool + "-restore")
	if b.f.restoreDir != "" {
		var err error
		if target, err = os.MkdirTemp(b.f.restoreDir, tool+"-restore-"); err != nil {
			return "", err
		}
		if err := os.Chmod(target, 0o755); err != nil { // as b.fresh's: restic leaves the root's mode as it finds it
			return "", err
		}
	}
	prefix := b.prefix(tool, round)
	var kopiaRoot string
	if tool == toolKopiaCLI {
		var err error
		if kopiaRoot, err = b.kopiaLatestRoot(ctx, round); err != nil {
			return "", err
		}
	}
	err := b.step(ctx, tool+"/restore", "", func() measurement {
		switch tool {
		case toolMover:
			env := append(b.moverEnv(round), mover.EnvTargetDir+"="+target,
				mover.EnvManifestKey+"="+prefix+"backups/20261205T020000Z.manifest.json")
			if b.f.wrap != "" {
				wrap := strings.Fields(b.f.wrap)
				return runChild(ctx, b.work, env, wrap[0], append(wrap[1:], b.f.mover, "restore")...)
			}
			return runChild(ctx, b.work, env, b.f.mover, "restore")
		case toolRestic:
			return runChild(ctx, b.work, b.resticEnv(round), b.f.restic, "restore", "latest", "--host", "bench", "--target", target)
		case toolKopiaCLI:
			b.clearKopiaCache(round)
			return runChild(ctx, b.work, b.kopiaEnv(round), b.f.kopia, "restore", "--no-progress", kopiaRoot, target)
		default:
			return b.getTar(ctx, prefix+"second-backup.tar", target)
		}
	})
	// restic 0.14 restored a backup of "." under the source's absolute path
	if _, serr := os.Stat(filepath.Join(target, b.source())); tool == toolRestic && serr == nil {
		return filepath.Join(target, b.source()), err
	}
	return target, err
}

// moverEnv is the environment of a mover Job in round: S3, the kopia repository, a new
// (emptyDir) cache.
func (b *bench) moverEnv(round int) []string {
	return b.moverEnvAt(b.prefix(toolMover, round) + "repo")
}

// resticEnv is restic's environment in round, with a new cache directory (as the mover's).
func (b *bench) resticEnv(round int) []string {
	return []string{"RESTIC_REPOSITORY=s3:http://" + b.s.endpoint + "/" + bucket + "/" + strings.TrimSuffix(b.prefix(toolRestic, round), "/"),
		"RESTIC_PASSWORD=" + resticPassword, "AWS_ACCESS_KEY_ID=" + b.s.accessKey, "AWS_SECRET_ACCESS_KEY=" + b.s.secretKey,
		"RESTIC_CACHE_DIR=" + b.fresh("restic-cache")}
}

// kopiaEnv is the kopia CLI's environment in round: its own config file, logs in the work
// directory, no update check.
func (b *bench) kopiaEnv(round int) []string {
	dir := filepath.Join(b.work, b.d.name, fmt.Sprintf("kopia-cli-r%d", round))
	return []string{"KOPIA_CONFIG_PATH=" + filepath.Join(dir, "repository.config"), "KOPIA_PASSWORD=" + kopiaPassword,
		"KOPIA_LOG_DIR=" + filepath.Join(dir, "logs"), "KOPIA_CHECK_FOR_UPDATES=false", "KOPIA_PERSIST_CREDENTIALS_ON_CONNECT=true"}
}

func (b *bench) kopiaCache(round int) string {
	return filepath.Join(b.work, b.d.name, fmt.Sprintf("kopia-cli-r%d", round), "cache")
}

// clearKopiaCache empties the kopia CLI's cache before a step: each step starts cold, as the
// mover's and restic's do.
func (b *bench) clearKopiaCache(round int) { os.RemoveAll(b.kopiaCache(round)) }

// kopiaLatestRoot is the root object of the kopia CLI's latest snapshot of the source in round.
func (b *bench) kopiaLatestRoot(ctx context.Context, round int) (string, error) {
	cmd := exec.CommandContext(ctx, b.f.kopia, "snapshot", "list", "--json", b.source())
	cmd.Env = append(os.Environ(), b.kopiaEnv(round)...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kopia snapshot list: %w", err)
	}
	var snaps []struct {
		RootEntry struct {
			Obj string `json:"obj"`
		} `json:"rootEntry"`
	}
	if err := json.Unmarshal(out, &snaps); err != nil || len(snaps) == 0 {
		return "", fmt.Errorf("kopia snapshot list: %d snapshots (%v) in %s", len(snaps), err, out)
	}
	return snaps[len(snaps)-1].RootEntry.Obj, nil
}

// tarPut streams `tar -cf - .` of the source into the object key (minio-go, unknown size, the
// mover's part size). Its CPU is tar's only; the upload runs in this process.
func (b *bench) tarPut(ctx context.Context, key string) measurement {
	cmd := exec.CommandContext(ctx, "tar", "-cf", "-", ".")
	cmd.Dir = b.source()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return measurement{Error: err.Error()}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return measurement{Error: err.Error()}
	}
	_, putErr := b.s.client.PutObject(ctx, bucket, key, out, -1, minio.PutObjectOptions{PartSize: mover.DefaultPartSize})
	if putErr != nil {
		io.Copy(io.Discard, out)
	}
	waitErr := cmd.Wait()
	m := childMeasurement(cmd, start)
	switch {
	case putErr != nil:
		m.Error = fmt.Sprintf("PutObject: %v", putErr)
	case waitErr != nil:
		m.Error = fmt.Sprintf("tar: %v", waitErr)
	}
	return m
}

// getTar streams the object key into `tar -xf - -C target`. Its CPU is tar's only.
func (b *bench) getTar(ctx context.Context, key, target string) measurement {
	start := time.Now()
	obj, err := b.s.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return measurement{Error: err.Error()}
	}
	defer obj.Close()
	cmd := exec.CommandContext(ctx, "tar", "-xf", "-", "-C", target)
	cmd.Stdin = obj
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	m := childMeasurement(cmd, start)
	if err != nil {
		m.Error = fmt.Sprintf("tar -x: %v: %s", err, stderr.String())
	}
	return m
}
