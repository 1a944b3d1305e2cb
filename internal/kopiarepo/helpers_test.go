package kopiarepo

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

const (
	testBucket   = "backups"
	testPassword = "correct horse battery staple"
)

// bucket is a real MinIO with one bucket, and an admin client to look at what is stored.
type bucket struct {
	minio *testenv.MinIO
	admin *minio.Client
}

func newBucket(t testing.TB) bucket {
	t.Helper()
	m := testenv.StartMinIO(t)
	admin, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), testBucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return bucket{minio: m, admin: admin}
}

// config is the repository under prefix.
func (b bucket) config(prefix string) S3Config {
	return S3Config{Prefix: prefix, Config: objectstore.Config{
		Endpoint: b.minio.Endpoint, Bucket: testBucket, AccessKey: b.minio.AccessKey, SecretKey: b.minio.SecretKey, Insecure: true,
	}}
}

// objects lists the objects under prefix with their sizes.
func (b bucket) objects(t *testing.T, prefix string) map[string]int64 {
	t.Helper()
	objs := map[string]int64{}
	for o := range b.admin.ListObjects(context.Background(), testBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		objs[o.Key] = o.Size
	}
	return objs
}

// bytesUnder is the total size of the objects under prefix.
func (b bucket) bytesUnder(t *testing.T, prefix string) int64 {
	t.Helper()
	var n int64
	for _, size := range b.objects(t, prefix) {
		n += size
	}
	return n
}

func (b bucket) get(t *testing.T, key string) []byte {
	t.Helper()
	o, err := b.admin.GetObject(context.Background(), testBucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	data, err := io.ReadAll(o)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (b bucket) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := b.admin.PutObject(context.Background(), testBucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// openRepo opens (or creates) the repository and closes it when the test ends.
func openRepo(t *testing.T, cfg S3Config, password string) *Repo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logger *zap.Logger
	if os.Getenv("KOPIAREPO_TEST_LOG") != "" {
		logger = zaptest.NewLogger(t)
	}
	r, err := Open(ctx, cfg, password, Options{CacheDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatalf("open %s: %v", cfg.Prefix, err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode goes through the umask
		t.Fatal(err)
	}
}

// writeVolume fills dir like a small volume: nested directories with their own modes, regular
// files of several sizes and modes, an empty file, and symlinks (relative, absolute, dangling).
func writeVolume(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "README"), []byte("hello\n"), 0o644)
	writeFile(t, filepath.Join(dir, "empty"), nil, 0o600)
	writeFile(t, filepath.Join(dir, "bin", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	writeFile(t, filepath.Join(dir, "data", "big.bin"), randomBytes(t, 3<<20+17), 0o640)
	writeFile(t, filepath.Join(dir, "data", "deep", "er", "leaf.txt"), bytes.Repeat([]byte("leaf "), 1000), 0o444)
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, link := range []struct{ name, target string }{
		{"link-to-readme", "README"},
		{"data/link-up", "../bin/run.sh"},
		{"dangling", "does/not/exist"},
		{"absolute", "/etc/hostname"},
	} {
		if err := os.Symlink(link.target, filepath.Join(dir, link.name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "data", "deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 2, 29, 12, 0, 0, 123456789, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "README"), old, old); err != nil {
		t.Fatal(err)
	}
}

// entry is what a restore must reproduce of one path.
type entry struct {
	mode    fs.FileMode
	modTime time.Time // files and symlinks
	target  string    // symlinks
	content []byte    // regular files
}

// tree reads everything below dir (not dir itself).
func tree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	entries := map[string]entry{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		e := entry{mode: info.Mode()}
		if info.Mode().IsRegular() || info.Mode()&fs.ModeSymlink != 0 { // kopia records a directory's time as the latest of its tree's
			e.modTime = info.ModTime()
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if e.target, err = os.Readlink(path); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if e.content, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		entries[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// assertSameTree fails unless got has exactly the entries of want, with the same type, mode,
// bytes, symlink target and modification time of files and symlinks.
func assertSameTree(t *testing.T, want, got string) {
	t.Helper()
	w, g := tree(t, want), tree(t, got)
	for path, we := range w {
		ge, ok := g[path]
		switch {
		case !ok:
			t.Errorf("%s: missing from the restore", path)
		case ge.mode != we.mode:
			t.Errorf("%s: mode %v, want %v", path, ge.mode, we.mode)
		case ge.target != we.target:
			t.Errorf("%s: symlink to %q, want %q", path, ge.target, we.target)
		case !bytes.Equal(ge.content, we.content):
			t.Errorf("%s: content differs (%d bytes, want %d)", path, len(ge.content), len(we.content))
		case !sameModTime(we, ge):
			t.Errorf("%s: mtime %v, want %v", path, ge.modTime, we.modTime)
		}
	}
	for path := range g {
		if _, ok := w[path]; !ok {
			t.Errorf("%s: restored but not in the source", path)
		}
	}
}

// sameModTime reports whether a restored entry has the source's modification time. The stock CLI
// sets a symlink's with lutimes, in microseconds rounded up (syscall.NsecToTimeval), so a
// symlink's may be up to a microsecond later.
func sameModTime(want, got entry) bool {
	if want.mode&fs.ModeSymlink == 0 {
		return got.modTime.Equal(want.modTime)
	}
	d := got.modTime.Sub(want.modTime)
	return d >= 0 && d < time.Microsecond
}

// backedUpVolume backs the test volume (writeVolume) up into a new repository under prefix of b
// and returns the repository's configuration and the snapshot.
func backedUpVolume(t *testing.T, b bucket, prefix string) (S3Config, SnapshotInfo) {
	t.Helper()
	cfg := b.config(prefix)
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := openRepo(t, cfg, testPassword).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, snap
}
