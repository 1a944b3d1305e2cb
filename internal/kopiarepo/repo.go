package kopiarepo

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/s3"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/format"
	"github.com/kopia/kopia/repo/logging"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/kopia/kopia/snapshot/policy"
	"go.uber.org/zap"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// ClientUser and ClientHost are the identity every client of a repository uses (kopia's
// user@host), so that maintenance ownership and snapshot sources do not depend on pod names.
const (
	ClientUser = "okgoes"
	ClientHost = "okgoes-operator"
)

// DefaultCacheLimitBytes bounds kopia's local cache when Options.CacheLimitBytes is zero.
const DefaultCacheLimitBytes = 512 << 20

const (
	configFileName = "repository.config" // kopia's connection file (holds the S3 credentials)
	cacheSubdir    = "cache"             // kopia removes this whole directory on a failed connect
)

var (
	// ErrWrongPassword means the prefix holds a repository that the password does not open.
	ErrWrongPassword = errors.New("wrong repository password")
	// ErrNotARepository means the prefix holds objects but no kopia repository, so Open
	// neither opens nor creates one there.
	ErrNotARepository = errors.New("the prefix holds objects but no kopia repository")
	// ErrNoRepository means the prefix holds nothing and Options.NoCreate forbade creating a
	// repository there (a restore or verify never does).
	ErrNoRepository = errors.New("the prefix holds no kopia repository")
)

// S3Config says where the repository is: the bucket of Config, under Prefix. Prefix is a key
// prefix; Open adds a trailing "/" to a non-empty one so that "a" and "ab" never overlap.
type S3Config struct {
	objectstore.Config
	Prefix string
}

// Options are the local side of a connection.
type Options struct {
	// CacheDir keeps kopia's config file and cache across runs (a cache volume), for one Repo
	// at a time; empty means a temporary directory that Close removes.
	CacheDir string
	// CacheLimitBytes is a hard bound on kopia's content and metadata caches, half each; zero
	// means DefaultCacheLimitBytes. kopia's index cache is not bounded by it: it grows with
	// the number of distinct chunks in the repository.
	CacheLimitBytes int64
	// Logger receives kopia's logs; nil discards them.
	Logger *zap.Logger
	// NoCreate makes Open fail with ErrNoRepository instead of creating a repository.
	NoCreate bool
	// KeyDerivation is kopia's name of the algorithm a repository Open creates derives its key
	// from the password with (KeyDerivationScrypt, KeyDerivationPBKDF2); empty means kopia's
	// default, scrypt. An existing repository keeps its own.
	KeyDerivation string
	// Splitter is kopia's name of the splitter a repository Open creates cuts files into chunks
	// with (one of Splitters); empty means DefaultSplitter. An existing repository keeps its own
	// (Repo.Splitter): chunks cut otherwise would not deduplicate against the ones it holds.
	Splitter string
	// NoDiskCache turns kopia's disk caches off, for a connection that reads snapshots back
	// (restore, verify): such a connection starts with an empty cache in a mover, and reads
	// each chunk once (the files of one chunk from packs held in memory, storage.go) and each
	// directory once per walk. kopia's cache wrote every chunk a restore read to disk, with an
	// HMAC: 20 % of the CPU of a restore. CacheLimitBytes is then unused.
	NoDiskCache bool
	// Guard watches and bounds every S3 call of the Repo (guard.go); zero: none.
	Guard Guard
	// Retention is the S3 Object Lock retention a repository Open creates locks its blobs with
	// (retention.go); the bucket must have object lock enabled. An existing repository keeps
	// its own (Repo.Retention).
	Retention Retention
	// PointInTime opens the repository read-only as the versioned bucket held it at that time
	// (kopia's point-in-time view: every blob's newest version not after it, unless that is a
	// delete marker). It reads a locked repository whose objects were deleted or overwritten
	// since: S3 Object Lock keeps the old versions, only hidden behind the newer ones. Only
	// with NoCreate.
	PointInTime *time.Time
}

// Repo is an open repository. Its methods may be called concurrently, except Maintenance with
// SafetyNone, which must be the only writer to the repository.
type Repo struct {
	rep     repo.Repository
	workDir string
	// packs holds the packs a restore or a verify reads file after file (storage.go).
	packs         *packWindow
	link          *storageLink
	removeWorkDir bool
	logger        *zap.Logger
	keyDerivation string // of the format blob Open read
	splitter      string // of the repository Open opened
	// reopen opens a second connection to the same repository that caches nothing on disk
	// (Heal's sampled read), with the password the repository has now (ChangePassword).
	reopen   func(ctx context.Context) (*Repo, error)
	password string
}

