package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/format"
	"github.com/kopia/kopia/repo/maintenance"
)

// The S3 Object Lock modes of a repository's blob retention, by kopia's (and S3's) names.
const (
	RetentionGovernance = string(blob.Governance) // s3:BypassGovernanceRetention overrides it
	RetentionCompliance = string(blob.Compliance) // nothing overrides it until it expires
)

// MinRetentionPeriod is the shortest blob retention kopia accepts (format.BlobStorageConfiguration
// Validate), and lockMargin what it needs between a lock's period and the full maintenance
// interval that extends it (maintenance.CheckExtendRetention): a period of less than
// MinRetentionPeriod+lockMargin with kopia's daily full maintenance leaves blobs in use unlocked.
const (
	MinRetentionPeriod = 24 * time.Hour
	lockMargin         = 24 * time.Hour
)

// Retention is the S3 Object Lock retention of a repository's blobs (kopia's blob retention,
// its kopia.blobcfg blob): every pack, index and format blob is written locked for Period in
// Mode, and full maintenance extends the lock of every blob still in use by Period again. The
// zero Retention locks nothing.
type Retention struct {
	Mode   string // RetentionGovernance or RetentionCompliance
	Period time.Duration
}

// Enabled reports whether r locks anything.
func (r Retention) Enabled() bool { return r.Mode != "" && r.Period != 0 }

func (r Retention) String() string {
	if !r.Enabled() {
		return "no object lock"
	}
	return fmt.Sprintf("%s for %v", r.Mode, r.Period)
}

// ErrBucketNotLockable means the bucket refused a locked blob: it was created without object
// lock. Nothing was written.
var ErrBucketNotLockable = errors.New("the bucket has no object lock")

// notLockable is err as ErrBucketNotLockable when it is S3's refusal of a locked object by a
// bucket without object lock (MinIO and AWS say "Bucket is missing ObjectLockConfiguration").
func notLockable(err error) error {
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "objectlockconfiguration") {
		return fmt.Errorf("%w: %v", ErrBucketNotLockable, err)
	}
	return err
}

// ErrRetentionPeriod means a Retention is too short for kopia to keep the blobs in use locked.
var ErrRetentionPeriod = errors.New("the retention period must be at least 48h: kopia extends the locks in daily full maintenance and needs a day of margin")

// validate refuses a Retention kopia would refuse or could not keep.
func (r Retention) validate() error {
	if !r.Enabled() {
		return nil
	}
	if r.Mode != RetentionGovernance && r.Mode != RetentionCompliance {
		return fmt.Errorf("retention mode %q is not %s or %s", r.Mode, RetentionGovernance, RetentionCompliance)
	}
	if r.Period < MinRetentionPeriod+lockMargin {
		return fmt.Errorf("%w (got %v)", ErrRetentionPeriod, r.Period)
	}
	return nil
}

// lockedMaintenance is kopia's default maintenance parameters for a repository with retention
// r: with a lock, full maintenance extends the lock of every blob in use (kopia does not by
// default), which kopia allows only when the period exceeds the full interval by a day.
func lockedMaintenance(ctx context.Context, r Retention, p *maintenance.Params) error {
	if !r.Enabled() {
		return nil
	}
	p.ExtendObjectLocks = true
	cfg := format.BlobStorageConfiguration{RetentionMode: blob.RetentionMode(r.Mode), RetentionPeriod: r.Period}
	if err := maintenance.CheckExtendRetention(ctx, cfg, p); err != nil {
		return fmt.Errorf("extend object locks in maintenance: %w", err)
	}
	return nil
}

// Retention is the repository's blob retention, as its kopia.blobcfg blob says (read when the
// repository was opened); the zero Retention when its blobs are not locked.
func (r *Repo) Retention(ctx context.Context) (Retention, error) {
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return Retention{}, errors.New("retention needs a direct repository connection")
	}
	cfg, err := dr.FormatManager().BlobCfgBlob(r.kopiaContext(ctx))
	if err != nil {
		return Retention{}, fmt.Errorf("read the repository's blob retention: %w", err)
	}
	if !cfg.IsRetentionEnabled() {
		return Retention{}, nil
	}
	return Retention{Mode: string(cfg.RetentionMode), Period: cfg.RetentionPeriod}, nil
}
