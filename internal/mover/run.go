package mover

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Config is the mover's whole input, read from the environment.
type Config struct {
	Store objectstore.Config
	Job   BackupJob
}

// storeFromEnv reads the S3 part of the environment.
func storeFromEnv(getenv func(string) string) (objectstore.Config, error) {
	c, err := ConfigFromEnv(func(k string) string {
		switch k { // a restore has no backup job: let those through
		case EnvBackupID, EnvSourceDir, EnvArchiveKey, EnvManifestKey:
			return "-"
		case EnvEngine: // read by the caller
			return ""
		}
		return getenv(k)
	})
	return c.Store, err
}

// ConfigFromEnv reads the Config; getenv is os.Getenv in a pod.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var missing []string
	need := func(name string) string {
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	c.Store = objectstore.Config{
		Endpoint:  need(EnvEndpoint),
		Region:    getenv(EnvRegion),
		Bucket:    need(EnvBucket),
		AccessKey: need(EnvAccessKey),
		SecretKey: need(EnvSecretKey),
		Insecure:  getenv(EnvInsecure) == "true",
	}
	c.Job = BackupJob{
		ID:          need(EnvBackupID),
		SourceDir:   need(EnvSourceDir),
		ArchiveKey:  need(EnvArchiveKey),
		ManifestKey: need(EnvManifestKey),
		Namespace:   getenv(EnvSourceNamespace),
		PVC:         getenv(EnvSourcePVC),
		Engine:      getenv(EnvEngine),
		ProgressKey: getenv(EnvProgressKey),
		RecordKey:   getenv(EnvKopiaRecordKey),
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	switch c.Job.Engine {
	case "", EngineArchive:
	case EngineKopia:
		var err error
		if c.Job.Kopia, err = kopiaOptionsFromEnv(getenv); err != nil {
			return c, err
		}
		if c.Job.Kopia.Prefix == "" {
			return c, fmt.Errorf("missing environment: %s", EnvKopiaPrefix)
		}
	default:
		return c, fmt.Errorf("%s: unknown engine %q", EnvEngine, c.Job.Engine)
	}
	if ca := getenv(EnvCAFile); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return c, fmt.Errorf("read CA bundle: %w", err)
		}
		c.Store.CABundle = pem
	}
	if s := getenv(EnvScheduledTime); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvScheduledTime, err)
		}
		c.Job.ScheduledTime = t
	}
	if s := getenv(EnvIdleTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("%s: %q is not a positive duration", EnvIdleTimeout, s)
		}
		c.Job.IdleTimeout = d
	}
	if s := getenv(EnvPartSize); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvPartSize, err)
		}
		c.Job.PartSize = n
	}
	return c, nil
}

// RunBackup is `mover backup`: it reads the environment, runs the backup, and writes the Result
// to the termination log. The returned Result is also what the process exit code reflects.
func RunBackup(ctx context.Context, getenv func(string) string, version string) Result {
	res := runBackup(ctx, getenv, version)
	writeTerminationLog(getenv, &res)
	return res
}

func runBackup(ctx context.Context, getenv func(string) string, version string) Result {
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		return failed(err, ReasonInvalidConfig)
	}
	cfg.Job.OperatorVersion = version
	store, err := objectstore.New(cfg.Store)
	if err != nil {
		res := failed(err, ReasonInvalidConfig)
		res.ID = cfg.Job.ID
		return res
	}
	if cfg.Job.Engine == EngineKopia {
		m, kb, err := BackupKopia(ctx, store, cfg.Store, cfg.Job, time.Now)
		if err != nil {
			res := failed(err, ReasonStorageFailed)
			res.ID = cfg.Job.ID
			return res
		}
		return kopiaResult(m, kb)
	}
	m, err := Backup(ctx, store, cfg.Job, time.Now)
	if err != nil {
		res := failed(err, ReasonStorageFailed)
		res.ID = cfg.Job.ID
		return res
	}
	return Result{Result: Succeeded, ID: m.ID, ArchiveKey: m.Archive.Key, Bytes: m.Archive.Bytes,
		SHA256: m.Archive.SHA256, Files: m.Files, Skipped: m.Skipped}
}
