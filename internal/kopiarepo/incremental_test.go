package kopiarepo

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// After one file of twenty changed, the second backup uploads about that file only, and the
// bucket grows by about as much; the second snapshot still restores the whole tree.
func TestSecondBackupUploadsOnlyWhatChanged(t *testing.T) {
	const files, fileSize = 20, 1 << 20
	b := newBucket(t)
	cfg := b.config("volumes/app")
	r := openRepo(t, cfg, testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	for i := range files {
		writeFile(t, filepath.Join(src, fmt.Sprintf("dir%d", i%4), fmt.Sprintf("file%02d", i)), randomBytes(t, fileSize), 0o644)
	}

	start := time.Now()
	first, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app"})
	if err != nil {
		t.Fatal(err)
	}
	firstTook := time.Since(start)
	afterFirst := b.bytesUnder(t, "volumes/app/")

	writeFile(t, filepath.Join(src, "dir1", "file05"), randomBytes(t, fileSize), 0o644)
	var progress []BackupProgress
	start = time.Now()
	second, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app", Progress: func(p BackupProgress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	secondTook := time.Since(start)
	afterSecond := b.bytesUnder(t, "volumes/app/")

	t.Logf("%d files of %d bytes: first backup uploaded %d bytes in %v (bucket %d bytes); after changing one file the second uploaded %d bytes in %v (bucket +%d bytes)",
		files, fileSize, first.UploadedBytes, firstTook.Round(time.Millisecond), afterFirst,
		second.UploadedBytes, secondTook.Round(time.Millisecond), afterSecond-afterFirst)
	if first.UploadedBytes < files*fileSize {
		t.Errorf("first backup uploaded %d bytes, less than its %d bytes of random data", first.UploadedBytes, files*fileSize)
	}
	if second.UploadedBytes > 2*fileSize || second.UploadedBytes < fileSize {
		t.Errorf("second backup uploaded %d bytes, want about the one changed file (%d)", second.UploadedBytes, fileSize)
	}
	if grew := afterSecond - afterFirst; grew > afterFirst/10 {
		t.Errorf("the bucket grew by %d bytes, more than a tenth of the first backup's %d", grew, afterFirst)
	}
	if second.TotalBytes != first.TotalBytes || second.Files != files {
		t.Errorf("second snapshot holds %d files, %d bytes; want %d, %d", second.Files, second.TotalBytes, files, first.TotalBytes)
	}
	if len(progress) == 0 {
		t.Error("no progress was reported")
	} else if last := progress[len(progress)-1]; last.UploadedBytes != second.UploadedBytes || last.HashedBytes < fileSize || last.CachedBytes < (files-1)*fileSize {
		t.Errorf("last progress %+v: want %d uploaded, the changed file hashed and the others cached", last, second.UploadedBytes)
	}

	dst := t.TempDir()
	if _, err := r.Restore(ctx, second.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
}

// An incremental backup's progress estimates the volume by the previous snapshot's size from
// its first report on: kopia's scan of the tree beside the upload, which would report the
// tree's current size, is left out (it doubled the lstat calls of a backup of many files).
func TestIncrementalProgressEstimatesFromThePreviousSnapshot(t *testing.T) {
	const fileSize = 1 << 20
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	for i := range 4 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("file%d", i)), randomBytes(t, fileSize), 0o644)
	}
	first, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app"})
	if err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(src, "new"), randomBytes(t, fileSize), 0o644)
	var progress []BackupProgress
	second, err := r.Backup(ctx, src, BackupOptions{Source: "shop/app", Progress: func(p BackupProgress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if second.TotalBytes != first.TotalBytes+fileSize {
		t.Fatalf("second snapshot holds %d bytes, want %d", second.TotalBytes, first.TotalBytes+fileSize)
	}
	if len(progress) == 0 {
		t.Fatal("no progress was reported")
	}
	for i, p := range progress {
		if p.EstimatedBytes != first.TotalBytes {
			t.Errorf("progress report %d estimates %d bytes, want the previous snapshot's %d", i, p.EstimatedBytes, first.TotalBytes)
		}
	}
}
