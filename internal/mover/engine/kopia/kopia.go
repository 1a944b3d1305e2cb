// Package kopia is the mover's kopia engine: a backup is a snapshot in the PVCBackup's kopia
// repository in the bucket (internal/kopiarepo) and a manifest that names it; a restore or verify
// reads the snapshot the manifest names.
package kopia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// name is the engine's name in a manifest and in the environment.
const name = mover.EngineKopia

// Engine is the kopia engine. Options say which repository and how to open it.
type Engine struct {
	Options Options
	// Now is the clock of a backup (time.Now when nil): the day's slice of the sampled read and
	// the times of the manifest and the maintenance follow it.
	Now func() time.Time
}

// MaintenanceTimeout bounds the repository maintenance that follows a kopia backup. The backup
// is complete (its manifest written) before maintenance starts, so a maintenance that runs out
// of time costs only space, which the next run's maintenance picks up again.
const MaintenanceTimeout = 30 * time.Minute

// Tags of a snapshot the mover makes: the backup it belongs to and that backup's manifest. A
// snapshot whose manifest is gone (pruned by the controller's retention, or never written
// because the run failed after the upload) is deleted by the next backup (sweep).
const (
	tagBackup   = "backup"
	tagManifest = "manifest"
)

// Store is what the kopia engine needs from S3 besides the repository itself: the
// manifests and the progress report.
type Store interface {
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (objectstore.ObjectInfo, error)
	ListTop(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error)
}

// Options say where a PVCBackup's kopia repository is and how to open it.
type Options struct {
	Prefix   string // key prefix of the repository in the bucket
	Password string
	// PreviousPassword is the password being rotated away from ("" when none): it opens the
	// repository when Password does not, and a backup then changes the repository's password
	// to Password (rotate).
	PreviousPassword string
	CacheDir         string
	CacheLimitBytes  int64
	// KeyDerivation is kopia's name of the key derivation of a repository the backup creates
	// (mover.KeyDerivationScrypt or KeyDerivationPBKDF2); empty: kopia's default.
	KeyDerivation string
	// Splitter is kopia's name of the splitter of a repository the backup creates (one of
	// kopiarepo.Splitters); empty: kopiarepo.DefaultSplitter. An existing repository keeps its own.
	Splitter string
	// Compression is kopia's name of the compressor of the backup's new chunks (one of
	// kopiarepo.Compressions); empty: kopiarepo.DefaultCompression.
	Compression string
	// Retention is the object lock retention of a repository the backup creates; an existing
	// repository with another one fails the backup with ReasonImmutabilityMismatch (zero: no
	// lock is asked for, and none is checked).
	Retention kopiarepo.Retention
	// PointInTime makes a restore or verify read the repository as the versioned bucket held
	// it then (kopiarepo.Options.PointInTime); nil: as it is now.
	PointInTime *time.Time

	guard kopiarepo.Guard // the idle watchdog of a run over the repository's S3 calls
}

// watched is o with the repository's S3 calls under the run's watchdog w (none when nil).
func (o Options) watched(w *engine.Watch) Options {
	if w != nil {
		o.guard = kopiarepo.Guard{Abort: w.Stalled, Call: w.Activity.Call}
	}
	return o
}

