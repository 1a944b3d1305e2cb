package run

import (
	"context"
	"crypto/sha256"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// TestBackupRestoreRoundTripThroughMinIO takes a volume with everything a backup must keep
// through the real mover, a real MinIO and back.
func TestBackupRestoreRoundTripThroughMinIO(t *testing.T) {
	src := t.TempDir()
	old := time.Date(1999, 1, 2, 3, 4, 5, 600000000, time.UTC)
	write := func(rel string, data []byte, mode fs.FileMode) {
		p := filepath.Join(src, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chtimes(p, old, old)
	}
	write("zero", nil, 0o644)
	write("secret", []byte("only root"), 0o000)
	write("ünïcødé/日本語.txt", []byte("konnichiwa"), 0o640)
	long := strings.Repeat("x", 120)
	write(filepath.Join(long, long), []byte("long names"), 0o600)
	write("links/a", []byte("shared inode"), 0o644)
	os.Link(filepath.Join(src, "links/a"), filepath.Join(src, "links/b"))
	os.Symlink("../zero", filepath.Join(src, "links/sym"))
	os.Mkdir(filepath.Join(src, "empty"), 0o700)
	f, _ := os.Create(filepath.Join(src, "disk.img")) // 2 GiB sparse, data at 1 GiB
	f.WriteAt([]byte("needle"), 1<<30)
	f.Truncate(2 << 30)
	f.Close()

	e, _ := setup(t, src)
	if res := Backup(context.Background(), e.get, "test"); res.Result != "Succeeded" {
		t.Fatalf("backup: %+v", res)
	}
	e[EnvTargetDir] = t.TempDir()
	res := Restore(context.Background(), e.get)
	if res.Result != "Succeeded" {
		t.Fatalf("restore: %+v", res)
	}
	dst := e[EnvTargetDir]
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(src, p)
		want, _ := os.Lstat(p)
		got, err := os.Lstat(filepath.Join(dst, rel))
		switch {
		case err != nil:
			t.Errorf("%s: %v", rel, err)
		case got.Mode() != want.Mode() || got.Size() != want.Size():
			t.Errorf("%s: mode %v size %d, want %v %d", rel, got.Mode(), got.Size(), want.Mode(), want.Size())
		case want.Mode().IsRegular() && (!got.ModTime().Equal(want.ModTime()) || sum(t, p) != sum(t, filepath.Join(dst, rel))):
			t.Errorf("%s: content or mtime differs", rel)
		}
		return nil
	})
	a, _ := os.Stat(filepath.Join(dst, "links/a"))
	b, _ := os.Stat(filepath.Join(dst, "links/b"))
	if !os.SameFile(a, b) {
		t.Error("hard link restored as two files")
	}
	img, _ := os.Stat(filepath.Join(dst, "disk.img"))
	if alloc := img.Sys().(*syscall.Stat_t).Blocks * 512; alloc > 16<<20 {
		t.Errorf("sparse 2 GiB image restored with %d bytes allocated", alloc)
	}
}

func sum(t *testing.T, p string) [32]byte {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}