// Open opens the repository under the prefix, creating it when the prefix is empty. A wrong
// password gives ErrWrongPassword, a prefix holding other objects ErrNotARepository.
func Open(ctx context.Context, cfg S3Config, password string, opts Options) (_ *Repo, err error) {
	r := &Repo{workDir: opts.CacheDir, logger: opts.Logger, password: password}
	r.reopen = func(ctx context.Context) (*Repo, error) {
		return Open(ctx, cfg, r.password, Options{Logger: opts.Logger, NoCreate: true, NoDiskCache: true})
	}
	if r.workDir == "" {
		if r.workDir, err = os.MkdirTemp("", "kopiarepo-"); err != nil {
			return nil, err
		}
		r.removeWorkDir = true
	} else if err := os.MkdirAll(r.workDir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && r.removeWorkDir {
			_ = os.RemoveAll(r.workDir)
		}
	}()
	ctx = r.kopiaContext(ctx)

	// The storage kopia makes from the connection file is ours (storage.go), with this link.
	var linkName string
	r.link, linkName = newLink(opts.Guard, opts.NoDiskCache)
	r.packs = r.link.window
	defer unregisterLink(linkName)

	if err := opts.Retention.validate(); err != nil {
		return nil, err
	}
	if err := validSplitter(opts.Splitter); err != nil {
		return nil, err
	}
	if opts.PointInTime != nil && !opts.NoCreate {
		return nil, errors.New("a point-in-time view is read-only: open it with NoCreate")
	}
	s3opts := s3Options(cfg)
	s3opts.PointInTime = opts.PointInTime
	var st blob.Storage
	err = r.link.do(ctx, func(ctx context.Context) (err error) { // kopia checks the bucket here
		st, err = s3.New(ctx, s3opts, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("S3 storage %s/%s: %w", cfg.Bucket, cfg.Prefix, err)
	}
	defer st.Close(ctx) //nolint:errcheck // Open below makes its own storage from the config file
	st = &guardedStorage{Storage: st, link: r.link}
	ci := blob.ConnectionInfo{Type: storageType, Config: &storageOptions{Options: *s3opts, Link: linkName}}
	configFile := filepath.Join(r.workDir, configFileName)
	connect := func() (err error) {
		r.keyDerivation, err = writeConnection(ctx, configFile, st, ci, filepath.Join(r.workDir, cacheSubdir), opts)
		return err
	}
	created := false
	err = connect()
	if errors.Is(err, repo.ErrRepositoryNotInitialized) && opts.NoCreate {
		if err = ensureEmpty(ctx, st); err == nil {
			err = ErrNoRepository
		}
	} else if errors.Is(err, repo.ErrRepositoryNotInitialized) {
		if created, err = initialize(ctx, st, password, opts); err == nil {
			err = connect()
		}
	}
	if err != nil {
		return nil, classify(err)
	}

	r.rep, err = repo.Open(ctx, configFile, password, &repo.Options{
		// kopia's default is os.Exit(1); an error in a mover must end as an error, not a crash.
		OnFatalError: func(err error) { logging.Module("kopiarepo")(ctx).Errorf("kopia fatal error: %v", err) },
	})
	if err != nil {
		return nil, classify(err)
	}
	if dr, ok := r.rep.(repo.DirectRepository); ok {
		r.splitter = dr.ObjectFormat().Splitter
	}
	if created {
		if err := populate(ctx, r.rep, opts.Retention); err != nil {
			return nil, errors.Join(err, r.rep.Close(ctx))
		}
	}
	return r, nil
}

// Close closes the connection, and removes the work directory when Open made it.
func (r *Repo) Close(ctx context.Context) error {
	err := r.rep.Close(r.kopiaContext(ctx))
	if r.removeWorkDir {
		err = errors.Join(err, os.RemoveAll(r.workDir))
	}
	return err
}

// writeConnection writes kopia's connection file for the repository in st, naming ci as its
// storage (ours, storage.go), as repo.Connect does, without repo.Connect's check that the
// password opens it: that check is a whole repo.Open
// (deriving the key with scrypt, ~0.4 s of CPU here, and reading the indexes), and Open opens
// the repository right after anyway, failing there on a wrong password. It reports
// repo.ErrRepositoryNotInitialized when st holds no repository. kopia's caches go under
// cacheBase, in the repository's own subdirectory (repositoryCacheDir).
func writeConnection(ctx context.Context, configFile string, st blob.Storage, ci blob.ConnectionInfo, cacheBase string, opts Options) (keyDerivation string, _ error) {
	var formatBlob bytes.Buffer
	if err := st.GetBlob(ctx, format.KopiaRepositoryBlobID, 0, -1, bufferOutput{&formatBlob}); err != nil {
		if errors.Is(err, blob.ErrBlobNotFound) {
			return "", repo.ErrRepositoryNotInitialized
		}
		return "", fmt.Errorf("read the repository's format blob: %w", err)
	}
	f, err := format.ParseKopiaRepositoryJSON(formatBlob.Bytes())
	if err != nil {
		return "", fmt.Errorf("read the repository's format blob: %w", err)
	}
	caching := cachingOptions(repositoryCacheDir(cacheBase, f.UniqueID), opts)
	keyDerivation = f.KeyDerivationAlgorithm
	if keyDerivation == "" { // written by a kopia that recorded none: its default then, as kopia reads it
		keyDerivation = format.DefaultKeyDerivationAlgorithm
	}
	if caching.ContentCacheSizeBytes == 0 {
		// kopia caches nothing then (as repo.Connect does): v0.22.3 dereferences a nil cache
		// when a cache directory has no content cache.
		caching = content.CachingOptions{}
	}
	lc := repo.LocalConfig{
		Storage: &ci,
		Caching: &caching,
		ClientOptions: repo.ClientOptions{Username: ClientUser, Hostname: ClientHost}.
			ApplyDefaults(ctx, "Repository in "+st.DisplayName()),
	}
	b, err := json.MarshalIndent(lc, "", "  ")
	if err != nil {
		return "", err
	}
	return keyDerivation, os.WriteFile(configFile, b, 0o600)
}

// repositoryCacheDir is the cache directory of the repository whose format blob has uniqueID:
// a subdirectory of base named by it. kopia's cache holds the repository's format blob (with
// what its keys are derived from) and its contents by content id, and trusts them: a cache
// directory reused for another repository (a cache volume kept across runs of several
// PVCBackups) made kopia write the second repository with the first one's cached format, two
// successful backups of which the second could not be decrypted by a fresh restore. Keyed by
// the unique id, not by bucket and prefix: a repository deleted and created again at the same
// place is another repository.
func repositoryCacheDir(base string, uniqueID []byte) string {
	sum := sha256.Sum256(uniqueID)
	return filepath.Join(base, hex.EncodeToString(sum[:8]))
}

// bufferOutput is a bytes.Buffer as kopia's blob.OutputBuffer.
type bufferOutput struct{ *bytes.Buffer }

func (b bufferOutput) Length() int { return b.Len() }

// DefaultHash is the chunk hash of the repositories Open creates (an existing repository keeps
// the one it was created with). kopia's default, BLAKE2B-256-128, was the largest CPU cost of a
// first backup after the upload itself (24 % of the mover's CPU); `kopia benchmark hashing`
// ranks BLAKE3-256-128 first on the build machine, ~7 × faster (docs/benchmarks.md). The
// stock kopia CLI of the same version reads it.
const DefaultHash = "BLAKE3-256-128"

// The key derivations kopia offers for the password of a new repository, by kopia's names
// (`kopia repository create --format-block-key-derivation-algorithm`).
const (
	KeyDerivationScrypt = "scrypt-65536-8-1"     // kopia's default: memory-hard
	KeyDerivationPBKDF2 = "pbkdf2-sha256-600000" // cheaper per run; not memory-hard
)

// initialize creates a repository in an empty prefix. It reports false when another client
// created one there first (connecting then tells whether the password fits).
func initialize(ctx context.Context, st blob.Storage, password string, o Options) (bool, error) {
	if err := ensureEmpty(ctx, st); err != nil {
		return false, err
	}
	opts := &repo.NewRepositoryOptions{FormatBlockKeyDerivationAlgorithm: o.KeyDerivation,
		RetentionMode: blob.RetentionMode(o.Retention.Mode), RetentionPeriod: o.Retention.Period}
	opts.BlockFormat.Hash = DefaultHash
	opts.ObjectFormat.Splitter = cmp.Or(o.Splitter, DefaultSplitter)
	err := repo.Initialize(ctx, st, opts, password)
	if errors.Is(err, repo.ErrAlreadyInitialized) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create repository: %w", notLockable(err))
	}
	return true, nil
}

// populate stores what every client of a new repository expects, as `kopia repository create`
// does: the global policy and the maintenance owner; and a maintenance schedule whose first
// runs are one interval away (quick in an hour, full in a day). kopia's schedule of a new
// repository is empty, so the first backup's AutoMaintenance ran full maintenance: a garbage
// collection walk of the snapshot it had just written, which can collect nothing (SafetyFull
// keeps everything younger than 24 h): about 15 % of the first backup of 200,000 files, and the
// peak of its heap (docs/benchmarks.md).
func populate(ctx context.Context, rep repo.Repository, retention Retention) error {
	dr, ok := rep.(repo.DirectRepository)
	if !ok {
		return errors.New("creating a repository needs a direct connection")
	}
	return repo.DirectWriteSession(ctx, dr, repo.WriteSessionOptions{Purpose: "kopiarepo create"},
		func(ctx context.Context, w repo.DirectRepositoryWriter) error {
			if err := policy.SetPolicy(ctx, w, policy.GlobalPolicySourceInfo, policy.DefaultPolicy); err != nil {
				return fmt.Errorf("set the global policy: %w", err)
			}
			p := maintenance.DefaultParams()
			p.Owner = w.ClientOptions().UsernameAtHost()
			if err := lockedMaintenance(ctx, retention, &p); err != nil {
				return err
			}
			if err := maintenance.SetParams(ctx, w, &p); err != nil {
				return fmt.Errorf("set the maintenance owner: %w", err)
			}
			now := time.Now()
			first := &maintenance.Schedule{NextQuickMaintenanceTime: now.Add(p.QuickCycle.Interval),
				NextFullMaintenanceTime: now.Add(p.FullCycle.Interval)}
			if err := maintenance.SetSchedule(ctx, w, first); err != nil {
				return fmt.Errorf("set the maintenance schedule: %w", err)
			}
			return nil
		})
}

// ensureEmpty refuses to create a repository among objects that are not one (a prefix shared
// with the tar backups, or a typo that points at somebody else's data).
func ensureEmpty(ctx context.Context, st blob.Storage) error {
	errFound := errors.New("found a blob")
	err := st.ListBlobs(ctx, "", func(blob.Metadata) error { return errFound })
	if errors.Is(err, errFound) {
		return ErrNotARepository
	}
	if err != nil {
		return fmt.Errorf("list the prefix: %w", err)
	}
	return nil
}

func classify(err error) error {
	if errors.Is(err, repo.ErrInvalidPassword) {
		return fmt.Errorf("%w: %v", ErrWrongPassword, err)
	}
	return err
}

func s3Options(cfg S3Config) *s3.Options {
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &s3.Options{
		BucketName:      cfg.Bucket,
		Prefix:          prefix,
		Endpoint:        cfg.Endpoint,
		Region:          cfg.Region,
		DoNotUseTLS:     cfg.Insecure,
		RootCA:          cfg.CABundle,
		AccessKeyID:     cfg.AccessKey,
		SecretAccessKey: cfg.SecretKey,
	}
}

// cachingOptions splits the limit between content and metadata, as hard limits: kopia's soft
// limits are only enforced for entries older than their sweep age (24 h for metadata). A
// connection with Options.NoDiskCache caches nothing on disk.
func cachingOptions(dir string, opts Options) content.CachingOptions {
	if opts.NoDiskCache {
		return content.CachingOptions{}
	}
	limit := opts.CacheLimitBytes
	if limit <= 0 {
		limit = DefaultCacheLimitBytes
	}
	half := limit / 2
	return content.CachingOptions{
		CacheDirectory:              dir,
		ContentCacheSizeBytes:       half,
		ContentCacheSizeLimitBytes:  half,
		MetadataCacheSizeBytes:      half,
		MetadataCacheSizeLimitBytes: half,
	}
}

// kopiaContext carries the logger, which kopia takes from the context.
func (r *Repo) kopiaContext(ctx context.Context) context.Context {
	if r.logger == nil {
		return ctx
	}
	l := r.logger
	return logging.WithLogger(ctx, func(module string) logging.Logger { return l.Named(module).Sugar() })
}
