package kopiarepo

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// heldBytes is what the bucket holds under prefix: the current objects' bytes, and every
// version's (what the bucket bills), delete markers excluded.
func heldBytes(t *testing.T, admin *minio.Client, bucket, prefix string) (current, versions int64) {
	t.Helper()
	for o := range admin.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.IsDeleteMarker {
			continue
		}
		versions += o.Size
		if o.IsLatest {
			current += o.Size
		}
	}
	return current, versions
}

// heldByKind is heldBytes's versions by the kind of blob: kopia's first letter of the name (p
// data packs, q metadata packs, x indexes, _ logs) or its whole name.
func heldByKind(t *testing.T, admin *minio.Client, bucket, prefix string) map[string]int64 {
	t.Helper()
	kinds := map[string]int64{}
	for o := range admin.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, WithVersions: true}) {
		if o.Err != nil || o.IsDeleteMarker {
			continue
		}
		name := strings.TrimPrefix(o.Key, prefix)
		kind := name[:1]
		if strings.HasPrefix(name, "kopia.") {
			kind = name
		}
		kinds[kind] += o.Size
	}
	return kinds
}

// dailyBackups runs days "daily" backups of an 8 MiB volume that rewrites 2 of its 8 files a
// day, keeping the last keep snapshots, each followed by full maintenance that deletes what no
// snapshot needs at once (SafetyNone: kopia's safe default waits 24 h, which a test cannot): the
// most space an unlocked repository gives back. It returns the bytes the backups uploaded.
func dailyBackups(t *testing.T, r *Repo, days, keep int) (uploaded int64) {
	t.Helper()
	ctx := testContext(t)
	src := t.TempDir()
	for i := range 8 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%d", i)), randomBytes(t, 1<<20), 0o644)
	}
	var snaps []string
	for day := range days {
		for i := range 2 {
			writeFile(t, filepath.Join(src, fmt.Sprintf("f%d", (2*day+i)%8)), randomBytes(t, 1<<20), 0o644)
		}
		snap, err := r.Backup(ctx, src, BackupOptions{Source: "shop/db"})
		if err != nil {
			t.Fatal(err)
		}
		uploaded += snap.UploadedBytes
		snaps = append(snaps, snap.ID)
		for len(snaps) > keep {
			if err := r.Delete(ctx, snaps[0]); err != nil {
				t.Fatal(err)
			}
			snaps = snaps[1:]
		}
		if err := r.Maintenance(ctx, true, SafetyNone); err != nil {
			t.Fatal(err)
		}
	}
	return uploaded
}

// What a lock costs, measured: the same seven daily backups (a quarter of the volume changed a
// day, the last three kept) into an unlocked bucket and into a locked one. In the unlocked bucket
// maintenance's deletes give the space back; in the locked one every blob kopia deleted stays, as
// a version behind a delete marker, until its lock expires: the bucket holds everything the
// backups uploaded during the period. Then the period is made to pass (GOVERNANCE lets these
// credentials shorten the locks with the bypass, standing in for the days a test cannot wait):
// the hidden versions can then be deleted, with the same credentials and no bypass, and the
// held bytes fall back to the repository's; the repository still restores.
func TestLockedRepositoryHoldsWhatMaintenanceDeletesUntilTheLockExpires(t *testing.T) {
	const days, keep = 7, 3
	plain := newBucket(t)
	r := openRepo(t, plain.config("volumes/db"), testPassword)
	plainUp := dailyBackups(t, r, days, keep)
	plainCur, plainAll := heldBytes(t, plain.admin, testBucket, "volumes/db/")

	admin, cfg := newLockedBucket(t, "volumes/db")
	ctx := testContext(t)
	lr, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir(), Retention: Retention{Mode: RetentionGovernance, Period: 48 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close(context.Background()) //nolint:errcheck
	lockedUp := dailyBackups(t, lr, days, keep)
	lockedCur, lockedAll := heldBytes(t, admin, lockedBucket, "volumes/db/")
	t.Logf("locked bucket by kind of blob, all versions: %v", heldByKind(t, admin, lockedBucket, "volumes/db/"))
	t.Logf("unlocked bucket: uploaded %d, repository %d, bucket holds %d bytes", plainUp, plainCur, plainAll)
	t.Logf("locked bucket:   uploaded %d, repository %d, bucket holds %d bytes (%.2f x the repository)", lockedUp, lockedCur, lockedAll,
		float64(lockedAll)/float64(lockedCur))
	if plainAll != plainCur {
		t.Errorf("the unlocked bucket holds %d bytes, its repository %d", plainAll, plainCur)
	}
	if lockedAll < lockedUp || lockedAll <= lockedCur {
		t.Errorf("the locked bucket holds %d bytes, less than the %d its backups uploaded: a locked blob was removed", lockedAll, lockedUp)
	}

	// The period passes.
	var hidden []minio.ObjectInfo
	for o := range admin.ListObjects(ctx, lockedBucket, minio.ListObjectsOptions{Prefix: "volumes/db/", Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if !o.IsLatest {
			hidden = append(hidden, o)
		}
	}
	if len(hidden) == 0 {
		t.Fatal("no hidden version: maintenance deleted nothing, this test proves nothing")
	}
	soon := time.Now().Add(2 * time.Second).UTC()
	gov := minio.Governance
	for _, o := range hidden {
		if o.IsDeleteMarker {
			continue
		}
		if !lockedName(strings.TrimPrefix(o.Key, "volumes/db/")) {
			continue // kopia.maintenance and the logs are not locked
		}
		if err := admin.RemoveObject(ctx, lockedBucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID}); err == nil {
			t.Fatalf("deleted locked version %s of %s before the lock expired", o.VersionID, o.Key)
		}
		if err := admin.PutObjectRetention(ctx, lockedBucket, o.Key, minio.PutObjectRetentionOptions{VersionID: o.VersionID,
			Mode: &gov, RetainUntilDate: &soon, GovernanceBypass: true}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	for _, o := range hidden {
		if err := admin.RemoveObject(ctx, lockedBucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID}); err != nil {
			t.Errorf("delete expired version %s of %s: %v", o.VersionID, o.Key, err)
		}
	}
	afterCur, afterAll := heldBytes(t, admin, lockedBucket, "volumes/db/")
	t.Logf("after the locks expired and the %d hidden versions were deleted: repository %d, bucket holds %d bytes", len(hidden), afterCur, afterAll)
	if afterAll != afterCur {
		t.Errorf("the bucket still holds %d bytes, its repository %d", afterAll, afterCur)
	}
	snaps, err := lr.List(ctx)
	if err != nil || len(snaps) != keep {
		t.Fatalf("%d snapshots (%v), want %d", len(snaps), err, keep)
	}
	if _, err := lr.Verify(ctx, snaps[len(snaps)-1].ID); err != nil {
		t.Errorf("the newest backup after the expired versions went: %v", err)
	}
}
