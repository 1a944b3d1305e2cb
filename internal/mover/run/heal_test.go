package run

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine"
	"github.com/okgoes/okgoes-operator/internal/mover/engine/kopia"
)

// The faults of issue 30 that a repository must heal from: one blob of the repository lost or
// damaged, then the next scheduled backup (the real mover code, real MinIO) must produce a
// backup that verifies in full and restores the volume exactly.

// repoBlobs lists the keys of the repository's blobs whose names start with kind (p, q or x),
// oldest first.
func repoBlobs(t *testing.T, s3 *minio.Client, kind string) []string {
	t.Helper()
	type obj struct {
		key string
		at  time.Time
	}
	var objs []obj
	for o := range s3.ListObjects(context.Background(), "backups", minio.ListObjectsOptions{Prefix: "ns/app/kopia/" + kind, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		objs = append(objs, obj{o.Key, o.LastModified})
	}
	slices.SortStableFunc(objs, func(a, b obj) int { return a.at.Compare(b.at) })
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, o.key)
	}
	return keys
}

func removeObject(t *testing.T, s3 *minio.Client, key string) {
	t.Helper()
	if err := s3.RemoveObject(context.Background(), "backups", key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// healVolume is a small volume: files of one chunk (one large enough to dominate its pack), and
// directories.
func healVolume(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "big"), 2<<20, 1)
	for i := range 5 {
		randomFile(t, filepath.Join(src, "dir", "f"+string(rune('a'+i))), 4096, byte(10+i))
	}
	return src
}

// backupVerifiedAndRestorable runs the next backup and fails t unless it succeeds, verifies in
// full (spec.verify's Job) and restores src exactly; it returns the backup's result.
func backupVerifiedAndRestorable(t *testing.T, e env, src, run string) Result {
	t.Helper()
	ctx := context.Background()
	nextRun(e, run)
	e[EnvKopiaCacheDir] = t.TempDir() // each Job has its own cache
	res := Backup(ctx, e.get, "test")
	if !res.Succeeded() {
		t.Fatalf("the backup after the damage failed: %+v", res)
	}
	if v := Verify(ctx, e.get); !v.Succeeded() {
		t.Fatalf("the backup after the damage does not verify: %+v", v)
	}
	e[EnvTargetDir], e[EnvOverwrite] = t.TempDir(), ""
	if r := Restore(ctx, e.get); !r.Succeeded() {
		t.Fatalf("the backup after the damage does not restore: %+v", r)
	}
	sameTree(t, src, e[EnvTargetDir])
	return res
}

// A lost metadata blob (q…: the source's policy, directories, snapshot manifests) made every
// later backup fail ("unable to find policy for source") and every restore too.
func TestKopiaBackupAfterALostMetadataBlobSucceedsVerified(t *testing.T) {
	src := healVolume(t)
	probe, _, s3 := kopiaSetup(t, src)
	if res := Backup(context.Background(), probe.get, "test"); !res.Succeeded() {
		t.Fatalf("first backup = %+v", res)
	}
	count := len(repoBlobs(t, s3, "q"))
	if count == 0 {
		t.Fatal("the repository has no metadata blob")
	}
	for i := range count { // each one lost in turn: any single loss heals
		t.Run("blob"+string(rune('0'+i)), func(t *testing.T) {
			e, _, s3 := kopiaSetup(t, src)
			if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
				t.Fatalf("first backup = %+v", res)
			}
			lost := repoBlobs(t, s3, "q")[i]
			removeObject(t, s3, lost)
			res := backupVerifiedAndRestorable(t, e, src, "20261203T030000Z")
			if !strings.Contains(res.Repair, "dropped from the index") {
				t.Errorf("the backup does not say what it repaired after %s was lost: %q", lost, res.Repair)
			}
			t.Logf("lost %s; repair: %s", lost, res.Repair)
		})
	}
}

