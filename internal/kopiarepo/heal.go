package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/logging"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/snapshot/policy"
	"golang.org/x/sync/errgroup"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// A repository heals at the start of every backup (Heal), so that one lost or damaged blob
// costs the backups that depend on it, never the next one:
//
//   - A pack that no index names (its index blob, x…, was lost) has its contents indexed again
//     from the index every pack carries at its end (kopia's content.RecoverIndexFromPackBlob,
//     what `kopia index recover` runs): the snapshots and policies it holds come back.
//   - A content whose pack is missing (a lost p… or q… blob) or cut short, or that fails to
//     decrypt (a corrupt pack), is dropped from the index (marked deleted, as kopia's garbage
//     collection does): the manifests of the others load again (kopia loads every manifest
//     content at once and fails on one it cannot read), and the next write of the same content
//     uploads it again instead of deduplicating onto the damaged copy.
//   - Dropping contents leaves a mark in the repository (a manifest of type healMarkType) until
//     a backup succeeded: while one is there, a backup reads every file again instead of
//     taking unchanged files from the previous snapshot, whose objects may name the dropped
//     contents. A content uploaded again heals the older snapshots that name it too (contents
//     are found by hash).
//   - The global policy and the maintenance owner are written again when they were lost; the
//     source's policy is written by every backup anyway (ensureKeepAllPolicy).
//
// Corrupt contents are found by reading them: each Heal reads a slice of the repository's packs
// (VerifyPercent), whole, one GET each, and checks every content in them; the slice changes
// every day, so that every pack is read within 100/VerifyPercent days. Verify (spec.verify)
// drops the damaged contents it finds in the same way (Drop).
//
// No snapshot is ever deleted here: a snapshot that names lost data stays, and reads of it fail
// with a DamageError naming the contents and packs (the catalog reports such backups as broken).

// DefaultVerifyPercent is the share of the repository's packs each backup reads back whole and
// checks, content by content, before it uploads: 10 % of the repository's bytes per run, and
// every pack within 10 days (docs/kopia.md has its measured cost). Verify (spec.verify: true)
// stays the full check of one backup.
const DefaultVerifyPercent = 10.0

// EnvVerifyPercent overrides DefaultVerifyPercent (0 to 100): a knob for bench/ and tests to
// measure other values with, not a setting of the mover.
const EnvVerifyPercent = "KOPIAREPO_VERIFY_PERCENT"

// healMarkType labels the manifests Drop writes: "a backup must read every file again".
const healMarkType = "okgoes-heal"

// maxDamageListed bounds the contents and paths a DamageError names.
const maxDamageListed = 20

func init() {
	// kopia fails to load every manifest when one manifest content cannot be read, so a single
	// lost metadata blob hid every snapshot and policy. kopia's own escape hatch makes it skip
	// that content: the manifests it held are lost (Heal drops it from the index), the others
	// load. Set before any repository opens; an explicit setting is kept.
	if _, set := os.LookupEnv("KOPIA_IGNORE_MALFORMED_MANIFEST_CONTENTS"); !set {
		_ = os.Setenv("KOPIA_IGNORE_MALFORMED_MANIFEST_CONTENTS", "1") //nolint:errcheck // cannot fail for this name
	}
}

// ErrDamaged is what a DamageError is (IsDamaged): contents of the repository are lost or do
// not decrypt.
var ErrDamaged = errors.New("the kopia repository is damaged")

// DamageError names contents of the repository that are lost or cannot be read, the packs
// holding them, and (from a read of a snapshot) the paths of files that need them.
type DamageError struct {
	Contents []content.ID
	Packs    []blob.ID
	Paths    []string
	// Missing: at least one pack does not exist; otherwise the packs exist and hold contents
	// that do not decrypt (corrupt or cut short).
	Missing bool

	seen map[content.ID]bool // Contents, as a set
}

