// Package run is the mover's driver, what `mover backup|restore|verify|list` runs: it reads the
// environment once (the variables of internal/mover), picks the engine once (pick), runs the
// command through the Engine interface, turns the engine's error into the Result in one place
// (resultOf) and writes that Result where the kubelet reads the termination message.
package run

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/mover/engine/archive"
	"github.com/okgoes/okgoes-operator/internal/mover/engine/kopia"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Engine is how a backup is stored and read back. Each method returns the Result of what it did
// and, when it failed, an error that carries the Reason where the engine knows it (mover.Fail);
// resultOf keeps of a failed run's Result only what identifies the backup.
type Engine interface {
	Backup(ctx context.Context, s3 engine.S3, job engine.BackupJob) (mover.Result, error)
	Restore(ctx context.Context, s3 engine.S3, job engine.RestoreJob) (mover.Result, error)
	Verify(ctx context.Context, s3 engine.S3, job engine.VerifyJob) (mover.Result, error)
	List(ctx context.Context, s3 engine.S3, job engine.ListJob) (mover.Result, error)
}

// pick is the engine the environment names (mover.EnvEngine), and its options: the one place
// the mover chooses between engines. A backup needs more of a kopia engine's options than a
// restore or verify, which read the repository their manifest names.
func pick(getenv func(string) string, backup bool) (Engine, error) {
	switch name := getenv(mover.EnvEngine); name {
	case "", mover.EngineArchive:
		return archive.Engine{}, nil
	case mover.EngineKopia:
		return kopia.FromEnv(getenv, backup)
	default:
		return nil, fmt.Errorf("%s: unknown engine %q", mover.EnvEngine, name)
	}
}

// Config is the mover's whole input, read from the environment.
type Config struct {
	Store  objectstore.Config
	Job    engine.BackupJob
	Engine Engine
}

// ConfigFromEnv reads the Config of a backup; getenv is os.Getenv in a pod.
func ConfigFromEnv(getenv func(string) string) (Config, error) { return configFromEnv(getenv, true) }

// configFromEnv reads the Config of a backup, or of a restore or verify: those have no backup
// job, so its variables are not required (their engine checks the keys it reads).
func configFromEnv(getenv func(string) string, backup bool) (Config, error) {
	var c Config
	var missing []string
	need := func(name string) string {
		v := getenv(name)
		if v == "" && (backup || !isBackupJobVar(name)) {
			missing = append(missing, name)
		}
		return v
	}
	c.Store = objectstore.Config{
		Endpoint:  need(mover.EnvEndpoint),
		Region:    getenv(mover.EnvRegion),
		Bucket:    need(mover.EnvBucket),
		AccessKey: need(mover.EnvAccessKey),
		SecretKey: need(mover.EnvSecretKey),
		Insecure:  getenv(mover.EnvInsecure) == "true",
	}
	c.Job = engine.BackupJob{
		ID:          need(mover.EnvBackupID),
		SourceDir:   need(mover.EnvSourceDir),
		ArchiveKey:  need(mover.EnvArchiveKey),
		ManifestKey: need(mover.EnvManifestKey),
		Namespace:   getenv(mover.EnvSourceNamespace),
		PVC:         getenv(mover.EnvSourcePVC),
		PVCs:        splitList(getenv(mover.EnvSourcePVCs)),
		ProgressKey: getenv(mover.EnvProgressKey),
		RecordKey:   getenv(mover.EnvKopiaRecordKey),
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	var err error
	if c.Engine, err = pick(getenv, backup); err != nil {
		return c, err
	}
	if ca := getenv(mover.EnvCAFile); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return c, fmt.Errorf("read CA bundle: %w", err)
		}
		c.Store.CABundle = pem
	}
	if s := getenv(mover.EnvScheduledTime); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return c, fmt.Errorf("%s: %w", mover.EnvScheduledTime, err)
		}
		c.Job.ScheduledTime = t
	}
	if s := getenv(mover.EnvIdleTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("%s: %q is not a positive duration", mover.EnvIdleTimeout, s)
		}
		c.Job.IdleTimeout = d
	}
	if s := getenv(mover.EnvPartSize); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s: %w", mover.EnvPartSize, err)
		}
		c.Job.PartSize = n
	}
	return c, nil
}

