package kopiarepo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"
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
	cfg, snap := backedUpVolume(t, b, "volumes/db")
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

// A sparse file (a 64 MiB disk image holding 4 KiB) takes its 4 KiB in the bucket, and as little
// disk once restored: the restore does not fill the target volume with zeros.
func TestSparseFileStaysSparse(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/vm"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	image := filepath.Join(src, "disk.img")
	f, err := os.Create(image)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randomBytes(t, 4096), 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	snap, err := r.Backup(ctx, src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.UploadedBytes > 8<<20 {
		t.Errorf("backing up a 64 MiB file holding 4 KiB uploaded %d bytes", snap.UploadedBytes)
	}
	dst := t.TempDir()
	if _, err := r.Restore(ctx, snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "disk.img"), &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated > 8<<20 {
		t.Errorf("the restored 64 MiB image allocates %d bytes of disk, want it sparse", allocated)
	}
}

// Verify fails when a pack the snapshot needs is gone from the bucket, before reading it: the
// index alone does not make a backup.
func TestVerifyFailsOnAMissingPack(t *testing.T) {
	b := newBucket(t)
	cfg, snap := backedUpVolume(t, b, "volumes/db")
	removed := 0
	for key := range b.objects(t, "volumes/db/p") { // data packs
		if err := b.admin.RemoveObject(context.Background(), testBucket, key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		removed++
	}
	if removed == 0 {
		t.Fatal("no data pack in the bucket")
	}
	_, err := openRepo(t, cfg, testPassword).Verify(testContext(t), snap.ID)
	var damage *DamageError
	if !errors.As(err, &damage) || !damage.Missing || !strings.Contains(err.Error(), "packs are missing") ||
		!strings.Contains(err.Error(), "data/big.bin") {
		t.Fatalf("verify with the data packs deleted: %v, want a DamageError naming the missing packs and the files", err)
	}
}
