package kopiarepo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/compression"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/policy"
	"github.com/kopia/kopia/snapshot/upload"
)

// tagPrefix marks our tags among a snapshot's labels, as the kopia CLI's --tags does.
const tagPrefix = "tag:"

// cancelGrace is how long a canceled backup may go on saving what it uploaded before its S3
// calls are canceled too.
const cancelGrace = 30 * time.Second

// ErrSourceUnreadable is wrapped by the error of a backup that could not read the directory it
// backs up, or some entries of it: the fault is the volume's, not the repository's.
var ErrSourceUnreadable = errors.New("the source could not be read")

// BackupOptions describe one backup.
type BackupOptions struct {
	// Source names what is backed up (for instance "namespace/claim"). The snapshots of one
	// source form its incremental chain: a backup reads only files whose size or mtime changed
	// since the previous snapshot of the same source. Empty means the directory's absolute path.
	Source      string
	Description string
	Tags        map[string]string
	// Progress, when set, is called at most once per ProgressInterval while the backup runs,
	// and once at its end; never twice at the same time.
	Progress func(BackupProgress)
	// Compression is kopia's name of the compressor of the backup's new chunks (one of
	// Compressions); empty means DefaultCompression. It stays in the source's policy.
	Compression string
	// ReadAhead is the directory listed ahead (ReadAhead(dir)) while the repository was
	// opened, or nil. Backup stops it when it starts reading, and takes what it listed.
	ReadAhead *Listing
}

// ProgressInterval is the least time between two calls of BackupOptions.Progress.
const ProgressInterval = time.Second

// BackupProgress counts the bytes of a running backup.
type BackupProgress struct {
	// EstimatedBytes is the size of the files to back up: for an incremental backup, the size of
	// the previous snapshot; for a first one, once a scan beside the upload knows it.
	EstimatedBytes int64
	HashedBytes    int64 // bytes read and hashed
	CachedBytes    int64 // bytes of files unchanged since the previous snapshot, not read
	UploadedBytes  int64 // bytes written to the bucket: new chunks, compressed and encrypted, packed
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	ID          string
	Source      string
	Description string
	Tags        map[string]string
	StartTime   time.Time
	EndTime     time.Time
	TotalBytes  int64 // size of the files in the snapshot
	Files       int
	Dirs        int // with the root
	Symlinks    int
	// Skipped counts the entries of the tree a snapshot cannot hold (FIFOs, sockets, devices):
	// kopia leaves them out. Only Backup knows it, List reports zero.
	Skipped int
	// UploadedBytes is what the backup that made the snapshot wrote to the bucket (its new
	// chunks); only Backup knows it, List reports zero.
	UploadedBytes int64
	RootID        string // kopia object ID of the root directory
}

// Backup snapshots the directory tree at dir. A backup canceled through ctx returns ctx's
// error; what it uploaded by then is kept (as an incomplete snapshot that List does not show),
// so the next backup of the source does not upload it again.
func (r *Repo) Backup(ctx context.Context, dir string, opts BackupOptions) (SnapshotInfo, error) {
	ctx = r.kopiaContext(ctx)
	dir, err := filepath.Abs(dir)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if err := validCompression(opts.Compression); err != nil {
		return SnapshotInfo{}, err
	}
	if opts.ReadAhead == nil {
		opts.ReadAhead = emptyListing()
	}
	root, err := sourceDirectory(dir, opts.ReadAhead)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: %w", ErrSourceUnreadable, err)
	}
	source := opts.Source
	if source == "" {
		source = dir
	}
	si := snapshot.SourceInfo{UserName: ClientUser, Host: ClientHost, Path: source}

	// The session outlives ctx by cancelGrace, so that a canceled backup can save and flush
	// what it uploaded.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(cancelGrace, cancel) })
	defer stopGrace()

	prog := &progress{report: opts.Progress}
	var man *snapshot.Manifest
	err = repo.WriteSession(sctx, r.rep, repo.WriteSessionOptions{
		Purpose:  "kopiarepo backup",
		OnUpload: prog.uploadedBytes,
		// keep what a canceled backup uploaded: its incomplete snapshot references it
		FlushOnFailure: true,
	}, func(wctx context.Context, w repo.RepositoryWriter) error {
		if err := ensureKeepAllPolicy(wctx, w, si, opts.Compression); err != nil {
			return err
		}
		tree, err := policy.TreeForSource(wctx, w, si)
		if err != nil {
			return fmt.Errorf("policy of %s: %w", source, err)
		}
		previous, err := snapshot.FindPreviousManifests(wctx, w, si, nil)
		if err != nil {
			return fmt.Errorf("previous snapshots of %s: %w", source, err)
		}
		marks, err := healMarks(wctx, w)
		if err != nil {
			return err
		}
		if len(marks) > 0 {
			// Contents were dropped as lost or damaged (heal.go): files unchanged since the
			// previous snapshot may name them, so every file is read again, and what was
			// dropped uploaded again.
			previous = nil
		}

		prog.estimateFrom(previous)

		u := upload.NewUploader(w)
		u.DisableIgnoreRules = true
		u.FailFast = true
		u.Progress = prog
		// Cancel the upload rather than its S3 calls, so that it returns what it did.
		stop := context.AfterFunc(ctx, u.Cancel)
		defer stop()

		opts.ReadAhead.Stop()
		man, err = u.Upload(wctx, root, tree, si, previous...)
		if err != nil {
			return fmt.Errorf("upload %s: %w", dir, err)
		}
		if ctx.Err() != nil {
			return saveCanceled(wctx, w, man, ctx.Err())
		}
		if err := failedEntries(man); err != nil {
			return err
		}
		if man.IncompleteReason != "" {
			return fmt.Errorf("upload %s stopped: %s", dir, man.IncompleteReason)
		}
		man.Description = opts.Description
		man.Tags = map[string]string{}
		for k, v := range opts.Tags {
			man.Tags[tagPrefix+k] = v
		}
		if _, err := snapshot.SaveSnapshot(wctx, w, man); err != nil {
			return fmt.Errorf("save snapshot: %w", err)
		}
		for _, id := range marks { // this snapshot read every file: the repair is done
			if err := w.DeleteManifest(wctx, id); err != nil {
				return fmt.Errorf("delete repair mark %s: %w", id, err)
			}
		}
		return deleteIncomplete(wctx, w, si, man.StartTime)
	})
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (then: %v)", ctx.Err(), err) // a cancel may surface as an S3 error
	}
	if err != nil {
		return SnapshotInfo{}, r.storageFirst(ctx, err)
	}
	info := snapshotInfo(man)
	info.UploadedBytes = prog.uploaded.Load()
	info.Skipped = opts.ReadAhead.skipped()
	prog.flush()
	return info, nil
}

