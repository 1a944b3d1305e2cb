package run

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/okgoes/okgoes-operator/internal/archive"
	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// listVolume is a volume whose top level has a directory of large files (with a subdirectory), a
// directory of small files, a file and a symlink: 9 MiB of content, of which a listing needs none.
func listVolume(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	for i := range 4 {
		randomFile(t, filepath.Join(src, "media", fmt.Sprintf("clip-%d.bin", i)), 2<<20, byte(i))
	}
	randomFile(t, filepath.Join(src, "media", "thumbs", "a.jpg"), 30000, 7)
	for i := range 10 {
		randomFile(t, filepath.Join(src, "conf", fmt.Sprintf("c%d.yaml", i)), 100+i, byte(20+i))
	}
	randomFile(t, filepath.Join(src, "top.bin"), 1<<20, 42)
	if err := os.Symlink("top.bin", filepath.Join(src, "latest")); err != nil {
		t.Fatal(err)
	}
	return src
}

// wantTop is the top level of listVolume, as a listing must report it (largest first).
var wantTop = []archive.TreeEntry{
	{Path: "media", Type: "dir", Bytes: 4*(2<<20) + 30000, Files: 5},
	{Path: "top.bin", Type: "file", Bytes: 1 << 20, Files: 1},
	{Path: "conf", Type: "dir", Bytes: 10*100 + 45, Files: 10},
	{Path: "latest", Type: "symlink"},
}

// s3Reads is a reverse proxy in front of a real MinIO that counts the GETs of each object and
// the bytes of their responses (the client signs for the proxy's host, which it forwards).
type s3Reads struct {
	endpoint string
	mu       sync.Mutex
	gets     map[string]int
	bytes    int64
}