// A lost index blob (x…) hid the snapshots, policies and chunks it indexed, while their packs
// were still in the bucket; the next backup rebuilds the index from the packs, so that every
// earlier backup is readable again as well as the new one.
func TestKopiaBackupAfterALostIndexBlobRebuildsTheIndex(t *testing.T) {
	src := healVolume(t)
	probe, _, s3 := kopiaSetup(t, src)
	runs := func(e env) {
		t.Helper()
		ctx := context.Background()
		if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
			t.Fatalf("first backup = %+v", res)
		}
		randomFile(t, filepath.Join(src, "dir", "new"), 8192, 77)
		defer os.Remove(filepath.Join(src, "dir", "new"))
		nextRun(e, "20261203T030000Z")
		if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
			t.Fatalf("second backup = %+v", res)
		}
	}
	runs(probe)
	count := len(repoBlobs(t, s3, "x"))
	if count == 0 {
		t.Fatal("the repository has no index blob")
	}
	for i := range count {
		t.Run("blob"+string(rune('0'+i)), func(t *testing.T) {
			e, _, s3 := kopiaSetup(t, src)
			runs(e)
			lost := repoBlobs(t, s3, "x")[i]
			removeObject(t, s3, lost)
			res := backupVerifiedAndRestorable(t, e, src, "20261203T040000Z")
			t.Logf("lost %s; repair: %s", lost, res.Repair)
			if !strings.Contains(res.Repair, "rebuilt the lost index") {
				t.Errorf("the backup does not say that it rebuilt the index lost with %s: %q", lost, res.Repair)
			}
			for _, run := range []string{"20261203T020000Z", "20261203T030000Z"} {
				nextRun(e, run)
				if v := Verify(context.Background(), e.get); !v.Succeeded() {
					t.Errorf("backup %s, whose data was still in the bucket, is not readable after the index was rebuilt: %+v", run, v)
				}
			}
		})
	}
}

// corruptPack flips two runs of 16 bytes inside the largest data pack (the one holding "big").
func corruptPack(t *testing.T, s3 *minio.Client) string {
	t.Helper()
	var key string
	var size int64
	for _, k := range repoBlobs(t, s3, "p") {
		if st, err := s3.StatObject(context.Background(), "backups", k, minio.StatObjectOptions{}); err == nil && st.Size > size {
			key, size = k, st.Size
		}
	}
	if key == "" {
		t.Fatal("the repository has no data pack")
	}
	data := get(t, s3, key)
	for _, at := range []int{len(data) / 3, len(data) / 2} {
		for i := range 16 {
			data[at+i] ^= 0x5a
		}
	}
	put(t, s3, key, data)
	return key
}

// Two 16-byte flips in a data pack made every later backup deduplicate the unchanged file onto
// the damaged chunk and fail verification for ever. The damage is found either by the next
// backup's sampled read (all of it here: the day's slice is the whole repository at 100 %) or
// by spec.verify's full read; the backup after that uploads the chunk again and verifies.
func TestKopiaBackupAfterACorruptDataPackUploadsItAgain(t *testing.T) {
	t.Run("found by the backup's sampled read", func(t *testing.T) {
		t.Setenv(kopiarepo.EnvVerifyPercent, "100")
		src := healVolume(t)
		e, _, s3 := kopiaSetup(t, src)
		if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
			t.Fatalf("first backup = %+v", res)
		}
		pack := corruptPack(t, s3)
		res := backupVerifiedAndRestorable(t, e, src, "20261203T030000Z")
		if !strings.Contains(res.Repair, pack[len("ns/app/kopia/"):]) || res.Bytes < 2<<20 {
			t.Errorf("the backup did not name the corrupt pack %s or did not upload its chunk again (%d bytes): %q", pack, res.Bytes, res.Repair)
		}
	})
	t.Run("found by spec.verify", func(t *testing.T) {
		t.Setenv(kopiarepo.EnvVerifyPercent, "0") // no sampled read: only verify finds it
		ctx := context.Background()
		src := healVolume(t)
		e, _, s3 := kopiaSetup(t, src)
		if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
			t.Fatalf("first backup = %+v", res)
		}
		pack := corruptPack(t, s3)
		nextRun(e, "20261203T030000Z")
		if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
			t.Fatalf("second backup = %+v", res)
		}
		v := Verify(ctx, e.get)
		if v.Reason != ReasonRepositoryDamaged || !strings.Contains(v.Message, pack[len("ns/app/kopia/"):]) ||
			!strings.Contains(v.Message, "big") || !strings.Contains(v.Message, "next backup") {
			t.Fatalf("verify of a backup deduplicated onto a corrupt chunk = %+v, want %s naming the pack, the file and what happens next",
				v, ReasonRepositoryDamaged)
		}
		backupVerifiedAndRestorable(t, e, src, "20261203T040000Z")
	})
}

