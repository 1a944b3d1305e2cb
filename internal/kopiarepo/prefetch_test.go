package kopiarepo

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A restore of many small files reads each pack whole, once, instead of one ranged GET per file
// (issue 12: 200,000 files of 4 KiB restored 20 × slower than restic), even when kopia's cache
// holds only two of the packs: the backup spreads every directory over all the packs it writes
// meanwhile, so a restore in kopia's order would need each pack again after it was evicted.
// Counted at the S3 API, in front of the real MinIO. Fails without restoreSmallFilesByPack
// (hundreds of GETs), and with fetching a file's pack whole when kopia's restore reaches it.
func TestRestoreOfSmallFilesReadsEachPackOnce(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/many"
	src := t.TempDir()
	for d := range 8 {
		for f := range 100 {
			writeFile(t, filepath.Join(src, fmt.Sprintf("d%02d/f%03d", d, f)), randomBytes(t, 128<<10), 0o644)
		}
	}
	snap, err := openRepo(t, b.config(prefix), testPassword).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packs := 0
	for key := range b.objects(t, prefix+"/") {
		if strings.HasPrefix(strings.TrimPrefix(key, prefix+"/"), "p") {
			packs++
		}
	}
	if packs < 4 {
		t.Fatalf("the backup wrote %d packs; the test needs more than its cache holds", packs)
	}

	counted := countRequests(t, b.minio.Endpoint)
	cfg := b.config(prefix)
	cfg.Endpoint = counted.endpoint
	r, err := Open(testContext(t), cfg, testPassword, Options{CacheDir: t.TempDir(), CacheLimitBytes: 2 * 2 * 21 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := r.Restore(testContext(t), snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
	gets := counted.packGets(prefix)
	if gets > packs {
		t.Errorf("restoring 800 files of 128 KiB from %d packs took %d GETs of packs, want one per pack", packs, gets)
	}
	t.Logf("restore: %d packs, %d GETs of packs", packs, gets)
}

// A verify of many small files, with a cache that holds the snapshot, reads each pack once.
// Fails with packPrefetching returning r.rep (3,000 GETs).
func TestVerifyOfSmallFilesReadsEachPackOnce(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/many"
	src := t.TempDir()
	for d := range 10 {
		for f := range 300 {
			writeFile(t, filepath.Join(src, fmt.Sprintf("d%02d/f%03d", d, f)), randomBytes(t, 8<<10), 0o644)
		}
	}
	snap, err := openRepo(t, b.config(prefix), testPassword).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packs := len(b.objects(t, prefix+"/p"))

	counted := countRequests(t, b.minio.Endpoint)
	cfg := b.config(prefix)
	cfg.Endpoint = counted.endpoint
	if _, err := openRepo(t, cfg, testPassword).Verify(testContext(t), snap.ID); err != nil {
		t.Fatal(err)
	}
	// A worker that reaches a pack while another is about to fetch it may still read its own
	// file by range: at most one per worker and pack.
	gets := counted.packGets(prefix)
	if limit := packs * (RestoreParallelism + 1); gets > limit {
		t.Errorf("verifying 3,000 files of 8 KiB from %d packs took %d GETs of packs, want at most %d", packs, gets, limit)
	}
	t.Logf("verify: %d packs, %d GETs of packs", packs, gets)
}

// requestCounter is a reverse proxy in front of a real S3 endpoint that counts the GETs of each
// object key (the client signs for the proxy's host, which it forwards unchanged).
type requestCounter struct {
	endpoint string
	mu       sync.Mutex
	gets     map[string]int
}

func countRequests(t *testing.T, target string) *requestCounter {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	c := &requestCounter{gets: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			c.mu.Lock()
			c.gets[strings.TrimPrefix(req.URL.Path, "/"+testBucket+"/")]++
			c.mu.Unlock()
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	c.endpoint = strings.TrimPrefix(srv.URL, "http://")
	return c
}

// packGets is the number of GETs of the data packs (kopia's "p" blobs) under prefix.
func (c *requestCounter) packGets(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key, gets := range c.gets {
		if strings.HasPrefix(key, prefix+"/p") {
			n += gets
		}
	}
	return n
}