func (e *DamageError) Error() string {
	what := "that do not decrypt (a corrupt pack)"
	if e.Missing {
		what = "whose packs are missing from the bucket"
	}
	msg := fmt.Sprintf("%v: contents %s: %d, in packs %s", ErrDamaged, what, len(e.Contents), listed(e.Packs))
	if len(e.Paths) > 0 {
		msg += "; files " + listed(e.Paths)
	}
	return msg
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// add records a damaged content (pack missing or not) and the path that needs it.
func (e *DamageError) add(ci content.Info, missing bool, path string) {
	if e.seen == nil {
		e.seen = map[content.ID]bool{}
	}
	if !e.seen[ci.ContentID] {
		e.seen[ci.ContentID] = true
		e.Contents = append(e.Contents, ci.ContentID)
	}
	if !slices.Contains(e.Packs, ci.PackBlobID) {
		e.Packs = append(e.Packs, ci.PackBlobID)
	}
	if path != "" && !slices.Contains(e.Paths, path) {
		e.Paths = append(e.Paths, path)
	}
	e.Missing = e.Missing || missing
}

func listed[T ~string](items []T) string {
	s := make([]string, 0, min(len(items), maxDamageListed))
	for _, it := range items[:min(len(items), maxDamageListed)] {
		s = append(s, string(it))
	}
	if len(items) > maxDamageListed {
		s = append(s, fmt.Sprintf("and %d more", len(items)-maxDamageListed))
	}
	return strings.Join(s, ", ")
}

// HealReport says what Heal found and repaired.
type HealReport struct {
	// RecoveredPacks had no index; their contents were indexed again from the packs.
	RecoveredPacks []blob.ID
	// Dropped are the contents found lost or damaged and dropped from the index, with their
	// packs: what depends on them is unreadable until a backup uploads them again.
	Dropped *DamageError
	// GlobalPolicyRewritten: the global policy had been lost and was written again.
	GlobalPolicyRewritten bool
	// MaintenanceOwnerRewritten: the maintenance parameters (the owner) had been lost and were
	// written again, owned by ClientUser@ClientHost.
	MaintenanceOwnerRewritten bool
	// ReadPacks and ReadBytes are what the sampled verification read.
	ReadPacks int
	ReadBytes int64
}

// String says what was repaired, or "" when nothing was.
func (h HealReport) String() string {
	var parts []string
	if n := len(h.RecoveredPacks); n > 0 {
		parts = append(parts, fmt.Sprintf("rebuilt the lost index of %d packs (%s)", n, listed(h.RecoveredPacks)))
	}
	if h.Dropped != nil {
		parts = append(parts, "dropped from the index, to be uploaded again: "+h.Dropped.Error())
	}
	if h.GlobalPolicyRewritten {
		parts = append(parts, "wrote the lost global policy again")
	}
	if h.MaintenanceOwnerRewritten {
		parts = append(parts, "wrote the lost maintenance owner again")
	}
	return strings.Join(parts, "; ")
}

// HealOptions tune Heal.
type HealOptions struct {
	// VerifyPercent is the share of packs read back (0 to 100); negative reads none; zero means
	// DefaultVerifyPercent (or EnvVerifyPercent).
	VerifyPercent float64
	// Now chooses the day's slice of packs; zero is time.Now.
	Now time.Time
	// Progress, when set, is called with the bytes read so far after each pack read.
	Progress func(readBytes int64)
}

// Heal repairs what a lost or damaged blob did to the repository (see above), for a backup that
// follows on the same connection. It fails only when S3 fails; damage is repaired and reported.
func (r *Repo) Heal(ctx context.Context, opts HealOptions) (HealReport, error) {
	ctx = r.kopiaContext(ctx)
	var rep HealReport
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return rep, errors.New("healing needs a direct repository connection")
	}
	blobs, err := blob.ReadBlobMap(ctx, dr.BlobReader())
	if err != nil {
		return rep, fmt.Errorf("list the repository's blobs: %w", err)
	}
	if rep.RecoveredPacks, err = r.recoverIndexes(ctx, dr, blobs); err != nil {
		return rep, err
	}
	damage, err := r.scanContents(ctx, dr, blobs)
	if err != nil {
		return rep, err
	}
	if err := r.sampleRead(ctx, dr, blobs, opts, damage, &rep); err != nil {
		return rep, err
	}
	if len(damage.Contents) > 0 {
		if err := r.Drop(ctx, damage); err != nil {
			return rep, err
		}
		rep.Dropped = damage
	}
	if rep.GlobalPolicyRewritten, err = r.ensureGlobalPolicy(ctx); err != nil {
		return rep, err
	}
	if rep.MaintenanceOwnerRewritten, err = r.ensureMaintenanceOwner(ctx, dr); err != nil {
		return rep, err
	}
	return rep, nil
}

