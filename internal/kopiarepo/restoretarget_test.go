package kopiarepo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A restore into a volume that holds other entries at the snapshot's paths replaces them: a
// symlink where a file goes is replaced, not written through (the file it points to, here
// outside the target, keeps its content); a file where a directory goes, or where a symlink
// goes, is replaced too, and so is an empty directory where a file goes; a longer file is cut to the snapshot's length; entries the snapshot
// does not hold are left alone.
func TestRestoreReplacesWhatIsInTheWay(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/db"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := r.Backup(ctx, src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}

	outside := filepath.Join(t.TempDir(), "precious")
	writeFile(t, outside, []byte("not the volume's\n"), 0o644)
	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, "extra"), []byte("kept\n"), 0o600)
	if err := os.Symlink(outside, filepath.Join(dst, "README")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst, "bin"), []byte("a file where a directory goes\n"), 0o644)
	writeFile(t, filepath.Join(dst, "link-to-readme"), []byte("a file where a symlink goes\n"), 0o644)
	writeFile(t, filepath.Join(dst, "data", "big.bin"), randomBytes(t, 5<<20), 0o600)
	if err := os.Mkdir(filepath.Join(dst, "empty"), 0o755); err != nil { // an empty directory where a file goes
		t.Fatal(err)
	}

	if _, err := r.Restore(ctx, snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(outside); err != nil || string(got) != "not the volume's\n" {
		t.Errorf("the file a symlink in the target pointed to holds %q (%v): the restore wrote through the link", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "extra")); err != nil || string(got) != "kept\n" {
		t.Errorf("an entry the snapshot does not hold: %q (%v), want it kept", got, err)
	}
	if err := os.Remove(filepath.Join(dst, "extra")); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
}

// A directory with entries where the snapshot has a file stops the restore, with the path in
// the error, and keeps its entries.
func TestRestoreStopsAtADirectoryWhereAFileGoes(t *testing.T) {
	b := newBucket(t)
	cfg, snap := backedUpVolume(t, b, "volumes/db")
	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, "README", "notes"), []byte("mine\n"), 0o644)
	_, err := openRepo(t, cfg, testPassword).Restore(testContext(t), snap.ID, dst)
	if err == nil || !strings.Contains(err.Error(), "README") || !strings.Contains(err.Error(), "a directory with entries is in the way") {
		t.Fatalf("restore over a directory where a file goes: %v, want an error naming README", err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "README", "notes")); err != nil || string(got) != "mine\n" {
		t.Errorf("README/notes holds %q (%v), want it kept", got, err)
	}
}

// A restore from a damaged backup fails without having touched the files already at the
// snapshot's paths: a file's first chunk is read, and checked against its hash, before the
// file it replaces is removed (fails when writeRestoredFile creates the file first).
func TestDamagedBackupLeavesExistingFilesAlone(t *testing.T) {
	b := newBucket(t)
	cfg, snap := backedUpVolume(t, b, "volumes/db")
	damaged := 0
	for key := range b.objects(t, "volumes/db/p") { // data packs: every chunk in them
		data := b.get(t, key)
		for i := 0; i < len(data); i += 16 { // shorter than any encrypted chunk
			data[i] ^= 0xff
		}
		b.put(t, key, data)
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no data pack in the bucket")
	}
	dst := t.TempDir()
	mine := map[string]string{"README": "mine\n", "bin/run.sh": "#!/bin/sh\necho mine\n"}
	for name, content := range mine {
		writeFile(t, filepath.Join(dst, name), []byte(content), 0o644)
	}
	// A fresh connection, so that no chunk comes from a local cache.
	_, err := openRepo(t, cfg, testPassword).Restore(testContext(t), snap.ID, dst)
	if err == nil {
		t.Fatal("restore passed over a damaged pack")
	}
	t.Logf("restore after damage: %v", err)
	for name, content := range mine {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != content {
			t.Errorf("%s holds %q (%v) after the failed restore, want %q", name, got, err, content)
		}
	}
}

// A file restored chunk by chunk with its packs (largefiles.go) is created as the others: a
// symlink at its path is replaced, never written through, and when its chunks are damaged the
// file already at its path is left alone (each chunk is read and checked before the file is
// created). Fails when a piece opens the path as it is (written through the link), and when the
// file is created before its first chunk is read (the existing file emptied).
func TestALargeFileReplacesWhatIsInTheWayOnlyOnceReadable(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/large"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "db.0"), randomBytes(t, 12<<20), 0o600)
	r := openRepo(t, b.config(prefix), testPassword)
	snap, err := r.Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}

	outside := filepath.Join(t.TempDir(), "precious")
	writeFile(t, outside, []byte("not the volume's\n"), 0o644)
	dst := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dst, "db.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := openRepo(t, b.config(prefix), testPassword).Restore(testContext(t), snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(outside); err != nil || string(got) != "not the volume's\n" {
		t.Errorf("the file a symlink in the target pointed to holds %d bytes (%v): the restore wrote through the link", len(got), err)
	}
	assertSameTree(t, src, dst)

	for key := range b.objects(t, prefix+"/p") {
		data := b.get(t, key)
		for i := 0; i < len(data); i += 16 {
			data[i] ^= 0xff
		}
		b.put(t, key, data)
	}
	mine := filepath.Join(t.TempDir(), "db.0")
	writeFile(t, mine, []byte("mine\n"), 0o600)
	if _, err := openRepo(t, b.config(prefix), testPassword).Restore(testContext(t), snap.ID, filepath.Dir(mine)); err == nil {
		t.Fatal("restore passed over damaged packs")
	}
	if got, err := os.ReadFile(mine); err != nil || string(got) != "mine\n" {
		t.Errorf("db.0 holds %d bytes (%v) after the failed restore, want it as it was", len(got), err)
	}
}
