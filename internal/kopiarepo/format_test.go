package kopiarepo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/content"
)

// openWith opens (or creates) the repository with opts and closes it when the test ends.
func openWith(t *testing.T, cfg S3Config, opts Options) *Repo {
	t.Helper()
	opts.CacheDir = t.TempDir()
	r, err := Open(testContext(t), cfg, testPassword, opts)
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

// dataChunks counts the repository's data contents (file chunks; metadata contents have a prefix).
func dataChunks(t *testing.T, r *Repo) int {
	t.Helper()
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		t.Fatalf("%T is not a direct repository", r.rep)
	}
	n := 0
	err := dr.ContentReader().IterateContents(testContext(t), content.IterateOptions{}, func(ci content.Info) error {
		if !ci.ContentID.HasPrefix() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// chunksOfRandomFile backs up a 32 MiB random file into r and returns the data chunks it holds.
func chunksOfRandomFile(t *testing.T, r *Repo) int {
	t.Helper()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "image"), randomBytes(t, 32<<20), 0o600)
	if _, err := r.Backup(testContext(t), src, BackupOptions{Source: "shop/db"}); err != nil {
		t.Fatal(err)
	}
	return dataChunks(t, r)
}

// A new repository cuts files with DefaultSplitter, DYNAMIC-1M-BUZHASH: a 32 MiB random file
// becomes more than 16 chunks (chunks of 0.5 to 2 MiB), where kopia's default DYNAMIC-4M-BUZHASH
// (2 to 8 MiB) makes at most 16: a 4 KiB block rewritten in an image then costs a chunk of about
// 1 MiB in the next backup, not 4.
func TestNewRepositoriesCutWithTheDefaultSplitter(t *testing.T) {
	b := newBucket(t)
	r := openWith(t, b.config("volumes/db"), Options{})
	if got := r.Splitter(); got != "DYNAMIC-1M-BUZHASH" {
		t.Errorf("a new repository cuts with %s, want DYNAMIC-1M-BUZHASH", got)
	}
	if n := chunksOfRandomFile(t, r); n <= 16 {
		t.Errorf("a 32 MiB random file became %d chunks: not cut at about 1 MiB (at most 16 are DYNAMIC-4M-BUZHASH's)", n)
	}
}

// A repository created with Options.Splitter cuts files with it (DYNAMIC-4M-BUZHASH: at most 16
// chunks for 32 MiB). Opened again asking for another splitter, the repository keeps its own:
// chunks cut otherwise would not deduplicate against the ones it holds.
func TestSplitterIsChosenWhenTheRepositoryIsCreatedOnly(t *testing.T) {
	b := newBucket(t)
	cfg := b.config("volumes/db")
	const asked = "DYNAMIC-4M-BUZHASH"
	r := openWith(t, cfg, Options{Splitter: asked})
	if got := r.Splitter(); got != asked {
		t.Fatalf("a repository created asking for %s cuts with %s", asked, got)
	}
	if n := chunksOfRandomFile(t, r); n > 16 {
		t.Errorf("a 32 MiB random file became %d chunks: not cut with %s (2 to 8 MiB chunks)", n, asked)
	}

	again := openWith(t, cfg, Options{Splitter: DefaultSplitter})
	if got := again.Splitter(); got != asked {
		t.Errorf("the existing repository, opened asking for %s, cuts with %s, want its own %s", DefaultSplitter, got, asked)
	}
	info, err := again.Info(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Splitter != asked {
		t.Errorf("Info().Splitter = %q, want %q", info.Splitter, asked)
	}
}

// A name kopia does not offer (or that is not in Splitters) creates nothing.
func TestUnknownSplitterCreatesNothing(t *testing.T) {
	b := newBucket(t)
	_, err := Open(testContext(t), b.config("volumes/odd"), testPassword, Options{CacheDir: t.TempDir(), Splitter: "DYNAMIC-3M-BUZHASH"})
	if err == nil || !strings.Contains(err.Error(), "DYNAMIC-3M-BUZHASH") {
		t.Errorf("open with an unknown splitter: %v, want an error naming it", err)
	}
	if n := len(b.objects(t, "volumes/odd")); n != 0 {
		t.Errorf("open with an unknown splitter wrote %d objects", n)
	}
}

// BackupOptions.Compression is the compressor of the new chunks: "none" stores log text as it
// is, the default compresses it. Another compressor later re-uploads nothing: kopia names a chunk by the hash of its
// uncompressed content, so files read again (a new mtime) find their chunks stored.
func TestCompressionAppliesToNewChunksAndReuploadsNothing(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/logs"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	var log strings.Builder
	for i := 0; log.Len() < 8<<20; i++ {
		log.WriteString("2026-12-07T09:00:00Z INFO request served path=/api/v1/items status=200 id=")
		log.WriteString(strings.Repeat("ab", i%13))
		log.WriteString("\n")
	}
	path := filepath.Join(src, "app.log")
	writeFile(t, path, []byte(log.String()), 0o644)
	plain, err := r.Backup(ctx, src, BackupOptions{Source: "shop/logs", Compression: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.UploadedBytes < plain.TotalBytes {
		t.Errorf("%d bytes of log text uploaded %d bytes with compression none: compressed anyway", plain.TotalBytes, plain.UploadedBytes)
	}

	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	zstd, err := r.Backup(ctx, src, BackupOptions{Source: "shop/logs", Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	if zstd.UploadedBytes > 64<<10 {
		t.Errorf("the same log text, read again with compression zstd, uploaded %d bytes: chunks stored again", zstd.UploadedBytes)
	}

	fresh := t.TempDir()
	writeFile(t, filepath.Join(fresh, "app.log"), []byte(strings.ReplaceAll(log.String(), "INFO", "WARN")), 0o644)
	compressed, err := r.Backup(ctx, fresh, BackupOptions{Source: "shop/logs2"}) // DefaultCompression
	if err != nil {
		t.Fatal(err)
	}
	if compressed.UploadedBytes > compressed.TotalBytes/4 {
		t.Errorf("%d bytes of new log text uploaded %d bytes with the default compression: not compressed", compressed.TotalBytes, compressed.UploadedBytes)
	}
	if _, err := r.Backup(ctx, fresh, BackupOptions{Source: "shop/logs2", Compression: "lz4"}); err == nil {
		t.Error("a backup with compression lz4 (not one of Compressions) succeeded")
	}
	for dir, id := range map[string]string{src: zstd.ID, fresh: compressed.ID} {
		dst := t.TempDir()
		if _, err := r.Restore(ctx, id, dst); err != nil {
			t.Fatal(err)
		}
		assertSameTree(t, dir, dst)
	}
}