// recoverIndexes indexes again the contents of the packs in blobs that no index entry names: a
// pack whose index blob was lost (or one a killed backup wrote and never indexed, which is as
// good). Superseded entries of a pack that maintenance emptied lose to the newer ones (kopia
// keeps the newest entry of a content).
func (r *Repo) recoverIndexes(ctx context.Context, dr repo.DirectRepository, blobs map[blob.ID]blob.Metadata) ([]blob.ID, error) {
	indexed := map[blob.ID]bool{}
	err := dr.ContentReader().IterateContents(ctx, content.IterateOptions{IncludeDeleted: true}, func(ci content.Info) error {
		indexed[ci.PackBlobID] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the index: %w", err)
	}
	var orphans []blob.Metadata
	for id, m := range blobs {
		if isPack(id) && !indexed[id] {
			orphans = append(orphans, m)
		}
	}
	if len(orphans) == 0 {
		return nil, nil
	}
	var recovered []blob.ID
	err = r.directWrite(ctx, dr, "kopiarepo recover index", func(ctx context.Context, w repo.DirectRepositoryWriter) error {
		for _, m := range orphans {
			infos, err := w.ContentManager().RecoverIndexFromPackBlob(ctx, m.BlobID, m.Length, true)
			switch {
			case err != nil && (ctx.Err() != nil || objectstore.IsNetworkError(err)):
				return fmt.Errorf("recover the index of pack %s: %w", m.BlobID, err)
			case err != nil: // not a pack kopia can read (cut short, corrupt): nothing to recover
				logf(ctx, "pack %s has no index and no readable local index: %v", m.BlobID, err)
			case len(infos) > 0:
				recovered = append(recovered, m.BlobID)
			}
		}
		return nil
	})
	return recovered, err
}

// isPack says whether the blob is a pack of contents (p… data, q… metadata).
func isPack(id blob.ID) bool {
	for _, p := range content.PackBlobIDPrefixes {
		if strings.HasPrefix(string(id), string(p)) {
			return true
		}
	}
	return false
}

// scanContents finds the indexed contents whose pack is missing or shorter than the index says,
// and the manifest contents that cannot be read (kopia reads all of them at the first use of a
// manifest anyway, and a damaged one hides what it holds).
func (r *Repo) scanContents(ctx context.Context, dr repo.DirectRepository, blobs map[blob.ID]blob.Metadata) (*DamageError, error) {
	damage := &DamageError{}
	unlisted := map[blob.ID][]content.Info{}
	var manifests []content.Info
	err := dr.ContentReader().IterateContents(ctx, content.IterateOptions{}, func(ci content.Info) error {
		m, ok := blobs[ci.PackBlobID]
		switch {
		case !ok:
			unlisted[ci.PackBlobID] = append(unlisted[ci.PackBlobID], ci)
		case int64(ci.PackOffset)+int64(ci.PackedLength) > m.Length:
			damage.add(ci, false, "")
		case ci.ContentID.Prefix() == manifest.ContentPrefix:
			manifests = append(manifests, ci)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the index: %w", err)
	}
	if err := confirmMissing(ctx, dr, unlisted, damage); err != nil {
		return nil, err
	}
	for _, ci := range manifests {
		if err := readContent(ctx, dr, ci, damage); err != nil {
			return nil, err
		}
	}
	return damage, nil
}

// confirmMissing asks S3 once more about each pack the listing did not show, and adds the
// contents of those it does not hold to damage: no content is dropped for a listing that
// missed a pack (or one written since by another client).
func confirmMissing(ctx context.Context, dr repo.DirectRepository, unlisted map[blob.ID][]content.Info, damage *DamageError) error {
	for pack, infos := range unlisted {
		_, err := dr.BlobReader().GetMetadata(ctx, pack)
		switch {
		case errors.Is(err, blob.ErrBlobNotFound):
			for _, ci := range infos {
				damage.add(ci, true, "")
			}
		case err != nil:
			return fmt.Errorf("stat pack %s: %w", pack, err)
		}
	}
	return nil
}

// readContent reads the content (kopia decrypts it and checks its hash) and adds it to damage
// when it cannot be read; an error of S3 or of ctx is returned instead.
func readContent(ctx context.Context, dr repo.DirectRepository, ci content.Info, damage *DamageError) error {
	_, err := dr.ContentReader().GetContent(ctx, ci.ContentID)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case objectstore.IsNetworkError(err):
		return fmt.Errorf("read content %s: %w", ci.ContentID, err)
	}
	damage.add(ci, errors.Is(err, blob.ErrBlobNotFound), "")
	return nil
}

// verifyPercent is the share of packs a Heal reads.
func verifyPercent(opt float64) float64 {
	if opt != 0 {
		return min(opt, 100)
	}
	if s := os.Getenv(EnvVerifyPercent); s != "" {
		var p float64
		if _, err := fmt.Sscan(s, &p); err == nil && p >= 0 {
			return min(p, 100)
		}
	}
	return DefaultVerifyPercent
}

// daySlice says whether the pack is in the day's slice of 1/n of the packs: every pack is in
// one slice of n consecutive days.
func daySlice(pack blob.ID, now time.Time, n int) bool {
	if n <= 1 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(pack)) //nolint:errcheck // a hash does not fail
	day := now.Unix() / 86400
	return int64(h.Sum32()%uint32(n)) == day%int64(n) //nolint:gosec // n is at most 100
}

// sampleRead reads the day's slice of the packs whole, one GET each held in memory, and every
// content in them (decrypted and checked against its hash by kopia), adding what fails to damage.
func (r *Repo) sampleRead(ctx context.Context, dr repo.DirectRepository, blobs map[blob.ID]blob.Metadata, opts HealOptions,
	damage *DamageError, rep *HealReport) error {
	pct := verifyPercent(opts.VerifyPercent)
	if pct <= 0 {
		return nil
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	n := int(100/pct + 0.5)
	byPack := map[blob.ID][]content.Info{}
	err := dr.ContentReader().IterateContents(ctx, content.IterateOptions{}, func(ci content.Info) error {
		if _, ok := blobs[ci.PackBlobID]; ok && daySlice(ci.PackBlobID, now, n) {
			byPack[ci.PackBlobID] = append(byPack[ci.PackBlobID], ci)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the index: %w", err)
	}
	if len(byPack) == 0 {
		return nil
	}
	// A connection of its own, without kopia's disk cache, which would keep a copy of every
	// content read (with an HMAC each: the largest cost of reading many small contents).
	reader, err := r.reopen(ctx)
	if err != nil {
		return fmt.Errorf("open the repository for the sampled read: %w", err)
	}
	defer reader.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	rdr, ok := reader.rep.(repo.DirectRepository)
	if !ok {
		return errors.New("the sampled read needs a direct repository connection")
	}
	var mu sync.Mutex
	for pack, infos := range byPack {
		if err := reader.packs.hold(ctx, rdr.BlobReader(), pack, blobs[pack].Length); err != nil && (ctx.Err() != nil || objectstore.IsNetworkError(err)) {
			return fmt.Errorf("read pack %s: %w", pack, err)
		} // otherwise each content is read by itself, and reports what is wrong
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(restoreParallelism())
		for _, ci := range infos {
			g.Go(func() error {
				local := &DamageError{}
				if err := readContent(gctx, rdr, ci, local); err != nil {
					return err
				}
				if len(local.Contents) > 0 {
					mu.Lock()
					damage.add(ci, local.Missing, "")
					mu.Unlock()
				}
				return nil
			})
		}
		err := g.Wait()
		reader.packs.release(pack)
		if err != nil {
			return err
		}
		rep.ReadPacks++
		rep.ReadBytes += blobs[pack].Length
		if opts.Progress != nil {
			opts.Progress(rep.ReadBytes)
		}
	}
	return nil
}

// Drop marks the damaged contents deleted in the index, so that the next write of each uploads
// it again, and marks the repository so that the next Backup reads every file again (a backup
// would otherwise take unchanged files, and the contents they name, from the previous snapshot).
// Data already lost stays lost; no snapshot is deleted.
func (r *Repo) Drop(ctx context.Context, damage *DamageError) error {
	ctx = r.kopiaContext(ctx)
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return errors.New("dropping contents needs a direct repository connection")
	}
	err := r.directWrite(ctx, dr, "kopiarepo drop damaged contents", func(ctx context.Context, w repo.DirectRepositoryWriter) error {
		for _, id := range damage.Contents {
			if err := w.ContentManager().DeleteContent(ctx, id); err != nil && !errors.Is(err, content.ErrContentNotFound) {
				return fmt.Errorf("drop content %s: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A second session: the manifests load from the index the first one wrote.
	return r.directWrite(ctx, dr, "kopiarepo heal mark", func(ctx context.Context, w repo.DirectRepositoryWriter) error {
		mark := healMark{Time: time.Now().UTC(), Damage: damage.Error()}
		if _, err := w.PutManifest(ctx, map[string]string{manifest.TypeLabelKey: healMarkType}, &mark); err != nil {
			return fmt.Errorf("mark the repository for a full read: %w", err)
		}
		return nil
	})
}

// healMark is the payload of a healMarkType manifest.
type healMark struct {
	Time   time.Time `json:"time"`
	Damage string    `json:"damage"`
}

// healMarks are the marks Drop left, which the next complete backup removes.
func healMarks(ctx context.Context, rep repo.Repository) ([]manifest.ID, error) {
	mds, err := rep.FindManifests(ctx, map[string]string{manifest.TypeLabelKey: healMarkType})
	if err != nil {
		return nil, fmt.Errorf("find repair marks: %w", err)
	}
	ids := make([]manifest.ID, 0, len(mds))
	for _, md := range mds {
		ids = append(ids, md.ID)
	}
	return ids, nil
}

// ensureGlobalPolicy writes the global policy again when it is not there (lost with its blob),
// as `kopia repository create` wrote it; it reports whether it did.
func (r *Repo) ensureGlobalPolicy(ctx context.Context) (bool, error) {
	_, err := policy.GetDefinedPolicy(ctx, r.rep, policy.GlobalPolicySourceInfo)
	if !errors.Is(err, policy.ErrPolicyNotFound) {
		if err != nil {
			return false, fmt.Errorf("global policy: %w", err)
		}
		return false, nil
	}
	err = repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "kopiarepo global policy"},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			return policy.SetPolicy(ctx, w, policy.GlobalPolicySourceInfo, policy.DefaultPolicy)
		})
	if err != nil {
		return false, fmt.Errorf("write the global policy: %w", err)
	}
	return true, nil
}

// ensureMaintenanceOwner writes the maintenance parameters again, owned by this client, when
// they were lost with their blob: kopia then reads no owner, and no client may run maintenance
// ("owned by another client: "). An owner that is there, ours or a person's CLI, is kept. In a
// locked repository (Retention) the new parameters extend the locks, as populate's do.
func (r *Repo) ensureMaintenanceOwner(ctx context.Context, dr repo.DirectRepository) (bool, error) {
	p, err := maintenance.GetParams(ctx, r.rep)
	if err != nil {
		return false, fmt.Errorf("maintenance parameters: %w", err)
	}
	if p.Owner != "" {
		return false, nil
	}
	retention, err := r.Retention(ctx)
	if err != nil {
		return false, err
	}
	err = r.directWrite(ctx, dr, "kopiarepo maintenance owner", func(ctx context.Context, w repo.DirectRepositoryWriter) error {
		p := maintenance.DefaultParams()
		p.Owner = w.ClientOptions().UsernameAtHost()
		if err := lockedMaintenance(ctx, retention, &p); err != nil {
			// a period kopia cannot extend (a repository made outside the operator): its
			// blobs stay locked for the period after they were written, as kopia's default
			logf(ctx, "repository with %v: %v", retention, err)
			p.ExtendObjectLocks = false
		}
		return maintenance.SetParams(ctx, w, &p)
	})
	if err != nil {
		return false, fmt.Errorf("write the maintenance owner: %w", err)
	}
	return true, nil
}

// directWrite runs fn in a write session of the direct connection, flushed at its end.
func (r *Repo) directWrite(ctx context.Context, dr repo.DirectRepository, purpose string,
	fn func(context.Context, repo.DirectRepositoryWriter) error) error {
	return repo.DirectWriteSession(ctx, dr, repo.WriteSessionOptions{Purpose: purpose}, fn) //nolint:wrapcheck // fn's errors say what failed
}

// logf logs through kopia's logger of the context.
func logf(ctx context.Context, format string, args ...any) {
	logging.Module("kopiarepo")(ctx).Warnf(format, args...)
}