// openRepo opens the repository of opts in the bucket of cfg, with the mover's Reasons on
// failure. A connection for reading (restore, verify) never creates a repository, and caches
// nothing on disk: it reads every chunk once. It opens with the password, else with the previous
// one (a rotation in progress); it reports which one opened it.
func openRepo(ctx context.Context, cfg objectstore.Config, opts Options, forReading bool) (_ *kopiarepo.Repo, withPrevious bool, _ error) {
	open := func(password string) (*kopiarepo.Repo, error) {
		return kopiarepo.Open(ctx, kopiarepo.S3Config{Config: cfg, Prefix: opts.Prefix}, password,
			kopiarepo.Options{CacheDir: opts.CacheDir, CacheLimitBytes: opts.CacheLimitBytes,
				NoCreate: forReading, NoDiskCache: forReading, KeyDerivation: opts.KeyDerivation, Splitter: opts.Splitter, Guard: opts.guard,
				Retention: opts.Retention, PointInTime: opts.PointInTime})
	}
	r, err := open(opts.Password)
	if errors.Is(err, kopiarepo.ErrWrongPassword) && opts.PreviousPassword != "" && opts.PreviousPassword != opts.Password {
		if r, err = open(opts.PreviousPassword); err == nil {
			return r, true, nil
		}
	}
	switch {
	case err == nil:
		return r, false, nil
	case errors.Is(err, kopiarepo.ErrWrongPassword) && opts.PreviousPassword != "":
		return nil, false, mover.Fail(mover.ReasonRepositoryPasswordWrong, "neither the repository password nor the previous one opens the kopia repository at %s: "+
			"the credentials Secret holds two other passwords than the repository's; the repository was not changed", opts.Prefix)
	case errors.Is(err, kopiarepo.ErrWrongPassword):
		return nil, false, mover.Fail(mover.ReasonRepositoryPasswordWrong, "the repository password does not open the kopia repository at %s: "+
			"the credentials Secret holds another password than the repository's; the repository was not changed", opts.Prefix)
	case errors.Is(err, kopiarepo.ErrBucketNotLockable):
		return nil, false, mover.Fail(mover.ReasonBucketNotLockable, "the bucket %s refused an object locked %v: it has no object lock "+
			"(a bucket gets it when it is created with object lock); nothing was written at %s (%v)", cfg.Bucket, opts.Retention, opts.Prefix, err)
	case errors.Is(err, kopiarepo.ErrNotARepository):
		return nil, false, mover.Fail(mover.ReasonNotARepository, "%s holds objects that are not a kopia repository: the operator neither uses nor overwrites them", opts.Prefix)
	case errors.Is(err, kopiarepo.ErrNoRepository):
		return nil, false, mover.Fail(mover.ReasonBackupNotFound, "there is no kopia repository at %s", opts.Prefix)
	case kopiarepo.IsDamaged(err):
		return nil, false, mover.Fail(mover.ReasonRepositoryDamaged, "the kopia repository at %s is damaged, it cannot be opened: %w; %s", opts.Prefix, err, repairAdvice)
	}
	return nil, false, mover.Fail(mover.ReasonStorageFailed, "open the kopia repository at %s: %w", opts.Prefix, err)
}

// checkRetention fails a backup into a repository whose object lock retention is not the one
// opts asks for: the backup would not have the protection asked for (or would lock more than
// asked). The mover never changes a repository's retention (kopia could, for the blobs written
// from then on): nothing is changed.
func checkRetention(ctx context.Context, r *kopiarepo.Repo, opts Options) (kopiarepo.Retention, error) {
	has, err := r.Retention(ctx)
	if err != nil {
		return has, mover.Fail(mover.ReasonStorageFailed, "read the object lock retention of the kopia repository at %s: %w", opts.Prefix, err)
	}
	if opts.Retention.Enabled() && has != opts.Retention {
		return has, mover.Fail(mover.ReasonImmutabilityMismatch, "the kopia repository at %s was created with %v, the backup asks for %v; "+
			"the operator does not change a repository's retention: the repository was not changed and no backup was made", opts.Prefix, has, opts.Retention)
	}
	return has, nil
}

// rotate finishes a password rotation: the repository r opened only with the previous password,
// and from now on opens only with opts.Password. It runs before the backup reads the volume, so
// the run that rotates also proves the new password by the backup it makes.
func rotate(ctx context.Context, r *kopiarepo.Repo, opts Options) error {
	if err := r.ChangePassword(ctx, opts.Password); err != nil {
		return mover.Fail(mover.ReasonStorageFailed, "the kopia repository at %s opened with the previous password; changing it to the current one failed "+
			"(the previous password still opens it, the next backup tries again): %w", opts.Prefix, err)
	}
	fmt.Fprintf(os.Stderr, "mover: changed the password of the kopia repository at %s to the current one (the previous one no longer opens it)\n", opts.Prefix)
	return nil
}

