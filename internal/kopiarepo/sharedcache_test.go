package kopiarepo

import (
	"context"
	"path/filepath"
	"testing"
)

// Two repositories backed up, one after the other, through one reused cache directory (a cache
// volume kept across runs): each keeps its own cache, so neither is written with what kopia
// cached of the other (its format blob, its keys), and a fresh connection restores the second.
// Before the cache was keyed by repository, both backups reported success and the restore of the
// second failed to decrypt.
func TestTwoRepositoriesShareACacheDirectoryWithoutHarm(t *testing.T) {
	b := newBucket(t)
	ctx := testContext(t)
	cache := t.TempDir()
	backup := func(prefix, password string) (SnapshotInfo, string) {
		t.Helper()
		src := t.TempDir()
		writeVolume(t, src)
		writeFile(t, filepath.Join(src, "own", prefix+".bin"), randomBytes(t, 1<<20), 0o644)
		r, err := Open(ctx, b.config(prefix), password, Options{CacheDir: cache})
		if err != nil {
			t.Fatalf("open %s through the shared cache: %v", prefix, err)
		}
		snap, err := r.Backup(ctx, src, BackupOptions{Source: "shop/" + prefix})
		if err != nil {
			t.Fatalf("backup of %s: %v", prefix, err)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatalf("close %s: %v", prefix, err)
		}
		return snap, src
	}
	// One Secret's password for both, as two PVCBackups of one namespace have.
	backup("volumes/first", testPassword)
	second, src := backup("volumes/second", testPassword)

	// A restore as a new mover does it: its own fresh cache, only what the bucket holds.
	fresh := openRepo(t, b.config("volumes/second"), testPassword)
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := fresh.Restore(ctx, second.ID, dst); err != nil {
		t.Fatalf("restore of the second repository's backup with a fresh cache: %v", err)
	}
	assertSameTree(t, src, dst)
	if _, err := fresh.Verify(ctx, second.ID); err != nil {
		t.Errorf("verify of the second repository's backup: %v", err)
	}
}
