package archive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// oldTime has nanoseconds and predates the test run, so a restore that keeps "now" or rounds
// to seconds shows.
var oldTime = time.Date(1999, 12, 31, 23, 59, 58, 123456789, time.UTC)

const sparseSize = 2 << 30

// treeCounts is what Write must report for buildTree's tree.
type treeCounts struct{ files, dirs, symlinks, hardLinks int64 }

// buildTree makes a volume with everything a backup must keep. With sparse, it adds a 2 GiB
// file that is almost all hole.
func buildTree(t testing.TB, sparse bool) (string, treeCounts) {
	t.Helper()
	root := t.TempDir()
	var c treeCounts
	c.dirs = 1 // the root
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(rel string, mode fs.FileMode) {
		t.Helper()
		must(os.Mkdir(filepath.Join(root, rel), 0o700))
		must(os.Chmod(filepath.Join(root, rel), mode))
		c.dirs++
	}
	file := func(rel string, data []byte, mode fs.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		must(os.WriteFile(p, data, 0o600))
		must(os.Chmod(p, mode))
		c.files++
	}
	symlink := func(target, rel string) {
		t.Helper()
		must(os.Symlink(target, filepath.Join(root, rel)))
		c.symlinks++
	}

	mkdir("a", 0o755)
	mkdir("a/b", 0o750)
	mkdir("a/b/c", 0o700)
	mkdir("a/b/c/d", 0o755)
	mkdir("a/b/empty", 0o755)
	mkdir("empty", 0o700)
	mkdir("setgid", 0o775|fs.ModeSetgid)
	mkdir("sticky", 0o777|fs.ModeSticky|fs.ModeSetgid)

	random := make([]byte, 3<<20+17)
	rand.NewChaCha8([32]byte{7}).Read(random)
	file("a/b/c/d/random.bin", random, 0o640)
	file("a/zero-bytes", nil, 0o644)
	file("a/b/text.log", bytes.Repeat([]byte("level=info msg=\"backup\" volume=data\n"), 5000), 0o644)
	file("setuid-tool", []byte("#!/bin/sh\n"), 0o755|fs.ModeSetuid)
	file("setgid/inherits", []byte("g"), 0o644|fs.ModeSetgid)

	mkdir("modes", 0o755)
	for m := fs.FileMode(0); m <= 0o777; m++ {
		file(fmt.Sprintf("modes/%03o", m), []byte{byte(m), byte(m >> 8)}, m)
	}

	mkdir("ünïcødé", 0o755)
	file("ünïcødé/日本語ファイル.txt", []byte("konnichiwa"), 0o644)
	file("ünïcødé/e\u0301moji-🦫.txt", []byte("beaver"), 0o644)
	file("not-utf8-\xff\xfe", []byte("bytes"), 0o644)

	// Names over the 100 bytes of a plain tar header, and a path over 255 bytes.
	long := strings.Repeat("long-directory-name-", 6)
	mkdir(long, 0o755)
	mkdir(long+"/"+long, 0o755)
	file(long+"/"+long+"/"+strings.Repeat("f", 200), []byte("deep"), 0o644)

	// Three names for one inode, across directories.
	file("a/linked", []byte("shared inode"), 0o600)
	for _, n := range []string{"a/b/linked-2", "linked-3"} {
		must(os.Link(filepath.Join(root, "a/linked"), filepath.Join(root, n)))
		c.hardLinks++
	}

	symlink("b/text.log", "a/relative")
	symlink("/etc/hostname", "absolute")
	symlink("../nowhere/at/all", "a/dangling")
	symlink("a", "dir-link")

	// Owners other than ours, one beyond the 7 octal digits of a plain tar header.
	must(os.Chown(filepath.Join(root, "a/b/text.log"), 1234, 5678))
	must(os.Chown(filepath.Join(root, "a/b/c"), 4321, 8765))
	must(os.Chown(filepath.Join(root, "a/zero-bytes"), 3000000, 3000001))
	must(os.Lchown(filepath.Join(root, "a/relative"), 1111, 2222))

	if sparse {
		f, err := os.Create(filepath.Join(root, "sparse.img"))
		must(err)
		for _, off := range []int64{sparseSize / 2, sparseSize/2 + 3<<20, sparseSize - 5} {
			_, err := f.WriteAt([]byte("hello"), off)
			must(err)
		}
		must(f.Close())
		c.files++
	}

	// Old mtimes last, children before their directories, as creating children moves them.
	var paths []string
	must(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			paths = append(paths, p)
		}
		return err
	}))
	for i, p := range slices.Backward(paths) {
		ts := oldTime.Add(time.Duration(i) * 1001 * time.Nanosecond)
		must(os.Chtimes(p, ts, ts))
	}
	return root, c
}

// node is what a restore must reproduce of one path.
type node struct {
	mode     fs.FileMode
	size     int64
	mtime    time.Time
	uid, gid uint32
	nlink    uint64
	target   string // symlink
	sum      string // regular file content
	group    string // regular file: first name of its inode, for hard link structure
}

// snapshot describes every path under root. Content is hashed as it is read, so a 2 GiB
// sparse file costs no memory.
func snapshot(t testing.TB, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	firstName := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := fi.Sys().(*syscall.Stat_t)
		n := node{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime(), uid: sys.Uid, gid: sys.Gid, nlink: uint64(sys.Nlink)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if n.target, err = os.Readlink(p); err != nil {
				return err
			}
			n.mtime = time.Time{} // not restored
		case fi.Mode().IsRegular():
			if n.sum, err = fileSum(p); err != nil {
				return err
			}
			if _, ok := firstName[sys.Ino]; !ok {
				firstName[sys.Ino] = rel // WalkDir is lexical, like Write
			}
			n.group = firstName[sys.Ino]
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sameTree reports every difference between two snapshots.
func sameTree(t *testing.T, want, got map[string]node) {
	t.Helper()
	for _, rel := range slices.Sorted(maps.Keys(want)) {
		w := want[rel]
		g, ok := got[rel]
		switch {
		case !ok:
			t.Errorf("%q: missing after restore", rel)
		case g.mode != w.mode:
			t.Errorf("%q: mode %v, want %v", rel, g.mode, w.mode)
		case g != w:
			t.Errorf("%q:\n got %+v\nwant %+v", rel, g, w)
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%q: restored but not in the source", rel)
		}
	}
}

// crafted builds an archive by hand, as an attacker would. Regular files hold "evil".
func crafted(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		if h.Mode == 0 {
			h.Mode = 0o777
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte("evil")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