// storageFirst names an S3 failure as the cause of a backup's error: kopia records the files
// whose chunks it could not upload as entries it could not back up (failedEntries), which is
// the volume's fault only when S3 did not fail.
func (r *Repo) storageFirst(ctx context.Context, err error) error {
	s3err := r.link.failed()
	if s3err == nil || ctx.Err() != nil || errors.Is(err, ErrStorage) {
		return err
	}
	return fmt.Errorf("%w: %w (the backup then stopped: %v)", ErrStorage, s3err, err)
}

// StorageFailure is the first S3 call of the Repo that failed after kopia's retries, or nil:
// what to blame when a restore or a verify fails.
func (r *Repo) StorageFailure() error { return r.link.failed() }

// sourceDirectory is the directory a backup reads (localtree.go); tests make snapshots through
// kopia's localfs with it.
var sourceDirectory = localDirectory

// saveCanceled saves the incomplete snapshot of a canceled upload and returns cause.
func saveCanceled(ctx context.Context, w repo.RepositoryWriter, man *snapshot.Manifest, cause error) error {
	if man.RootEntry == nil {
		return cause
	}
	if _, err := snapshot.SaveSnapshot(ctx, w, man); err != nil {
		return errors.Join(cause, fmt.Errorf("save the incomplete snapshot: %w", err))
	}
	return cause
}

// failedEntries turns the entries the upload could not read into an error: kopia records them
// in the snapshot and carries on, and a backup with holes must not look like a backup.
func failedEntries(man *snapshot.Manifest) error {
	if man.Stats.ErrorCount == 0 {
		return nil
	}
	var paths []string
	if man.RootEntry != nil && man.RootEntry.DirSummary != nil {
		for _, e := range man.RootEntry.DirSummary.FailedEntries {
			paths = append(paths, e.EntryPath+": "+e.Error)
		}
	}
	return fmt.Errorf("%w: %d entries could not be backed up: %s", ErrSourceUnreadable, man.Stats.ErrorCount, strings.Join(paths, "; "))
}

// ensureKeepAllPolicy stores, for the source, a policy that keeps every snapshot and compresses
// with the compressor asked for (DefaultCompression when none). kopia applies a source's retention policy at each checkpoint of an
// upload (every 45 minutes), and its default keeps about ten recent snapshots: it would delete
// what the operator's catalog lists.
func ensureKeepAllPolicy(ctx context.Context, w repo.RepositoryWriter, si snapshot.SourceInfo, name string) error {
	p, err := policy.GetDefinedPolicy(ctx, w, si)
	if err != nil && !errors.Is(err, policy.ErrPolicyNotFound) {
		return fmt.Errorf("policy of %s: %w", si.Path, err)
	}
	if p == nil {
		p = &policy.Policy{}
	}
	compressor := cmp.Or(compression.Name(name), DefaultCompression)
	if keepsAll(p.RetentionPolicy) && p.CompressionPolicy.CompressorName == compressor {
		return nil
	}
	keep := policy.OptionalInt(math.MaxInt32)
	p.RetentionPolicy = policy.RetentionPolicy{
		KeepLatest: &keep, KeepHourly: &keep, KeepDaily: &keep,
		KeepWeekly: &keep, KeepMonthly: &keep, KeepAnnual: &keep,
	}
	p.CompressionPolicy.CompressorName = compressor
	if err := policy.SetPolicy(ctx, w, si, p); err != nil {
		return fmt.Errorf("set the policy of %s: %w", si.Path, err)
	}
	return nil
}