func countReads(t *testing.T, target string) *s3Reads {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	c := &s3Reads{gets: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(res *http.Response) error {
		if res.Request.Method == http.MethodGet {
			res.Body = &countingBody{ReadCloser: res.Body, c: c}
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if key := strings.TrimPrefix(req.URL.Path, "/backups/"); req.Method == http.MethodGet && key != req.URL.Path && key != "" {
			c.mu.Lock()
			c.gets[key]++
			c.mu.Unlock()
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	c.endpoint = strings.TrimPrefix(srv.URL, "http://")
	return c
}

type countingBody struct {
	io.ReadCloser
	c *s3Reads
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.c.bytes += int64(n)
	b.c.mu.Unlock()
	return n, err
}

// getsOf counts the GETs of keys for which match is true.
func (c *s3Reads) getsOf(match func(key string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.gets {
		if match(k) {
			n += v
		}
	}
	return n
}

func (c *s3Reads) read() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// list runs `mover list` of the backup of e through the proxy c, with a fresh kopia cache.
func list(t *testing.T, e env, c *s3Reads, path, depth string) Result {
	t.Helper()
	le := env{}
	for k, v := range e {
		le[k] = v
	}
	le[EnvEndpoint], le[EnvListPath], le[EnvListDepth] = c.endpoint, path, depth
	if le[EnvKopiaCacheDir] != "" {
		le[EnvKopiaCacheDir] = t.TempDir()
	}
	res := List(context.Background(), le.get)
	raw, err := os.ReadFile(le[EnvTerminationLog])
	if err != nil || len(raw) > 4096 {
		t.Fatalf("termination message: %d bytes, %v", len(raw), err)
	}
	return res
}

// The kopia engine lists a backup's tree from its directory objects alone: the sizes are the
// summaries kopia keeps with each directory, and not one data pack (file content) is read. A
// full restore of the same backup, through the same proxy, reads them all.
func TestKopiaListReadsOnlyDirectoryObjects(t *testing.T) {
	src := listVolume(t)
	e, m, _ := kopiaSetup(t, src)
	if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup: %+v", res)
	}
	c := countReads(t, m.Endpoint)
	isPack := func(k string) bool { return strings.HasPrefix(k, "ns/app/kopia/p") }

	res := list(t, e, c, "", "1")
	if !res.Succeeded() || !sameEntries(res.Entries, wantTop) || res.EntriesMore != nil || res.Files != 16 {
		t.Fatalf("list: %+v", res)
	}
	if n := c.getsOf(isPack); n != 0 {
		t.Errorf("the listing read %d data packs: it must read no file content", n)
	}
	if read := c.read(); read >= 1<<20 {
		t.Errorf("the listing read %d bytes from S3, more than the smallest listed file", read)
	}
	t.Logf("list of the root: %d bytes read from S3, %d data pack GETs", c.read(), c.getsOf(isPack))

	deep := list(t, e, c, "media", "2")
	if !deep.Succeeded() || len(deep.Entries) != 6 || deep.Entries[5].Path != "media/thumbs/a.jpg" || deep.Entries[4] != (archive.TreeEntry{Path: "media/thumbs", Type: "dir", Bytes: 30000, Files: 1}) {
		t.Fatalf("list media, depth 2: %+v", deep)
	}
	if absent := list(t, e, c, "nope", "1"); absent.Succeeded() || absent.Reason != ReasonPathNotInBackup {
		t.Errorf("list of an absent directory: %+v", absent)
	}
	if n := c.getsOf(isPack); n != 0 {
		t.Errorf("the listings read %d data packs", n)
	}

	re := env{}
	for k, v := range e {
		re[k] = v
	}
	re[EnvEndpoint], re[EnvTargetDir], re[EnvKopiaCacheDir] = c.endpoint, t.TempDir(), t.TempDir()
	listed := c.read()
	if res := Restore(context.Background(), re.get); !res.Succeeded() {
		t.Fatalf("restore: %+v", res)
	}
	if n := c.getsOf(isPack); n == 0 {
		t.Error("a full restore through the proxy read no data pack: the proxy counts nothing, and the listing's zero proves nothing")
	}
	t.Logf("the three listings read %d bytes from S3; a full restore %d bytes, %d data pack GETs", listed, c.read()-listed, c.getsOf(isPack))
}

// The archive engine lists a new backup's top level from its manifest, never reading the archive;
// deeper levels, and backups whose manifest has no tree (made before it existed), are a precise
// TreeNotRecorded.
func TestArchiveListReadsOnlyTheManifest(t *testing.T) {
	src := listVolume(t)
	e, m := setup(t, src)
	if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup: %+v", res)
	}
	c := countReads(t, m.Endpoint)
	isArchive := func(k string) bool { return strings.HasSuffix(k, ".tar.zst") }

	res := list(t, e, c, "", "")
	if !res.Succeeded() || !sameEntries(res.Entries, wantTop) || res.EntriesMore != nil {
		t.Fatalf("list: %+v", res)
	}
	if deep := list(t, e, c, "media", "1"); deep.Succeeded() || deep.Reason != ReasonTreeNotRecorded || !strings.Contains(deep.Message, "spec.paths") {
		t.Errorf("list of a subdirectory: %+v", deep)
	}
	if n := c.getsOf(isArchive); n != 0 {
		t.Errorf("the listing read the archive %d times", n)
	}

	// A manifest as an older operator wrote it: no tree.
	_, store := storeOf(t, e)
	body, err := store.Get(context.Background(), e[EnvManifestKey])
	if err != nil {
		t.Fatal(err)
	}
	var old map[string]any
	if err := json.NewDecoder(body).Decode(&old); err != nil {
		t.Fatal(err)
	}
	body.Close()
	delete(old, "tree")
	delete(old, "treeRecorded")
	data, _ := json.Marshal(old)
	if err := store.PutBytes(context.Background(), e[EnvManifestKey], data, "application/json"); err != nil {
		t.Fatal(err)
	}
	if older := list(t, e, c, "", "1"); older.Succeeded() || older.Reason != ReasonTreeNotRecorded || !strings.Contains(older.Message, "before archive manifests recorded") {
		t.Errorf("list of an older backup: %+v", older)
	}
}

// A listing that does not fit the termination message keeps the largest entries and counts the
// rest with their bytes.
func TestListKeepsTheLargestEntriesThatFit(t *testing.T) {
	src := t.TempDir()
	for i := range 200 {
		randomFile(t, filepath.Join(src, fmt.Sprintf("a-rather-long-file-name-to-fill-the-message-%03d", i)), 1000+i, byte(i))
	}
	e, m, _ := kopiaSetup(t, src)
	if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup: %+v", res)
	}
	res := list(t, e, countReads(t, m.Endpoint), "", "1")
	if !res.Succeeded() || res.EntriesMore == nil || len(res.Entries) == 0 || int64(len(res.Entries))+res.EntriesMore.Entries != 200 {
		t.Fatalf("list: %d entries, more %+v", len(res.Entries), res.EntriesMore)
	}
	var listed, more int64
	for i, e := range res.Entries {
		listed += e.Bytes
		if i > 0 && e.Bytes > res.Entries[i-1].Bytes {
			t.Errorf("entry %d (%d bytes) after a smaller one", i, e.Bytes)
		}
	}
	for i := range 200 {
		more += int64(1000 + i)
	}
	if listed+res.EntriesMore.Bytes != more || res.Entries[0].Bytes != 1199 {
		t.Errorf("listed %d bytes + %d left out, want %d in all, the largest (1199) first", listed, res.EntriesMore.Bytes, more)
	}
}

func sameEntries(got, want []archive.TreeEntry) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
