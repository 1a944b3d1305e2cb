package kopiarepo

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo"
)

// Log-like text is stored compressed (DefaultCompression), random data is not made bigger, and
// both restore exactly.
func TestTextIsCompressedRandomDataIsNotInflated(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/app"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	var log strings.Builder
	for i := 0; log.Len() < 8<<20; i++ {
		fmt.Fprintf(&log, "2026-12-05T10:%02d:%02d.%03dZ INFO request id=%08x path=/api/v1/items/%d status=200 bytes=%d\n",
			i/60000%60, i/1000%60, i%1000, i*2654435761, i%977, i%4096)
	}
	writeFile(t, filepath.Join(src, "app.log"), []byte(log.String()), 0o644)
	text, err := r.Backup(ctx, src, BackupOptions{Source: "shop/logs"})
	if err != nil {
		t.Fatal(err)
	}
	if text.UploadedBytes > text.TotalBytes/2 {
		t.Errorf("%d bytes of log text uploaded %d bytes: not compressed", text.TotalBytes, text.UploadedBytes)
	}

	rnd := t.TempDir()
	writeFile(t, filepath.Join(rnd, "random"), randomBytes(t, 8<<20), 0o644)
	random, err := r.Backup(ctx, rnd, BackupOptions{Source: "shop/random"})
	if err != nil {
		t.Fatal(err)
	}
	if random.UploadedBytes > random.TotalBytes+random.TotalBytes/50 {
		t.Errorf("%d bytes of random data uploaded %d bytes", random.TotalBytes, random.UploadedBytes)
	}
	t.Logf("log text: %d bytes, uploaded %d; random: %d bytes, uploaded %d", text.TotalBytes, text.UploadedBytes, random.TotalBytes, random.UploadedBytes)

	for src, id := range map[string]string{src: text.ID, rnd: random.ID} {
		dst := t.TempDir()
		if _, err := r.Restore(ctx, id, dst); err != nil {
			t.Fatal(err)
		}
		assertSameTree(t, src, dst)
	}
}

// New repositories hash chunks with DefaultHash (BLAKE3, several times faster here than
// kopia's BLAKE2B default); TestStockCLIOpensTheRepository shows the stock CLI reads them.
func TestNewRepositoriesUseTheDefaultHash(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/new"), testPassword)
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		t.Fatalf("%T is not a direct repository", r.rep)
	}
	if got := dr.ContentReader().ContentFormat().GetHashFunction(); got != DefaultHash {
		t.Errorf("a new repository hashes with %s, want %s", got, DefaultHash)
	}
}
