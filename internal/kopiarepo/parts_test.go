package kopiarepo

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot/snapshotfs"
)

// A file larger than BackupOptions.PartBytes is chunked in parts from fixed offsets (kopia reads
// the parts at once): its chunk list has a boundary at every multiple of the part size, a page
// rewritten in place uploads only the chunks around it, and it restores pack by pack. Fails
// without the parts (one buzhash chunk stream over the whole file: no boundary falls exactly
// on 4 MiB and 8 MiB).
func TestLargeFilesAreBackedUpInParts(t *testing.T) {
	b := newBucket(t)
	const prefix, part = "volumes/image", 4 << 20
	src := t.TempDir()
	data := randomBytes(t, 2*part+part/2+12345)
	writeFile(t, filepath.Join(src, "disk.img"), data, 0o600)
	r := openRepo(t, b.config(prefix), testPassword)
	ctx := testContext(t)
	if _, err := r.Backup(ctx, src, BackupOptions{PartBytes: part}); err != nil {
		t.Fatal(err)
	}
	copy(data[part+4096:], randomBytes(t, 8192)) // one page of the second part
	writeFile(t, filepath.Join(src, "disk.img"), data, 0o600)
	before := sum(b.objects(t, prefix))
	snap, err := r.Backup(ctx, src, BackupOptions{PartBytes: part})
	if err != nil {
		t.Fatal(err)
	}
	if up := sum(b.objects(t, prefix)) - before; up > 4<<20 {
		t.Errorf("rewriting 8 KiB of a part uploaded %d bytes, want the chunks around it (at most 4 MiB)", up)
	}

	man, err := r.load(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		t.Fatal(err)
	}
	dir, ok := root.(fs.Directory)
	if !ok {
		t.Fatal("the snapshot's root is not a directory")
	}
	e, err := dir.Child(ctx, "disk.img")
	if err != nil {
		t.Fatal(err)
	}
	chunks, ok := chunksOf(ctx, r.rep, e.(object.HasObjectID).ObjectID(), e.Size())
	if !ok {
		t.Fatal("the file's chunks could not be listed")
	}
	var starts []int64
	for _, c := range chunks {
		starts = append(starts, c.Start)
	}
	for _, at := range []int64{part, 2 * part} {
		if !slices.Contains(starts, at) {
			t.Errorf("no chunk starts at %d (a part boundary); chunks start at %v", at, starts)
		}
	}
	counted := countRequests(t, b.minio.Endpoint)
	restoreThrough(t, counted, b.config(prefix), snap.ID, src)
	if gets, packs := counted.packGets(prefix), len(b.objects(t, prefix+"/p")); gets > packs {
		t.Errorf("restoring the file took %d GETs of %d packs, want at most one per pack", gets, packs)
	}
}

func sum(sizes map[string]int64) (n int64) {
	for _, s := range sizes {
		n += s
	}
	return n
}