// decodeMembers reads mover.EnvRestoreMembers: "<pvc>=<overwrite>,...", each pvc once and a
// plain name (no path), each overwrite Refuse, Clean or Merge; nil when s is empty.
func decodeMembers(s string) ([]engine.Member, error) {
	var members []engine.Member
	seen := map[string]bool{}
	for _, item := range splitList(s) {
		dir, overwrite, _ := strings.Cut(item, "=")
		switch {
		case dir == "" || dir == "." || dir == ".." || strings.ContainsAny(dir, "/\\") || seen[dir]:
			return nil, fmt.Errorf("%s: %q is not a member name, or is named twice", mover.EnvRestoreMembers, dir)
		case overwrite != "Refuse" && overwrite != "Clean" && overwrite != "Merge":
			return nil, fmt.Errorf("%s: member %s: overwrite %q is not Refuse, Clean or Merge", mover.EnvRestoreMembers, dir, overwrite)
		}
		seen[dir] = true
		members = append(members, engine.Member{Dir: dir, Overwrite: overwrite})
	}
	return members, nil
}

// splitList is the comma-separated list s; nil when s is empty.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// isBackupJobVar reports whether name is a variable only a backup requires.
func isBackupJobVar(name string) bool {
	switch name {
	case mover.EnvBackupID, mover.EnvSourceDir, mover.EnvArchiveKey, mover.EnvManifestKey:
		return true
	}
	return false
}

// Backup is `mover backup`: it reads the environment, runs the backup, and writes the Result
// to the termination log. The returned Result is also what the process exit code reflects.
func Backup(ctx context.Context, getenv func(string) string, version string) mover.Result {
	return report(getenv, backup(ctx, getenv, version))
}

func backup(ctx context.Context, getenv func(string) string, version string) mover.Result {
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		return failed(err, mover.ReasonInvalidConfig)
	}
	cfg.Job.OperatorVersion = version
	store, err := objectstore.New(cfg.Store)
	if err != nil {
		res := failed(err, mover.ReasonInvalidConfig)
		res.ID = cfg.Job.ID
		return res
	}
	if err := checkMembers(cfg.Job); err != nil {
		return resultOf(mover.Result{ID: cfg.Job.ID}, err)
	}
	return resultOf(cfg.Engine.Backup(ctx, engine.S3{Store: store, Config: cfg.Store}, cfg.Job))
}

// checkMembers proves that every member of a group backup is a directory under the source
// directory (its volume's mount), before anything is read: a member whose volume is missing
// would otherwise be backed up as nothing, and restored as an empty volume.
func checkMembers(job engine.BackupJob) error {
	for _, pvc := range job.PVCs {
		dir := filepath.Join(job.SourceDir, pvc)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return mover.Fail(mover.ReasonVolumeReadFailed, "the volume of group member %s is not mounted at %s (%v)", pvc, dir, err)
		}
	}
	return nil
}

// Restore is `mover restore`: it reads the environment, restores, and writes the Result to the
// termination log.
func Restore(ctx context.Context, getenv func(string) string) mover.Result {
	job := engine.RestoreJob{TargetDir: getenv(mover.EnvTargetDir), ArchiveKey: getenv(mover.EnvArchiveKey),
		ManifestKey: getenv(mover.EnvManifestKey), Overwrite: getenv(mover.EnvOverwrite)}
	paths, err := mover.DecodePaths(getenv(mover.EnvRestorePaths))
	if err != nil {
		return report(getenv, failed(err, mover.ReasonInvalidConfig))
	}
	if len(paths) > 0 && job.Overwrite == "Clean" { // admission refuses it; never empty a volume for some paths
		return report(getenv, failed(fmt.Errorf("%s cannot be combined with %s=Clean", mover.EnvRestorePaths, mover.EnvOverwrite), mover.ReasonInvalidConfig))
	}
	job.Paths = paths
	if job.Members, err = decodeMembers(getenv(mover.EnvRestoreMembers)); err != nil {
		return report(getenv, failed(err, mover.ReasonInvalidConfig))
	}
	if len(job.Members) > 0 && len(paths) > 0 { // admission refuses it: a group is restored whole
		return report(getenv, failed(fmt.Errorf("%s cannot be combined with %s", mover.EnvRestorePaths, mover.EnvRestoreMembers), mover.ReasonInvalidConfig))
	}
	return report(getenv, read(ctx, getenv, func(e Engine, ctx context.Context, s3 engine.S3) (mover.Result, error) {
		return e.Restore(ctx, s3, job)
	}))
}

