package kopiarepo

import (
	"context"
	"fmt"
	iofs "io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A restore or a verify of many small files reads each pack whole, once, instead of one ranged
// GET per file (issue 12: 200,000 files of 4 KiB restored 20 × slower than restic), and writes
// nothing to kopia's disk cache: the packs are held in memory while their files are read. The
// backup spreads every directory over all the packs it writes meanwhile, so reading in kopia's
// order would need each pack again and again. Counted at the S3 API, in front of the real MinIO.
// Fails without the pack-ordered reads (800 GETs each), with fetching a file's pack whole when
// kopia's restore reaches it (388 GETs with a cache of two packs), and without the packs held
// in memory (800 GETs, no disk cache to hold them).
func TestSmallFilesAreReadPackByPack(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/many"
	src := t.TempDir()
	for d := range 8 {
		for f := range 100 {
			writeFile(t, filepath.Join(src, fmt.Sprintf("d%02d/f%03d", d, f)), randomBytes(t, 128<<10), 0o644)
		}
	}
	snap, err := openWith(t, b.config(prefix), Options{Splitter: "DYNAMIC-4M-BUZHASH"}).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packs := len(b.objects(t, prefix+"/p"))
	if packs < 4 {
		t.Fatalf("the backup wrote %d packs; the test needs more than the cache holds", packs)
	}
	counted := countRequests(t, b.minio.Endpoint)
	cfg := b.config(prefix)
	cfg.Endpoint = counted.endpoint
	// Each step is a mover of its own: a new connection for reading, as the mover's restore
	// and verify open it.
	var cacheDirs []string
	openSmallCache := func() *Repo {
		dir := t.TempDir()
		cacheDirs = append(cacheDirs, dir)
		r, err := Open(testContext(t), cfg, testPassword, Options{CacheDir: dir, NoCreate: true, NoDiskCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		return r
	}

	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := openSmallCache().Restore(testContext(t), snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
	if gets := counted.packGets(prefix); gets != packs {
		t.Errorf("restoring 800 files of 128 KiB from %d packs took %d GETs of packs, want one per pack", packs, gets)
	}

	before := counted.packGets(prefix)
	verified, err := openSmallCache().Verify(testContext(t), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if verified.Objects != 800 || verified.Bytes != 800*128<<10 {
		t.Errorf("verify read %+v, want 800 objects of 128 KiB", verified)
	}
	if gets := counted.packGets(prefix) - before; gets != packs {
		t.Errorf("verifying 800 files of 128 KiB from %d packs took %d GETs of packs, want one per pack", packs, gets)
	}
	for _, dir := range cacheDirs {
		if files := filesUnder(t, dir); len(files) != 1 || files[0] != configFileName {
			t.Errorf("a connection for reading left %v in its cache directory, want only %s", files, configFileName)
		}
	}
}

// filesUnder lists the regular files under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// requestCounter is a reverse proxy in front of a real S3 endpoint that counts the GETs of each
// object key (the client signs for the proxy's host, which it forwards unchanged).
type requestCounter struct {
	endpoint string
	mu       sync.Mutex
	gets     map[string]int
	// packDelay holds each GET of a data pack that long before forwarding it, so that GETs made
	// at once are seen at once (inFlight, maxInFlight).
	packDelay             time.Duration
	inFlight, maxInFlight int
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
		key := strings.TrimPrefix(req.URL.Path, "/"+testBucket+"/")
		pack := req.Method == http.MethodGet && strings.Contains(key, "/p")
		if req.Method == http.MethodGet {
			c.mu.Lock()
			c.gets[key]++
			if pack {
				c.inFlight++
				c.maxInFlight = max(c.maxInFlight, c.inFlight)
			}
			delay := c.packDelay
			c.mu.Unlock()
			if pack {
				defer func() { c.mu.Lock(); c.inFlight--; c.mu.Unlock() }()
				time.Sleep(delay)
			}
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

// Files of 1 MiB are one chunk each in a repository cut with DYNAMIC-4M-BUZHASH (kopia's default,
// and the splitter of repositories created before DefaultSplitter), and are read with their
// packs: one GET per pack instead of one per file (1 GiB of 1 MiB files restored 1.5 × slower
// than restic with a ranged GET each). Fails with the pack-ordered reads limited to files up to
// 256 KiB (40 GETs).
func TestOneChunkFilesAreReadPackByPack(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/mib"
	src := t.TempDir()
	for f := range 40 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("d%d/f%02d", f%3, f)), randomBytes(t, 1<<20), 0o644)
	}
	snap, err := openWith(t, b.config(prefix), Options{Splitter: "DYNAMIC-4M-BUZHASH"}).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packs := len(b.objects(t, prefix+"/p"))
	counted := countRequests(t, b.minio.Endpoint)
	restoreThrough(t, counted, b.config(prefix), snap.ID, src)
	if gets := counted.packGets(prefix); gets != packs {
		t.Errorf("restoring 40 files of 1 MiB from %d packs took %d GETs of packs, want one per pack", packs, gets)
	}
}

// With DefaultSplitter (chunks of 0.5 to 2 MiB) about two files of 1 MiB in five are two chunks;
// a file whose chunks are in one pack is read with that pack too. 16 MiB of files fit one pack
// (kopia's packs are about 20 MiB; a file whose chunks straddle two packs is read by ranges).
// Fails with the pack-ordered reads limited to files of one chunk (a ranged GET per chunk of the
// others: 34 GETs for 40 such files in 2 packs).
func TestFilesOfAFewChunksInOnePackAreReadWithIt(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/chunks"
	src, snap := backUpRandomFiles(t, b.config(prefix), 16, 1<<20)
	packs := len(b.objects(t, prefix+"/p"))
	counted := countRequests(t, b.minio.Endpoint)
	restoreThrough(t, counted, b.config(prefix), snap.ID, src)
	if gets := counted.packGets(prefix); packs != 1 || gets != packs {
		t.Errorf("restoring 16 files of 1 MiB from %d packs took %d GETs of packs, want one pack read once", packs, gets)
	}
}

// The larger files are read with their packs too, chunk by chunk: kopia reads an object one
// chunk after the other, a ranged GET each, and a database's files backed up at once share
// their packs (1 GiB of 8 KiB pages in files of 128 MiB restored 1.6 × slower than restic,
// which fetches each pack once). Here two such files, with runs of zeros (one at a file's end),
// 1 % of their pages rewritten in place and backed up again: the restore of the second snapshot
// fetches each pack at most once. Fails with the files read chunk by chunk (one GET per chunk:
// 40 GETs of 4 packs), and with the segmented reads of 8262c55 (as many, four at a time).
func TestLargeFilesAreReadPackByPack(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/db"
	const page = 8 << 10
	src := t.TempDir()
	files := [][]byte{randomBytes(t, 24<<20), randomBytes(t, 20<<20+3*page)}
	clear(files[0][5<<20 : 7<<20])
	clear(files[1][len(files[1])-3<<20:])
	for i, data := range files {
		writeFile(t, filepath.Join(src, fmt.Sprintf("base/db.%d", i)), data, 0o600)
	}
	r := openRepo(t, b.config(prefix), testPassword)
	if _, err := r.Backup(testContext(t), src, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, data := range files {
		for p := 0; p < len(data)/page; p += 100 {
			copy(data[p*page:(p+1)*page], randomBytes(t, page))
		}
		writeFile(t, filepath.Join(src, fmt.Sprintf("base/db.%d", i)), data, 0o600)
	}
	snap, err := r.Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packs := len(b.objects(t, prefix+"/p"))
	counted := countRequests(t, b.minio.Endpoint)
	restoreThrough(t, counted, b.config(prefix), snap.ID, src)
	if gets := counted.packGets(prefix); gets > packs {
		t.Errorf("restoring 2 files of about 20 MiB from %d packs took %d GETs of packs, want at most one per pack", packs, gets)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	for key, gets := range counted.gets {
		if strings.HasPrefix(key, prefix+"/p") && gets > 1 {
			t.Errorf("the restore fetched pack %s %d times, want once", key, gets)
		}
	}
}

// restoreThrough restores snapshot id as a mover does (a new connection, no disk cache) through
// the counting proxy, and checks the restored tree is src.
func restoreThrough(t *testing.T, counted *requestCounter, cfg S3Config, id, src string) {
	t.Helper()
	cfg.Endpoint = counted.endpoint
	r, err := Open(testContext(t), cfg, testPassword, Options{CacheDir: t.TempDir(), NoCreate: true, NoDiskCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := r.Restore(testContext(t), id, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
}

// A restore reads each metadata pack (directories, the chunk lists of files of several
// chunks) with one GET: the walk read each directory and chunk list with a ranged GET of a few
// hundred bytes, one after the other (280 for 512 logs of 1 MiB). Fails without metaPacks:
// the metadata pack is fetched once per directory and chunk list (more than 40 times here).
func TestMetadataPacksAreReadWhole(t *testing.T) {
	b := newBucket(t)
	const prefix = "volumes/logs"
	src, snap := backUpRandomFiles(t, b.config(prefix), 40, 3<<20)
	counted := countRequests(t, b.minio.Endpoint)
	restoreThrough(t, counted, b.config(prefix), snap.ID, src)
	counted.mu.Lock()
	defer counted.mu.Unlock()
	metadata := 0
	for key, gets := range counted.gets {
		if strings.HasPrefix(key, prefix+"/q") {
			metadata++
			if gets > 1 {
				t.Errorf("the restore fetched metadata pack %s %d times, want once", key, gets)
			}
		}
	}
	if metadata == 0 {
		t.Error("the restore read no metadata pack")
	}
}

// backUpRandomFiles backs up files of size random bytes, in three directories, into a new
// repository at cfg, and returns the tree and its snapshot.
func backUpRandomFiles(t *testing.T, cfg S3Config, files, size int) (string, SnapshotInfo) {
	t.Helper()
	src := t.TempDir()
	for f := range files {
		writeFile(t, filepath.Join(src, fmt.Sprintf("d%d/f%02d", f%3, f)), randomBytes(t, size), 0o644)
	}
	snap, err := openRepo(t, cfg, testPassword).Backup(testContext(t), src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return src, snap
}
