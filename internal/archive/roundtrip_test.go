package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// comparable drops what only Write can know.
func comparable(s Stats) Stats {
	s.Skipped, s.Changed = 0, 0
	return s
}

func TestRoundTripRestoresTheTree(t *testing.T) {
	src, want := buildTree(t, true)
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := treeCounts{ws.Files, ws.Dirs, ws.Symlinks, ws.HardLinks}
	if got != want || ws.Skipped != 0 || ws.Changed != 0 {
		t.Errorf("Write stats %+v, want counts %+v and nothing skipped or changed", ws, want)
	}
	if ws.ArchiveBytes != int64(buf.Len()) {
		t.Errorf("ArchiveBytes %d, wrote %d", ws.ArchiveBytes, buf.Len())
	}
	if ws.ContentBytes < sparseSize {
		t.Errorf("ContentBytes %d does not count the sparse file", ws.ContentBytes)
	}

	dst := t.TempDir()
	rs, err := Read(context.Background(), bytes.NewReader(buf.Bytes()), dst, ReadOptions{Chown: true})
	if err != nil {
		t.Fatal(err)
	}
	if comparable(rs) != comparable(ws) {
		t.Errorf("stats differ:\nwrite %+v\nread  %+v", ws, rs)
	}
	sameTree(t, snapshot(t, src), snapshot(t, dst))

	fi, err := os.Stat(filepath.Join(dst, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	if allocated := fi.Sys().(*syscall.Stat_t).Blocks * 512; fi.Size() != sparseSize || allocated > 16<<20 {
		t.Errorf("sparse file restored as %d bytes with %d allocated, want %d with little allocated", fi.Size(), allocated, sparseSize)
	}
	if err := NewManifest("id", "ns", "pvc", "key", ws).Verify(rs); err != nil {
		t.Errorf("the manifest of an archive does not verify its restore: %v", err)
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	src, _ := buildTree(t, false)
	write := func() ([]byte, string) {
		var buf bytes.Buffer
		st, err := Write(context.Background(), src, &buf, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), st.SHA256
	}
	first, firstSum := write()
	if second, secondSum := write(); !bytes.Equal(first, second) || firstSum != secondSum {
		t.Fatalf("two archives of one tree differ: sha256 %s, then %s", firstSum, secondSum)
	}
	// The order is lexical, depth first, like WalkDir's, whatever order the directories
	// list their entries in.
	var want []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			rel += "/"
		}
		want = append(want, filepath.ToSlash(rel))
		return err
	})
	dec, err := zstd.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var got []string
	for tr := tar.NewReader(dec); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("entry order:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// And the hash does see a change: a single mtime nanosecond.
	p := filepath.Join(src, "a/zero-bytes")
	if err := os.Chtimes(p, time.Time{}, oldTime.Add(time.Nanosecond)); err != nil {
		t.Fatal(err)
	}
	if _, sum := write(); sum == firstSum {
		t.Fatal("an mtime change did not change the archive's sha256")
	}
}

func TestWriteCountsFilesChangedWhileRead(t *testing.T) {
	src := t.TempDir()
	original := bytes.Repeat([]byte("0123456789"), 10000)
	for _, n := range []string{"a-grows", "b-shrinks", "c-rewritten", "d-vanishes", "e-steady"} {
		if err := os.WriteFile(filepath.Join(src, n), original, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A sparse file that loses its data while it is read: its holes are skipped, not read.
	sparse, err := os.Create(filepath.Join(src, "b2-sparse-shrinks"))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{0, 32 << 20} {
		if _, err := sparse.WriteAt([]byte("data"), at); err != nil {
			t.Fatal(err)
		}
	}
	if err := sparse.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	testHookAfterHeader = func(p string) {
		var err error
		switch filepath.Base(p) {
		case "a-grows":
			// Growing, with the mtime put back (as rsync does): only the size tells.
			var f *os.File
			var before os.FileInfo
			if before, err = os.Stat(p); err == nil {
				f, err = os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			}
			if err == nil {
				_, err = f.Write([]byte("more"))
				f.Close()
			}
			if err == nil {
				err = os.Chtimes(p, time.Time{}, before.ModTime())
			}
			if err == nil {
				err = os.Remove(filepath.Join(src, "d-vanishes"))
			}
		case "b-shrinks":
			err = os.Truncate(p, 10)
		case "b2-sparse-shrinks":
			err = os.Truncate(p, 16<<20)
		case "c-rewritten":
			if err = os.WriteFile(p, bytes.ToUpper(original), 0o644); err == nil {
				err = os.Chtimes(p, time.Time{}, oldTime)
			}
		}
		if err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookAfterHeader = nil }()

	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Changed != 5 || ws.Files != 5 {
		t.Errorf("Changed %d, Files %d; want 5 changed (grown, 2 shrunk, rewritten, vanished) and 5 files", ws.Changed, ws.Files)
	}
	dst := t.TempDir()
	if _, err := Read(context.Background(), &buf, dst, ReadOptions{}); err != nil {
		t.Fatalf("the archive of a changing tree is unreadable: %v", err)
	}
	shrunk := append(original[:10:10], make([]byte, len(original)-10)...)
	sparseShrunk := make([]byte, 64<<20)
	copy(sparseShrunk, "data")
	for name, want := range map[string][]byte{"a-grows": original, "b-shrinks": shrunk, "b2-sparse-shrinks": sparseShrunk, "e-steady": original} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: restored %d bytes (%v), want the %d bytes seen first", name, len(got), err, len(want))
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "d-vanishes")); err == nil {
		t.Error("a file deleted before it was read was restored")
	}
}

// A FIFO is kept (a named pipe, made again empty, with its mode and mtime); sockets and devices,
// which a backup cannot hold, are counted as skipped, never dropped unseen.
func TestWriteKeepsFIFOsAndCountsSocketsAndDevices(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "regular"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	os.Chmod(filepath.Join(src, "fifo"), 0o640)
	os.Chtimes(filepath.Join(src, "fifo"), old, old)
	l, err := net.Listen("unix", filepath.Join(src, "socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	special := int64(1)
	if syscall.Mknod(filepath.Join(src, "null"), syscall.S_IFCHR|0o666, 1<<8|3) == nil {
		special++
	}
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Skipped != special || ws.Files != 1 || ws.FIFOs != 1 {
		t.Errorf("Skipped %d, Files %d, FIFOs %d; want %d, 1 and 1", ws.Skipped, ws.Files, ws.FIFOs, special)
	}
	dst := t.TempDir()
	rs, err := Read(context.Background(), &buf, dst, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs.FIFOs != 1 {
		t.Errorf("Read counted %d FIFOs, want 1", rs.FIFOs)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 2 || entries[0].Name() != "fifo" || entries[1].Name() != "regular" {
		t.Errorf("restored %v, want the FIFO and the regular file", entries)
	}
	fi, err := os.Lstat(filepath.Join(dst, "fifo"))
	if err != nil || fi.Mode() != fs.ModeNamedPipe|0o640 || !fi.ModTime().Equal(old) {
		t.Errorf("restored FIFO: %v, want a named pipe 0640 of %v", fi, old)
	}
}

func TestReadReplacesExistingPathsWithoutFollowingThem(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("restored"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Write(context.Background(), src, &buf, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dst, "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), &buf, dst, ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "original" {
		t.Errorf("the restore wrote through a symlink: outside file now %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "f")); string(got) != "restored" {
		t.Errorf("restored file holds %q", got)
	}
}

// More existing paths than the small-file writers hold buffers: each is found taken by a worker
// and replaced by the reader, and nothing is written through a symlink or into a hard link.
func TestReadReplacesManyExistingPaths(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, dst := t.TempDir(), t.TempDir()
	const n = 3 * smallFileQueue
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		if err := os.WriteFile(filepath.Join(src, name), []byte("restored "+name), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		switch i % 3 {
		case 0:
			err = os.Symlink(outside, filepath.Join(dst, name))
		case 1:
			err = os.Link(outside, filepath.Join(dst, name))
		default:
			err = os.WriteFile(filepath.Join(dst, name), []byte("old"), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := Write(context.Background(), src, &buf, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := Read(context.Background(), &buf, dst, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != n {
		t.Errorf("restored %d files, want %d", st.Files, n)
	}
	if got, _ := os.ReadFile(outside); string(got) != "original" {
		t.Errorf("the restore wrote through a link: outside file now %q", got)
	}
	sameTree(t, snapshot(t, src), snapshot(t, dst))
}

// An archive may name a path twice: the later entry wins, as when written in order, although
// small files are written by several workers.
func TestReadLaterEntryOfAPathWins(t *testing.T) {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	for i := range 50 {
		for _, name := range []string{"a", "b", fmt.Sprintf("c%02d", i)} {
			content := fmt.Sprintf("%s version %d", name, i)
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(content)); err != nil {
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
	dst := t.TempDir()
	if _, err := Read(context.Background(), &buf, dst, ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if got, _ := os.ReadFile(filepath.Join(dst, name)); string(got) != name+" version 49" {
			t.Errorf("%s holds %q, want the last entry's content", name, got)
		}
	}
}

// A backup reads the volume without changing it: no access time moves (O_NOATIME, for files
// the process owns).
func TestWriteLeavesAccessTimes(t *testing.T) {
	src := t.TempDir()
	old := time.Now().Add(-72 * time.Hour).Truncate(time.Second) // relatime updates atimes this old
	atime := func(name string) time.Time {
		fi, err := os.Stat(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return time.Unix(st.Atim.Unix())
	}
	for _, name := range []string{"probe", "f"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(src, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.ReadFile(filepath.Join(src, "probe")); err != nil {
		t.Fatal(err)
	}
	if atime("probe").Equal(old) {
		t.Skip("this file system does not update access times on read (noatime): nothing to check")
	}
	if _, err := Write(context.Background(), src, io.Discard, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := atime("f"); !got.Equal(old) {
		t.Errorf("backup moved the access time of f from %v to %v", old, got)
	}
}
