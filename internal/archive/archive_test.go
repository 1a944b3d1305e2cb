package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// tree builds a volume with everything a backup must keep.
func tree(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	old := time.Date(1999, 12, 31, 23, 59, 58, 123456789, time.UTC)
	mk := func(rel string, data []byte, mode fs.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	random := make([]byte, 3<<20+17)
	rand.NewChaCha8([32]byte{7}).Read(random)
	mk("db/random.bin", random, 0o640)
	mk("db/empty", nil, 0o600)
	mk("secret/none", []byte("unreadable by others"), 0o000)
	mk("bin/tool", []byte("#!/bin/sh\n"), 0o4755|fs.ModeSetuid)
	for m := fs.FileMode(0); m <= 0o777; m += 0o111 {
		mk(fmt.Sprintf("modes/%03o", m), []byte{byte(m)}, m)
	}
	mk("ünïcødé/日本語ファイル.txt", []byte("konnichiwa"), 0o644)
	long := strings.Repeat("long-directory-name-", 8)
	mk(filepath.Join(long, long, strings.Repeat("f", 200)), []byte("deep"), 0o644)
	// Hard links: three names, one inode.
	mk("links/a", []byte("shared"), 0o644)
	for _, n := range []string{"links/b", "links/c"} {
		if err := os.Link(filepath.Join(root, "links/a"), filepath.Join(root, n)); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"links/rel": "a", "links/abs": "/etc/hostname", "links/dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	// A 2 GiB sparse file with data in the middle and at the end.
	f, err := os.Create(filepath.Join(root, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{1 << 30, 2<<30 - 5} {
		if _, err := f.WriteAt([]byte("hello"), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	for _, d := range []string{"empty-dir", "sticky"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "sticky"), 0o777|fs.ModeSticky|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"empty-dir", "db", "sticky"} {
		if err := os.Chtimes(filepath.Join(root, d), old, old); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// entry is what a restore must reproduce of one path.
type entry struct {
	mode    fs.FileMode
	size    int64
	mtime   time.Time
	link    string
	content string
	inode   string // which hard-link group (the first path of the group)
}

func snapshot(t testing.TB, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	groups := map[uint64]string{}
	paths := []string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		return nil
	})
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		e := entry{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.link, _ = os.Readlink(p)
			e.mtime = time.Time{} // symlink times are not restored
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			e.content = hex.EncodeToString(sum[:])
			ino := fi.Sys().(*syscall.Stat_t).Ino
			if _, ok := groups[ino]; !ok {
				groups[ino] = rel
			}
			e.inode = groups[ino]
		}
		out[rel] = e
	}
	return out
}

func TestRoundTripKeepsEverything(t *testing.T) {
	src := tree(t)
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	rs, err := Read(context.Background(), bytes.NewReader(buf.Bytes()), dst, ReadOptions{Chown: true})
	if err != nil {
		t.Fatal(err)
	}
	if ws != rs {
		t.Errorf("stats differ:\nwrite %+v\nread  %+v", ws, rs)
	}
	if ws.HardLinks != 2 || ws.Symlinks != 3 || ws.Skipped != 0 || ws.Changed != 0 {
		t.Errorf("stats: %+v", ws)
	}
	want, got := snapshot(t, src), snapshot(t, dst)
	for rel, w := range want {
		g, ok := got[rel]
		switch {
		case !ok:
			t.Errorf("%s: missing after restore", rel)
		case g.mode != w.mode || g.size != w.size || !g.mtime.Equal(w.mtime) || g.link != w.link || g.content != w.content || g.inode != w.inode:
			t.Errorf("%s:\nwant %+v\ngot  %+v", rel, w, g)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restored %d paths, want %d", len(got), len(want))
	}
	// The 2 GiB sparse file came back sparse.
	fi, _ := os.Stat(filepath.Join(dst, "sparse.img"))
	if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks > 1<<20 {
		t.Errorf("sparse file restored with %d bytes allocated for %d", blocks, fi.Size())
	}
	if m := NewManifest("id", "ns", "pvc", "k", ws); m.Verify(rs) != nil {
		t.Errorf("manifest does not verify its own archive: %v", m.Verify(rs))
	}
}

func TestSameTreeSameBytes(t *testing.T) {
	src := tree(t)
	var a, b bytes.Buffer
	sa, err := Write(context.Background(), src, &a, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := Write(context.Background(), src, &b, WriteOptions{})
	if sa.SHA256 != sb.SHA256 || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("two archives of one tree differ: %s vs %s", sa.SHA256, sb.SHA256)
	}
}

// crafted builds an archive by hand, as an attacker would.
func crafted(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(enc)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	tw.Close()
	enc.Close()
	return buf.Bytes()
}

func TestReadRefusesEscapes(t *testing.T) {
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	tests := []struct {
		name    string
		entries []*tar.Header
	}{
		{"dot-dot", []*tar.Header{reg("../escaped")}},
		{"absolute", []*tar.Header{reg("/tmp/escaped-abs")}},
		{"hard link out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}},
		{"write through a planted symlink", []*tar.Header{{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, reg("a/escaped-link")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			os.Mkdir(dst, 0o755)
			_, err := Read(context.Background(), bytes.NewReader(crafted(t, tt.entries...)), dst, ReadOptions{})
			if err == nil {
				t.Fatal("Read accepted an escaping entry")
			}
			for _, p := range []string{filepath.Join(parent, "escaped"), "/tmp/escaped-abs", "/tmp/escaped-link"} {
				if _, err := os.Lstat(p); err == nil {
					os.Remove(p)
					t.Errorf("%s was written outside the destination", p)
				}
			}
		})
	}
}

func TestCorruptionIsDetected(t *testing.T) {
	src := tree(t)
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManifest("id", "ns", "pvc", "k", ws)

	flipped := bytes.Clone(buf.Bytes())
	flipped[len(flipped)/2] ^= 0x40
	rs, err := Read(context.Background(), bytes.NewReader(flipped), t.TempDir(), ReadOptions{})
	if err == nil {
		err = m.Verify(rs)
	}
	if err == nil {
		t.Error("a flipped byte went unnoticed")
	}

	truncated := buf.Bytes()[:len(buf.Bytes())*2/3]
	if _, err := Read(context.Background(), bytes.NewReader(truncated), t.TempDir(), ReadOptions{}); err == nil {
		t.Error("a truncated archive was read without error")
	}
}

func TestWriteStopsWhenCancelled(t *testing.T) {
	src := tree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, src, io.Discard, WriteOptions{}); err != context.Canceled {
		t.Errorf("Write on a cancelled context = %v", err)
	}
}

// benchTree is ~256 MiB: half random, half compressible text.
func benchTree(b *testing.B) string {
	dir := b.TempDir()
	rnd := rand.NewChaCha8([32]byte{9})
	for i := 0; i < 16; i++ {
		data := make([]byte, 16<<20)
		if i%2 == 0 {
			rnd.Read(data)
		} else {
			copy(data, bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog\n"), len(data)/44))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func BenchmarkWrite(b *testing.B) {
	dir := benchTree(b)
	b.SetBytes(256 << 20)
	for b.Loop() {
		if _, err := Write(context.Background(), dir, io.Discard, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	dir := benchTree(b)
	var buf bytes.Buffer
	if _, err := Write(context.Background(), dir, &buf, WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(256 << 20)
	for b.Loop() {
		dst := b.TempDir()
		if _, err := Read(context.Background(), bytes.NewReader(buf.Bytes()), dst, ReadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