func keepsAll(rp policy.RetentionPolicy) bool {
	for _, k := range []*policy.OptionalInt{rp.KeepLatest, rp.KeepHourly, rp.KeepDaily, rp.KeepWeekly, rp.KeepMonthly, rp.KeepAnnual} {
		if k == nil || *k != math.MaxInt32 {
			return false
		}
	}
	return true
}

// deleteIncomplete removes the source's checkpoints and canceled snapshots started before a
// complete one: they only kept their data from garbage collection until then.
func deleteIncomplete(ctx context.Context, w repo.RepositoryWriter, si snapshot.SourceInfo, before fs.UTCTimestamp) error {
	mans, err := snapshot.ListSnapshots(ctx, w, si)
	if err != nil {
		return fmt.Errorf("list snapshots of %s: %w", si.Path, err)
	}
	for _, m := range mans {
		if m.IncompleteReason == "" || !m.StartTime.Before(before) {
			continue
		}
		if err := w.DeleteManifest(ctx, m.ID); err != nil {
			return fmt.Errorf("delete incomplete snapshot %s: %w", m.ID, err)
		}
	}
	return nil
}

func snapshotInfo(m *snapshot.Manifest) SnapshotInfo {
	info := SnapshotInfo{
		ID:          string(m.ID),
		Source:      m.Source.Path,
		Description: m.Description,
		StartTime:   m.StartTime.ToTime(),
		EndTime:     m.EndTime.ToTime(),
		RootID:      m.RootObjectID().String(),
	}
	// The summary of the root covers the whole tree; the upload's stats count only what it read.
	if m.RootEntry != nil && m.RootEntry.DirSummary != nil {
		ds := m.RootEntry.DirSummary
		info.TotalBytes, info.Files, info.Dirs, info.Symlinks = ds.TotalFileSize, int(ds.TotalFileCount), int(ds.TotalDirCount), int(ds.TotalSymlinkCount)
	}
	for k, v := range m.Tags {
		if name, ok := strings.CutPrefix(k, tagPrefix); ok {
			if info.Tags == nil {
				info.Tags = map[string]string{}
			}
			info.Tags[name] = v
		}
	}
	return info
}

// progress adapts kopia's upload progress events to BackupOptions.Progress.
type progress struct {
	upload.NullUploadProgress
	report                              func(BackupProgress)
	reportMu                            sync.Mutex // one call of report at a time
	estimated, hashed, cached, uploaded atomic.Int64
	lastReport                          atomic.Int64 // unix nanoseconds
	// estimatedFromPrevious: the estimate is the previous snapshot's size, and kopia scans
	// nothing for it.
	estimatedFromPrevious bool
}

// Enabled tells kopia's uploader whether to scan the tree beside the upload to estimate its
// size: only for a progress report, and only for a first backup. The scan lists every directory
// and lstats every file a second time: in a CPU profile of the second backup of 200,000 files
// after 1 % changed, it was a quarter of the backup's CPU (docs/benchmarks.md). An incremental
// backup takes the previous snapshot's size as its estimate instead (estimateFrom).
func (p *progress) Enabled() bool { return p.report != nil && !p.estimatedFromPrevious }

// estimateFrom takes the size of the latest complete snapshot among previous (kopia's previous
// manifests of the source) as the estimate, when there is one.
func (p *progress) estimateFrom(previous []*snapshot.Manifest) {
	for _, m := range previous {
		if m.IncompleteReason == "" && m.RootEntry != nil && m.RootEntry.DirSummary != nil {
			p.estimated.Store(m.RootEntry.DirSummary.TotalFileSize)
			p.estimatedFromPrevious = true
			return
		}
	}
}

func (p *progress) EstimatedDataSize(_, totalBytes int64) { p.estimated.Store(totalBytes) }

func (p *progress) HashedBytes(n int64) { p.hashed.Add(n); p.maybeReport() }

func (p *progress) CachedFile(_ string, n int64) { p.cached.Add(n); p.maybeReport() }

func (p *progress) uploadedBytes(n int64) { p.uploaded.Add(n); p.maybeReport() }

func (p *progress) maybeReport() {
	if p.report == nil {
		return
	}
	now := time.Now().UnixNano()
	last := p.lastReport.Load()
	if now-last < int64(ProgressInterval) || !p.lastReport.CompareAndSwap(last, now) {
		return
	}
	p.flush()
}

func (p *progress) flush() {
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	if p.report != nil {
		p.report(BackupProgress{EstimatedBytes: p.estimated.Load(), HashedBytes: p.hashed.Load(),
			CachedBytes: p.cached.Load(), UploadedBytes: p.uploaded.Load()})
	}
}
