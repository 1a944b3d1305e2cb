package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/fs/localfs"
)

// odditiesVolume is writeVolume plus what a volume may also hold: a FIFO, a socket, a hard
// link, a setuid file, a sticky setgid directory.
func odditiesVolume(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeVolume(t, dir)
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	// a socket's path must fit in 108 bytes: bind it from inside dir
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", "sock")
	os.Chdir(wd) //nolint:errcheck // back where the test started
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Link(filepath.Join(dir, "README"), filepath.Join(dir, "data", "hardlink")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "setuid"), []byte("x"), 0o755)
	if err := os.Chmod(filepath.Join(dir, "setuid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "shared"), os.ModeSticky|os.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The entries a backup reads are what kopia's localfs makes of the same volume, field for
// field: a snapshot through either is the same snapshot (kopia compares these fields with the
// previous snapshot's to decide what to read again).
func TestLocalTreeIsLocalfs(t *testing.T) {
	dir := odditiesVolume(t)
	ctx := context.Background()
	want, err := localfs.Directory(dir)
	if err != nil {
		t.Fatal(err)
	}
	live, err := localDirectory(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ahead := ReadAhead(dir)
	<-ahead.done // listed whole
	ahead.Stop()
	listed, err := localDirectory(dir, ahead)
	if err != nil {
		t.Fatal(err)
	}
	n := compareTrees(ctx, t, ".", want, live)
	if compareTrees(ctx, t, ".", want, listed) != n || n < 15 {
		t.Errorf("compared %d entries", n)
	}
	if _, err := live.Child(ctx, "does-not-exist"); !errors.Is(err, fs.ErrEntryNotFound) {
		t.Errorf("Child of a missing name: %v, want fs.ErrEntryNotFound", err)
	}
	for _, name := range []string{"README", "data", "dangling", "fifo"} {
		w, err := want.Child(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := live.Child(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		compareEntry(t, name, w, g)
	}
}

// compareTrees compares the entries of two directories, recursively, and returns how many.
func compareTrees(ctx context.Context, t *testing.T, rel string, want, got fs.Directory) int {
	t.Helper()
	compareEntry(t, rel, want, got)
	we, err := fs.GetAllEntries(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	ge, err := fs.GetAllEntries(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]fs.Entry{}
	for _, e := range ge {
		byName[e.Name()] = e
	}
	if len(ge) != len(we) {
		t.Errorf("%s: %d entries, want %d", rel, len(ge), len(we))
	}
	n := 1
	for _, w := range we {
		p := filepath.Join(rel, w.Name())
		g, ok := byName[w.Name()]
		if !ok {
			t.Errorf("%s: missing", p)
			continue
		}
		if wd, ok := w.(fs.Directory); ok {
			gd, ok := g.(fs.Directory)
			if !ok {
				t.Errorf("%s: %T, want a directory", p, g)
				continue
			}
			n += compareTrees(ctx, t, p, wd, gd)
			continue
		}
		compareEntry(t, p, w, g)
		n++
	}
	return n
}

func compareEntry(t *testing.T, rel string, want, got fs.Entry) {
	t.Helper()
	type fields struct {
		Name, Path    string
		Mode          os.FileMode
		Size          int64
		ModTime       int64
		IsDir         bool
		Owner         fs.OwnerInfo
		Device        fs.DeviceInfo
		Sys           any
		Dir, File     bool
		Symlink, Err  bool
		ErrorUnknown  bool
		Target        string
		Content       string
		OpenedEntry   string
		OpenedModTime int64
	}
	of := func(e fs.Entry) fields {
		f := fields{Name: e.Name(), Path: e.LocalFilesystemPath(), Mode: e.Mode(), Size: e.Size(), ModTime: e.ModTime().UnixNano(),
			IsDir: e.IsDir(), Owner: e.Owner(), Device: e.Device(), Sys: e.Sys()}
		_, f.Dir = e.(fs.Directory)
		_, f.Symlink = e.(fs.Symlink)
		if ee, ok := e.(fs.ErrorEntry); ok {
			f.Err, f.ErrorUnknown = true, errors.Is(ee.ErrorInfo(), fs.ErrUnknown)
		}
		if s, ok := e.(fs.Symlink); ok {
			f.Target, _ = s.Readlink(context.Background())
		}
		if file, ok := e.(fs.File); ok {
			f.File = true
			r, err := file.Open(context.Background())
			if err != nil {
				t.Fatalf("%s: open: %v", rel, err)
			}
			defer r.Close()
			data, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			f.Content = string(data)
			oe, err := r.Entry()
			if err != nil {
				t.Fatal(err)
			}
			f.OpenedEntry = oe.LocalFilesystemPath() + " " + oe.Mode().String() + " " + oe.Name()
			f.OpenedModTime = oe.ModTime().UnixNano()
		}
		return f
	}
	if w, g := of(want), of(got); w != g {
		t.Errorf("%s:\n got  %+v\n want %+v (localfs)", rel, g, w)
	}
}

// A directory listed ahead is read from the listing while it is unchanged, and from the
// volume again once entries were added to it or removed from it: a file removed after the
// listing is not looked for, a file created after it is backed up.
func TestReadAheadListingIsDroppedWhereTheDirectoryChanged(t *testing.T) {
	dir := t.TempDir()
	writeVolume(t, dir)
	ahead := ReadAhead(dir)
	<-ahead.done
	ahead.Stop()
	ctx := context.Background()
	for _, rel := range []string{".", "data", "data/deep/er", "empty-dir"} {
		ahead.mu.Lock()
		if _, ok := ahead.dirs[filepath.Join(dir, rel)]; !ok {
			t.Errorf("%s was not listed", rel)
		}
		ahead.mu.Unlock()
	}
	if err := os.Remove(filepath.Join(dir, "data", "big.bin")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "data", "new.txt"), []byte("new\n"), 0o644)
	root, err := localDirectory(dir, ahead)
	if err != nil {
		t.Fatal(err)
	}
	it, err := root.Iterate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := it.(*listedIterator); !ok {
		t.Errorf("the unchanged root was read with %T, want its listing", it)
	}
	it.Close()
	data, err := root.Child(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	it, err = data.(fs.Directory).Iterate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := it.(*listedIterator); ok {
		t.Error("data/ changed after it was listed, and was read from its listing")
	}
	it.Close()

	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	snap, err := r.Backup(testContext(t), dir, BackupOptions{Source: "shop/app", ReadAhead: ahead})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := r.Restore(testContext(t), snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, dir, dst)
}

// A volume backed up by an earlier version of the mover, through kopia's localfs, is found
// unchanged by the next backup: every file cached, none read again.
func TestLocalfsSnapshotIsThePrevious(t *testing.T) {
	dir := odditiesVolume(t)
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	ctx := testContext(t)
	sourceDirectory = func(path string, _ *Listing) (fs.Directory, error) { return localfs.Directory(path) }
	first, err := r.Backup(ctx, dir, BackupOptions{Source: "shop/app"})
	sourceDirectory = localDirectory
	if err != nil {
		t.Fatal(err)
	}
	var last BackupProgress
	second, err := r.Backup(ctx, dir, BackupOptions{Source: "shop/app", ReadAhead: ReadAhead(dir), Progress: func(p BackupProgress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	// cached: the files' bytes and the symlinks' lengths
	if last.HashedBytes != 0 || last.CachedBytes < first.TotalBytes || second.RootID != first.RootID {
		t.Errorf("after a localfs snapshot of %d bytes (root %s): hashed %d, cached %d bytes, root %s; want none hashed, all cached, the same root",
			first.TotalBytes, first.RootID, last.HashedBytes, last.CachedBytes, second.RootID)
	}
}

// The listing holds at most readAheadEntries entries: a directory with more than are left is
// not listed at all (never half), and the backup reads it from the volume.
func TestReadAheadStopsAtItsBudget(t *testing.T) {
	dir := t.TempDir()
	for i := range 30 {
		writeFile(t, filepath.Join(dir, "big", fmt.Sprintf("f%02d", i)), []byte{byte(i)}, 0o644)
	}
	writeFile(t, filepath.Join(dir, "small", "f"), []byte("x"), 0o644)
	defer func(n int) { readAheadEntries = n }(readAheadEntries)
	readAheadEntries = 20
	ahead := ReadAhead(dir)
	<-ahead.done
	ahead.Stop()
	ahead.mu.Lock()
	_, root := ahead.dirs[dir]
	_, big := ahead.dirs[filepath.Join(dir, "big")]
	ahead.mu.Unlock()
	if !root || big {
		t.Errorf("listed: root %v, big/ (30 entries, 18 left) %v; want the root only", root, big)
	}

	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	snap, err := r.Backup(testContext(t), dir, BackupOptions{Source: "shop/app", ReadAhead: ahead})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Files != 31 {
		t.Errorf("snapshot of %d files, want 31", snap.Files)
	}
}