// A Clean restore of a backup whose data is corrupt emptied the target, then failed half-way:
// the snapshot's every chunk is now read before anything is deleted.
func TestKopiaCleanRestoreOfACorruptBackupKeepsTheTarget(t *testing.T) {
	ctx := context.Background()
	src := healVolume(t)
	e, _, s3 := kopiaSetup(t, src)
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup = %+v", res)
	}
	pack := corruptPack(t, s3)
	target := t.TempDir()
	precious := filepath.Join(target, "precious")
	if err := os.WriteFile(precious, []byte("the only copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	e[EnvTargetDir], e[EnvOverwrite] = target, "Clean"
	e[EnvKopiaCacheDir] = t.TempDir()
	res := Restore(ctx, e.get)
	if res.Reason != ReasonRepositoryDamaged || !strings.Contains(res.Message, "the target volume was not changed") ||
		!strings.Contains(res.Message, pack[len("ns/app/kopia/"):]) || !strings.Contains(res.Message, "big") {
		t.Errorf("Clean restore of a corrupt backup = %+v, want %s naming the pack and the file, target not changed", res, ReasonRepositoryDamaged)
	}
	if got, err := os.ReadFile(precious); err != nil || string(got) != "the only copy" {
		t.Fatalf("the target was changed by a restore that could not read its backup: %q, %v", got, err)
	}
}

// A lost data pack (p…): every later backup deduplicated the unchanged files onto the lost
// chunks, and none of them could be restored. The next backup drops the lost contents from the
// index and reads every file again, so that it uploads them again.
func TestKopiaBackupAfterALostDataPackUploadsItAgain(t *testing.T) {
	src := healVolume(t)
	e, _, s3 := kopiaSetup(t, src)
	if res := Backup(context.Background(), e.get, "test"); !res.Succeeded() {
		t.Fatalf("first backup = %+v", res)
	}
	packs := repoBlobs(t, s3, "p")
	if len(packs) == 0 {
		t.Fatal("the repository has no data pack")
	}
	for _, p := range packs {
		removeObject(t, s3, p)
	}
	res := backupVerifiedAndRestorable(t, e, src, "20261203T030000Z")
	if !strings.Contains(res.Repair, packs[0][len("ns/app/kopia/"):]) || res.Bytes < 2<<20 {
		t.Errorf("the backup did not name the lost pack %s or did not upload its data again (%d bytes): %q", packs[0], res.Bytes, res.Repair)
	}
}

// With the default sampled read (DefaultVerifyPercent of the packs, a slice that changes every
// day) and no spec.verify, a corrupt pack is found, and a verified backup made, within
// 100/DefaultVerifyPercent daily runs: every pack is in one day's slice of that many days. The
// runs until then deduplicate onto the damaged chunk. The test logs the count (docs/kopia.md).
func TestKopiaCorruptPackIsHealedWithinTheSamplingPeriod(t *testing.T) {
	ctx := context.Background()
	src := healVolume(t)
	e, m, s3 := kopiaSetup(t, src)
	day := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	backup := func(run int) {
		t.Helper()
		nextRun(e, day.Add(time.Duration(run)*24*time.Hour).Format("20060102T150405Z"))
		e[EnvKopiaCacheDir] = t.TempDir()
		cfg, store := storeOf(t, e)
		clock := day.Add(time.Duration(run) * 24 * time.Hour)
		eng := cfg.Engine.(kopia.Engine)
		eng.Now = func() time.Time { return clock }
		if _, err := eng.Backup(ctx, engine.S3{Store: store, Config: cfg.Store}, cfg.Job); err != nil {
			t.Fatalf("backup of day %d: %v", run, err)
		}
	}
	backup(0)
	corruptPack(t, s3)
	// verified reads the newest snapshot back in full, as a new pod would (its own connection),
	// without dropping anything (spec.verify would).
	verified := func() bool {
		t.Helper()
		r := openTestRepo(t, m, kopiarepo.Options{NoCreate: true, NoDiskCache: true})
		defer r.Close(ctx)
		snaps, err := r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Verify(ctx, snaps[len(snaps)-1].ID)
		return err == nil
	}
	period := int(100 / kopiarepo.DefaultVerifyPercent)
	for run := 1; run <= period; run++ {
		backup(run)
		if verified() {
			t.Logf("the corrupt pack was found and the backup verified at daily run %d of at most %d", run, period)
			return
		}
	}
	t.Errorf("no backup verified within %d daily runs at %v %% sampled", period, kopiarepo.DefaultVerifyPercent)
}