// Verify is `mover verify`: it reads the backup back against its manifest, writing nothing, and
// writes the Result to the termination log.
func Verify(ctx context.Context, getenv func(string) string) mover.Result {
	job := engine.VerifyJob{ArchiveKey: getenv(mover.EnvArchiveKey), ManifestKey: getenv(mover.EnvManifestKey)}
	return report(getenv, read(ctx, getenv, func(e Engine, ctx context.Context, s3 engine.S3) (mover.Result, error) {
		return e.Verify(ctx, s3, job)
	}))
}

// List is `mover list`: it lists a directory of a backup (EnvListPath, EnvListDepth levels deep)
// without restoring it, and writes the Result, whose Entries are the largest entries that fit the
// termination message, to the termination log.
func List(ctx context.Context, getenv func(string) string) mover.Result {
	job := engine.ListJob{ManifestKey: getenv(mover.EnvManifestKey), Path: strings.Trim(getenv(mover.EnvListPath), "/"), Depth: 1}
	if s := getenv(mover.EnvListDepth); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 1 || d > mover.MaxListDepth {
			return report(getenv, failed(fmt.Errorf("%s: %q is not a depth from 1 to %d", mover.EnvListDepth, s, mover.MaxListDepth), mover.ReasonInvalidConfig))
		}
		job.Depth = d
	}
	if job.ManifestKey == "" {
		return report(getenv, failed(fmt.Errorf("missing environment: %s", mover.EnvManifestKey), mover.ReasonInvalidConfig))
	}
	return report(getenv, read(ctx, getenv, func(e Engine, ctx context.Context, s3 engine.S3) (mover.Result, error) {
		return e.List(ctx, s3, job)
	}))
}

// read runs a restore, verify or list, do, with the engine of the environment and under the idle
// watchdog, as a backup is: when an S3 read makes no progress for the idle timeout, the run
// ends StorageStalled (engine.Watch).
func read(ctx context.Context, getenv func(string) string, do func(Engine, context.Context, engine.S3) (mover.Result, error)) mover.Result {
	cfg, err := configFromEnv(getenv, false)
	if err != nil {
		return failed(err, mover.ReasonInvalidConfig)
	}
	store, err := objectstore.New(cfg.Store)
	if err != nil {
		return failed(err, mover.ReasonInvalidConfig)
	}
	w := engine.WatchRun(ctx, cfg.Job.IdleTimeout)
	defer w.Stop()
	res, err := do(cfg.Engine, w.Ctx, engine.S3{Store: w.Store(store), Config: cfg.Store, Watch: w})
	return resultOf(res, w.Outcome(err))
}

// resultOf is the Result of a command the engine ended with res and err: res when it succeeded;
// when it failed, what identifies the backup in res (ID, ArchiveKey, SnapshotID) and what stands
// whatever the outcome (a password rotation, the repository's retention) with the Reason err
// carries, StorageFailed when it carries none.
func resultOf(res mover.Result, err error) mover.Result {
	if err == nil {
		res.Result = mover.Succeeded
		return res
	}
	f := failed(err, mover.ReasonStorageFailed)
	f.ID, f.ArchiveKey, f.SnapshotID, f.PasswordRotated = res.ID, res.ArchiveKey, res.SnapshotID, res.PasswordRotated
	f.RetentionMode, f.RetentionPeriod = res.RetentionMode, res.RetentionPeriod
	return f
}

// failed is the Result of a command that failed with err: its Reason, or def.
func failed(err error, def mover.Reason) mover.Result {
	return mover.Result{Result: mover.Failed, Reason: mover.ReasonOf(err, def), Message: err.Error()}
}

// report writes res where the kubelet reads the termination message, and returns it.
func report(getenv func(string) string, res mover.Result) mover.Result {
	path := getenv(mover.EnvTerminationLog)
	if path == "" {
		path = "/dev/termination-log"
	}
	data, _ := json.Marshal(res)
	if len(data) > 4000 { // the kubelet keeps at most 4096 bytes
		res.Message = res.Message[:min(len(res.Message), 1000)] + "..."
		data, _ = json.Marshal(res)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mover: write termination log:", err)
	}
	return res
}
