package kopiarepo

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Deleting a snapshot frees nothing by itself, nor does full maintenance at kopia's default
// safety (it keeps data unreferenced for less than 24 hours); full maintenance without the
// safety margins gives the space back at once, and the remaining snapshot still restores.
//
// Each backup writes 14 MiB, so that each fills a pack above kopia's "short pack" threshold (60%
// of 20 MiB): maintenance merges short packs, the deleted chunks with the live ones, and a merged
// pack that is more than 60% live is kept whole (docs/kopia.md, space reclamation).
func TestDeleteThenFullMaintenanceReclaimsSpace(t *testing.T) {
	const fileSize = 1 << 20
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	for i := range 14 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("old%d", i)), randomBytes(t, fileSize), 0o644)
	}
	old, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 14 { // the next day, every file is new
		writeFile(t, filepath.Join(src, fmt.Sprintf("old%d", i)), randomBytes(t, fileSize), 0o644)
	}
	kept, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app"})
	if err != nil {
		t.Fatal(err)
	}
	withBoth := b.bytesUnder(t, "volumes/app/")

	if err := r.Delete(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Maintenance(ctx, false, SafetyFull); err != nil {
		t.Fatal(err)
	}
	if err := r.Maintenance(ctx, true, SafetyFull); err != nil {
		t.Fatal(err)
	}
	afterSafe := b.bytesUnder(t, "volumes/app/")
	if afterSafe < withBoth-fileSize {
		t.Errorf("full maintenance at default safety freed %d bytes right after the delete; kopia's margins should keep them", withBoth-afterSafe)
	}

	if err := r.Maintenance(ctx, true, SafetyNone); err != nil {
		t.Fatal(err)
	}
	afterNone := b.bytesUnder(t, "volumes/app/")
	t.Logf("bucket: %d bytes with both snapshots, %d after delete + full maintenance (SafetyFull), %d after full maintenance (SafetyNone)", withBoth, afterSafe, afterNone)
	if freed := withBoth - afterNone; freed < 14*fileSize {
		t.Errorf("full maintenance without margins freed %d bytes, want at least the deleted snapshot's %d", freed, 14*fileSize)
	}

	list, err := r.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != kept.ID {
		t.Fatalf("list = %v, %v; want only %s", list, err, kept.ID)
	}
	if _, err := r.Verify(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := r.Restore(ctx, kept.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
}

// Small backups write short packs, which maintenance merges, the deleted chunks with the live
// ones. kopia never rewrites a lone short pack, so the space of a deleted snapshot merged that
// way comes back only once a later backup adds another short pack: the first full maintenance
// after it frees the space.
func TestSmallBackupsReclaimSpaceAfterTheNextBackup(t *testing.T) {
	const fileSize = 1 << 20
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/small"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	backup := func(files int) SnapshotInfo {
		t.Helper()
		for i := range files {
			writeFile(t, filepath.Join(src, fmt.Sprintf("f%d", i)), randomBytes(t, fileSize), 0o644)
		}
		snap, err := r.Backup(ctx, src, BackupOptions{Source: "shop/small"})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	fullNoMargins := func() int64 {
		t.Helper()
		if err := r.Maintenance(ctx, true, SafetyNone); err != nil {
			t.Fatal(err)
		}
		return b.bytesUnder(t, "volumes/small/")
	}

	old := backup(8)
	backup(8) // every file changed
	withBoth := b.bytesUnder(t, "volumes/small/")
	if err := r.Delete(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	first, second := fullNoMargins(), fullNoMargins()
	if first < withBoth-fileSize || second < withBoth-fileSize {
		t.Errorf("full maintenance freed %d then %d bytes of %d; kopia was expected to keep the merged pack whole", withBoth-first, withBoth-second, withBoth)
	}
	backup(1) // tomorrow's backup: one changed file, one more short pack
	after := fullNoMargins()
	t.Logf("bucket: %d bytes with both snapshots, %d and %d after two full runs, %d after the next backup and one more", withBoth, first, second, after)
	if after > withBoth-7*fileSize {
		t.Errorf("after the next backup and full maintenance the bucket holds %d bytes; want the deleted 8 MiB gone from %d", after, withBoth)
	}
}
