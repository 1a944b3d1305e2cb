package kopiarepo

import (
	"errors"
	"path/filepath"
	"testing"
)

// A volume backed up and restored comes back byte for byte: files, empty files, directories,
// symlinks (even dangling ones), modes and modification times; the snapshot says what it holds,
// and Verify reads all of it back from the bucket.
func TestBackupRestoresByteForByte(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/db"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	writeVolume(t, src)

	snap, err := r.Backup(ctx, src, BackupOptions{Source: "shop/db", Description: "nightly", Tags: map[string]string{"backup": "db-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Files != 5 || snap.Dirs != 6 || snap.Symlinks != 4 || snap.TotalBytes != 6+18+(3<<20+17)+5000 {
		t.Errorf("snapshot counts %d files, %d dirs, %d symlinks, %d bytes; want 5, 6 (with the root), 4, %d",
			snap.Files, snap.Dirs, snap.Symlinks, snap.TotalBytes, 6+18+(3<<20+17)+5000)
	}
	if snap.UploadedBytes < 3<<20 {
		t.Errorf("first backup uploaded %d bytes, less than the random file it holds", snap.UploadedBytes)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	stats, err := r.Restore(ctx, snap.ID, dst)
	if err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
	if stats.Files != 5 || stats.Symlinks != 4 || stats.Bytes != snap.TotalBytes {
		t.Errorf("restore stats %+v, want 5 files, 4 symlinks, %d bytes", stats, snap.TotalBytes)
	}

	verified, err := r.Verify(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	symlinkTargets := int64(len("README") + len("../bin/run.sh") + len("does/not/exist") + len("/etc/hostname"))
	if verified.Objects != 5+4 || verified.Bytes != snap.TotalBytes+symlinkTargets {
		t.Errorf("verify read %+v, want 5 files and 4 symlinks, %d bytes", verified, snap.TotalBytes+symlinkTargets)
	}

	list, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != snap.ID || list[0].Source != "shop/db" || list[0].Description != "nightly" ||
		list[0].Tags["backup"] != "db-1" || list[0].RootID != snap.RootID || list[0].TotalBytes != snap.TotalBytes {
		t.Errorf("list = %+v, want the one snapshot %+v", list, snap)
	}

	if _, err := r.Restore(ctx, "0123456789abcdef0123456789abcdef", t.TempDir()); !errors.Is(err, ErrSnapshotNotFound) {
		t.Errorf("restoring an unknown snapshot: %v, want ErrSnapshotNotFound", err)
	}
}

// Verify fails when a pack the snapshot needs was damaged in the bucket: it reads the data, it
// does not trust the index.
func TestVerifyReadsTheBucket(t *testing.T) {
	b := newBucket(t)
	cfg := b.config("volumes/db")
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := openRepo(t, cfg, testPassword).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for key := range b.objects(t, "volumes/db/p") { // data packs
		data := b.get(t, key)
		data[len(data)/2] ^= 0xff
		b.put(t, key, data)
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no data pack in the bucket")
	}
	// A fresh connection, so that no chunk comes from a local cache.
	if _, err := openRepo(t, cfg, testPassword).Verify(testContext(t), snap.ID); err == nil {
		t.Fatal("verify passed over a damaged pack")
	} else {
		t.Logf("verify after damage: %v", err)
	}
}