// FromEnv is the kopia engine of the environment: the repository's prefix, its password and
// kopia's cache. A backup needs the prefix; a restore or verify reads the repository the
// backup's manifest names.
func FromEnv(getenv func(string) string, backup bool) (Engine, error) {
	o, err := optionsFromEnv(getenv)
	if err == nil && backup && o.Prefix == "" {
		err = fmt.Errorf("missing environment: %s", mover.EnvKopiaPrefix)
	}
	return Engine{Options: o}, err
}

// optionsFromEnv reads the kopia variables of the environment.
func optionsFromEnv(getenv func(string) string) (Options, error) {
	o := Options{Prefix: getenv(mover.EnvKopiaPrefix), Password: getenv(mover.EnvKopiaPassword),
		PreviousPassword: getenv(mover.EnvKopiaPreviousPassword), CacheDir: getenv(mover.EnvKopiaCacheDir)}
	if o.Password == "" {
		return o, fmt.Errorf("missing environment: %s (the repository password)", mover.EnvKopiaPassword)
	}
	if s := getenv(mover.EnvKopiaCacheLimit); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("%s: %q is not a positive number of bytes", mover.EnvKopiaCacheLimit, s)
		}
		o.CacheLimitBytes = n
	}
	var err error
	switch o.KeyDerivation = getenv(mover.EnvKopiaKeyDerivation); o.KeyDerivation {
	case "", mover.KeyDerivationScrypt, mover.KeyDerivationPBKDF2:
	default:
		return o, fmt.Errorf("%s: %q is not %s or %s", mover.EnvKopiaKeyDerivation, o.KeyDerivation,
			mover.KeyDerivationScrypt, mover.KeyDerivationPBKDF2)
	}
	if o.Splitter = getenv(mover.EnvKopiaSplitter); o.Splitter != "" && !slices.Contains(kopiarepo.Splitters, o.Splitter) {
		return o, fmt.Errorf("%s: %q is not one of %v", mover.EnvKopiaSplitter, o.Splitter, kopiarepo.Splitters)
	}
	if o.Compression = getenv(mover.EnvKopiaCompression); o.Compression != "" &&
		!slices.Contains(kopiarepo.Compressions, o.Compression) {
		return o, fmt.Errorf("%s: %q is not one of %v", mover.EnvKopiaCompression, o.Compression, kopiarepo.Compressions)
	}
	if o.Retention, err = retentionFromEnv(getenv); err != nil {
		return o, err
	}
	if s := getenv(mover.EnvKopiaPointInTime); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return o, fmt.Errorf("%s: %q is not an RFC 3339 time", mover.EnvKopiaPointInTime, s)
		}
		o.PointInTime = &t
	}
	return o, nil
}

// retentionFromEnv is the object lock retention of EnvKopiaRetentionMode and
// EnvKopiaRetentionPeriod: both or neither.
func retentionFromEnv(getenv func(string) string) (kopiarepo.Retention, error) {
	mode, period := getenv(mover.EnvKopiaRetentionMode), getenv(mover.EnvKopiaRetentionPeriod)
	if mode == "" && period == "" {
		return kopiarepo.Retention{}, nil
	}
	if mode != mover.RetentionGovernance && mode != mover.RetentionCompliance {
		return kopiarepo.Retention{}, fmt.Errorf("%s: %q is not %s or %s", mover.EnvKopiaRetentionMode, mode, mover.RetentionGovernance, mover.RetentionCompliance)
	}
	d, err := time.ParseDuration(period)
	if err != nil || d < 2*kopiarepo.MinRetentionPeriod {
		return kopiarepo.Retention{}, fmt.Errorf("%s: %q is not a duration of at least 48h", mover.EnvKopiaRetentionPeriod, period)
	}
	return kopiarepo.Retention{Mode: mode, Period: d}, nil
}
