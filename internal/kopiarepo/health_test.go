package kopiarepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/object"
	"github.com/minio/minio-go/v7"
)

// blobsByAge lists the repository's blobs whose names start with kind (q, x, p), oldest first.
func (b bucket) blobsByAge(t *testing.T, prefix, kind string) []string {
	t.Helper()
	type obj struct {
		key string
		t   int64
	}
	var objs []obj
	for o := range b.admin.ListObjects(context.Background(), testBucket, minio.ListObjectsOptions{Prefix: prefix + "/" + kind, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		objs = append(objs, obj{o.Key, o.LastModified.UnixNano()})
	}
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].t < objs[j].t })
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.key)
	}
	return keys
}

func (b bucket) remove(t *testing.T, key string) {
	t.Helper()
	if err := b.admin.RemoveObject(context.Background(), testBucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// twoBackups makes a repository under prefix with two snapshots of a changing tree and returns
// them, with the index blobs that the second backup added.
func twoBackups(t *testing.T, b bucket, prefix string) (cfg S3Config, src string, first, second SnapshotInfo, secondIndexes []string) {
	t.Helper()
	cfg = b.config(prefix)
	src = t.TempDir()
	writeVolume(t, src)
	r := openRepo(t, cfg, testPassword)
	first, err := r.Backup(testContext(t), src, BackupOptions{Source: "ns/pvc", Tags: map[string]string{"backup": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	before := b.blobsByAge(t, prefix, "x")
	writeFile(t, filepath.Join(src, "new", "file"), randomBytes(t, 100<<10), 0o644)
	second, err = r.Backup(testContext(t), src, BackupOptions{Source: "ns/pvc", Tags: map[string]string{"backup": "two"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range b.blobsByAge(t, prefix, "x") {
		if !slices.Contains(before, k) {
			secondIndexes = append(secondIndexes, k)
		}
	}
	return cfg, src, first, second, secondIndexes
}

// A lost metadata pack holding manifests (the oldest q blob: the policies written when the
// repository was made). kopia alone then failed every manifest lookup, so every backup, listing
// and restore; with KOPIA_IGNORE_MALFORMED_MANIFEST_CONTENTS (set by this package, heal.go) the
// manifests of the other packs load: both snapshots stay listed and readable, a backup
// succeeds, and Health names the lost blob.
func TestHealthOfALostManifestPack(t *testing.T) {
	b := newBucket(t)
	cfg, src, first, second, _ := twoBackups(t, b, "lost-q")
	q := b.blobsByAge(t, "lost-q", "q")[0]
	b.remove(t, q)

	r := openRepo(t, cfg, testPassword)
	ctx := testContext(t)
	if _, err := r.Backup(ctx, src, BackupOptions{Source: "ns/pvc"}); err != nil {
		t.Errorf("backup after the loss of the policies' pack: %v", err)
	}
	snaps, err := r.List(ctx)
	if err != nil || len(snaps) < 2 || snaps[0].ID != first.ID || snaps[1].ID != second.ID {
		t.Errorf("list after the loss: %+v, %v, want %s and %s first", snaps, err, first.ID, second.ID)
	}
	if _, err := r.Check(ctx, first.ID); err != nil {
		t.Errorf("check of the first snapshot: %v", err)
	}
	h, err := r.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("health: %+v", h)
	id := strings.TrimPrefix(q, "lost-q/")
	if h.ListError != nil || !h.Damaged() || len(h.LostBlobs) != 1 || h.LostBlobs[0].ID != id || !h.LostBlobs[0].Metadata {
		t.Errorf("health = %+v, want lost blob %s", h, id)
	}
}

// A lost index blob (the one the second backup wrote): the second snapshot is gone from the
// list without an error (the catalog finds its manifest without a snapshot), the first is
// intact, and a new backup still succeeds.
func TestHealthOfALostIndexBlob(t *testing.T) {
	b := newBucket(t)
	cfg, src, first, second, xs := twoBackups(t, b, "lost-x")
	if len(xs) == 0 {
		t.Fatal("the second backup wrote no index blob")
	}
	t.Logf("index blobs of the second backup: %v", xs)
	b.remove(t, xs[len(xs)-1])

	r := openRepo(t, cfg, testPassword)
	ctx := testContext(t)
	h, err := r.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("health: %+v", h)
	var ids []string
	for _, s := range h.Snapshots {
		ids = append(ids, s.ID)
	}
	if len(h.UnindexedPacks) == 0 || h.Damaged() {
		t.Errorf("health = %+v, want the second backup's packs in no index, and no damage found by the mover", h)
	}
	if !slices.Contains(ids, first.ID) || slices.Contains(ids, second.ID) || h.ListError != nil || h.Problems[first.ID] != "" {
		t.Errorf("snapshots after the loss %v (problems %v), want %s and not %s", ids, h.Problems, first.ID, second.ID)
	}
	_, err = r.Check(ctx, second.ID)
	t.Logf("check of the second: %v", err)
	if _, err := r.Backup(ctx, src, BackupOptions{Source: "ns/pvc"}); err != nil {
		t.Errorf("backup after a lost index: %v", err)
	}
}

// A lost data pack: Health names it and each snapshot whose files were in it (all of them
// here: the big file is in both), by path, reading no file data.
func TestHealthOfALostDataPack(t *testing.T) {
	b := newBucket(t)
	cfg, _, first, second, _ := twoBackups(t, b, "lost-p")
	ps := b.blobsByAge(t, "lost-p", "p")
	b.remove(t, ps[0])
	r := openRepo(t, cfg, testPassword)
	h, err := r.Health(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("health: %+v", h)
	if len(h.LostBlobs) != 1 || h.LostBlobs[0].Metadata || h.Problems[first.ID] == "" || h.Problems[second.ID] == "" {
		t.Errorf("health = %+v, want the lost pack and both snapshots damaged", h)
	}
}

// What Health costs per run on a repository of many files (not in make test; docs/backup-restore.md
// "Repository checks" has the numbers):
//
//	HEALTH_FILES=100000 go test -run TestHealthCost -v ./internal/kopiarepo/
func TestHealthCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HEALTH_FILES"))
	if n == 0 {
		t.Skip("HEALTH_FILES is not set")
	}
	b := newBucket(t)
	cfg := b.config("cost")
	src := t.TempDir()
	for i := 0; i < n; i++ {
		writeFile(t, filepath.Join(src, fmt.Sprintf("d%03d", i%1000), fmt.Sprintf("f%06d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644)
	}
	r := openRepo(t, cfg, testPassword)
	ctx := testContext(t)
	if _, err := r.Backup(ctx, src, BackupOptions{Source: "ns/pvc"}); err != nil {
		t.Fatal(err)
	}
	r2, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir()}) // a new Job: empty cache
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	start := time.Now()
	h, err := r2.Health(ctx)
	if err != nil || h.Damaged() {
		t.Fatalf("health: %+v, %v", h, err)
	}
	healthy := time.Since(start)
	// The worst case of a lost pack: a walk of the whole tree (a loss in none of it).
	dr := r2.rep.(repo.DirectRepository)
	deps := &dependencies{rep: r2.rep, cr: dr.ContentReader(), lost: map[blob.ID]*LostBlob{"pnone": {ID: "pnone"}}, seen: map[object.ID]string{}}
	start = time.Now()
	if p, err := deps.ofSnapshot(ctx, h.Snapshots[0]); p != "" || err != nil {
		t.Fatalf("walk: %q, %v", p, err)
	}
	walk := time.Since(start)
	// The same with a lost pack: every snapshot's tree is walked.
	ps := b.blobsByAge(t, "cost", "p")
	b.remove(t, ps[len(ps)-1])
	r3, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close(context.Background())
	start = time.Now()
	h, err = r3.Health(ctx)
	if err != nil || !h.Damaged() {
		t.Fatalf("health after a lost pack: %+v, %v", h.LostBlobs, err)
	}
	t.Logf("%d files: Health %v on a healthy repository; a lost pack: %v (the walk stops at the first loss), %v to walk the whole tree",
		n, healthy.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), walk.Round(time.Millisecond))
}
