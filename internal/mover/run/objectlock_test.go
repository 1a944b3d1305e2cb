package run

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// lockedSetup is kopiaSetup in a bucket made with object lock, the repository asking for a
// COMPLIANCE lock of 48 h, and a client with the very credentials the mover gets.
func lockedSetup(t *testing.T, src string) (env, *minio.Client) {
	t.Helper()
	e, _, _ := kopiaSetup(t, src)
	s3, err := minio.New(e[EnvEndpoint], &minio.Options{Creds: credentials.NewStaticV4(e[EnvAccessKey], e[EnvSecretKey], "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.MakeBucket(context.Background(), "locked", minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		t.Fatal(err)
	}
	e[EnvBucket] = "locked"
	e[EnvKopiaRetentionMode] = RetentionCompliance
	e[EnvKopiaRetentionPeriod] = "48h"
	e[EnvKopiaRecordKey] = "ns/app/" + RepositoryRecordName
	return e, s3
}

// locked reports whether the mover locks the object at key: kopia's blobs
// (repo.GetLockingStoragePrefixes) and the manifests.
func locked(key string) bool {
	if strings.HasSuffix(key, ManifestSuffix) {
		return true
	}
	name, ok := strings.CutPrefix(key, "ns/app/kopia/")
	if !ok {
		return false
	}
	for _, p := range repo.GetLockingStoragePrefixes() {
		if strings.HasPrefix(name, string(p)) {
			return true
		}
	}
	return false
}

// The story of issue 34's object lock, on a real MinIO bucket with object lock: two backups into
// a locked repository; then someone holding the operator's own S3 credentials tries to destroy
// them. Deleting any locked version (by its version id) fails. Deleting a key without a version
// id, and putting over it, succeed, as S3 allows: a delete marker or a new version on top, the
// locked version kept underneath. After that the backup no longer restores as the bucket shows
// it now, and restores byte for byte as the bucket held it before the attack
// (KOPIA_POINT_IN_TIME).
func TestKopiaLockedBackupSurvivesTheOperatorsOwnCredentials(t *testing.T) {
	src := t.TempDir()
	for i := range 4 {
		randomFile(t, filepath.Join(src, "data", "f"+string(rune('a'+i))), 1<<20, byte(i))
	}
	e, s3 := lockedSetup(t, src)
	ctx := context.Background()

	first := Backup(ctx, e.get, "test")
	if !first.Succeeded() || first.RetentionMode != RetentionCompliance || first.RetentionPeriod != "48h0m0s" {
		t.Fatalf("first backup into a locked repository = %+v", first)
	}
	firstManifest := e[EnvManifestKey]
	_, firstUntil, err := s3.GetObjectRetention(ctx, "locked", firstManifest, "")
	if err != nil || firstUntil == nil {
		t.Fatalf("the first manifest is not locked: %v", err)
	}
	time.Sleep(1100 * time.Millisecond) // S3 keeps the retain-until date in seconds
	randomFile(t, filepath.Join(src, "data", "fb"), 1<<20, 100)
	nextRun(e, "20261203T030000Z")
	if second := Backup(ctx, e.get, "test"); !second.Succeeded() || second.MaintenanceError != "" {
		t.Fatalf("second backup = %+v", second)
	}
	// Each run moves the lock of the manifests still there forward, as maintenance does for
	// kopia's blobs in use: a backup kept longer than the period stays locked.
	if _, until, err := s3.GetObjectRetention(ctx, "locked", firstManifest, ""); err != nil || !until.After(*firstUntil) {
		t.Errorf("the second run left the first manifest locked until %v (%v), as the first run did (%v)", until, err, firstUntil)
	}
	for o := range s3.ListObjects(ctx, "locked", minio.ListObjectsOptions{Prefix: "ns/app/", Recursive: true}) {
		if !locked(o.Key) {
			continue
		}
		if mode, until, err := s3.GetObjectRetention(ctx, "locked", o.Key, ""); err != nil || mode == nil || *mode != minio.Compliance ||
			until.Before(time.Now().Add(47*time.Hour)) {
			t.Errorf("%s: retention %v until %v (%v), want COMPLIANCE for 48h", o.Key, mode, until, err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	beforeAttack := time.Now()
	time.Sleep(1100 * time.Millisecond)

	var versions []minio.ObjectInfo
	for o := range s3.ListObjects(ctx, "locked", minio.ListObjectsOptions{Prefix: "ns/app/", Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		versions = append(versions, o)
	}
	refused, deleted := 0, 0
	for _, o := range versions {
		err := s3.RemoveObject(ctx, "locked", o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID})
		switch {
		case locked(o.Key) && err == nil:
			t.Errorf("deleting version %s of %s, locked, succeeded", o.VersionID, o.Key)
		case locked(o.Key):
			refused++
		case err == nil:
			deleted++ // kopia's logs, the progress report, the record: not part of a backup
		}
		// In COMPLIANCE mode not even the bypass header helps, and the lock cannot be shortened.
		if !locked(o.Key) {
			continue
		}
		if s3.RemoveObject(ctx, "locked", o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID, GovernanceBypass: true}) == nil {
			t.Errorf("deleting version %s of %s with the governance bypass succeeded", o.VersionID, o.Key)
		}
		soon, mode := time.Now().Add(time.Minute).UTC(), minio.Compliance
		if s3.PutObjectRetention(ctx, "locked", o.Key, minio.PutObjectRetentionOptions{VersionID: o.VersionID, Mode: &mode,
			RetainUntilDate: &soon, GovernanceBypass: true}) == nil {
			t.Errorf("shortening the lock of version %s of %s succeeded", o.VersionID, o.Key)
		}
	}
	t.Logf("%d locked versions refused deletion; %d unlocked versions (logs, progress, record) deleted", refused, deleted)
	for i, o := range versions {
		if !locked(o.Key) {
			continue
		}
		if i%2 == 0 {
			if err := s3.RemoveObject(ctx, "locked", o.Key, minio.RemoveObjectOptions{}); err != nil {
				t.Errorf("delete %s without a version id (a delete marker): %v", o.Key, err)
			}
			continue
		}
		garbage := bytes.Repeat([]byte{0xAA}, 64)
		if _, err := s3.PutObject(ctx, "locked", o.Key, bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{}); err != nil {
			t.Errorf("put over %s: %v", o.Key, err)
		}
	}

	e[EnvTargetDir] = t.TempDir()
	if res := Restore(ctx, e.get); res.Succeeded() {
		t.Fatalf("the backup restored as the bucket shows it after the attack: the attack did nothing, this test proves nothing (%+v)", res)
	} else {
		t.Logf("as the bucket shows it now: %s: %s", res.Reason, res.Message)
	}
	e[EnvKopiaPointInTime] = beforeAttack.UTC().Format(time.RFC3339Nano)
	e[EnvTargetDir] = t.TempDir()
	if res := Restore(ctx, e.get); !res.Succeeded() || res.Files != 4 {
		t.Fatalf("restore as of before the attack = %+v", res)
	}
	sameTree(t, src, e[EnvTargetDir])
}

// A backup asking for object lock into a bucket made without it fails BucketNotLockable naming
// the bucket, and writes nothing of a repository.
func TestKopiaLockedBackupIntoAnUnlockableBucketWritesNothing(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, _, s3 := kopiaSetup(t, src)
	e[EnvKopiaRetentionMode] = RetentionGovernance
	e[EnvKopiaRetentionPeriod] = "168h"
	res := Backup(context.Background(), e.get, "test")
	t.Logf("%s: %s", res.Reason, res.Message)
	if res.Reason != ReasonBucketNotLockable || !strings.Contains(res.Message, "backups") {
		t.Fatalf("backup = %+v, want %s naming the bucket", res, ReasonBucketNotLockable)
	}
	for o := range s3.ListObjects(context.Background(), "backups", minio.ListObjectsOptions{Prefix: "ns/app/kopia/", Recursive: true, WithVersions: true}) {
		t.Errorf("the refused backup wrote %s", o.Key)
	}
}

// A repository keeps the retention it was created with: a backup asking for another one fails
// ImmutabilityMismatch saying what the repository has, and adds no snapshot; asking for none
// backs up (the repository still locks what it writes) and reports the repository's.
func TestKopiaBackupAskingForAnotherRetentionChangesNothing(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, s3 := lockedSetup(t, src)
	ctx := context.Background()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("first backup = %+v", res)
	}
	e[EnvKopiaRetentionMode], e[EnvKopiaRetentionPeriod] = RetentionGovernance, "720h"
	nextRun(e, "20261203T030000Z")
	res := Backup(ctx, e.get, "test")
	if res.Reason != ReasonImmutabilityMismatch || !strings.Contains(res.Message, "COMPLIANCE for 48h0m0s") ||
		res.RetentionMode != RetentionCompliance || res.RetentionPeriod != "48h0m0s" {
		t.Fatalf("backup asking for GOVERNANCE 720h = %+v, want %s saying the repository's COMPLIANCE for 48h0m0s", res, ReasonImmutabilityMismatch)
	}
	if _, err := s3.StatObject(ctx, "locked", e[EnvManifestKey], minio.StatObjectOptions{}); err == nil {
		t.Error("the refused backup wrote its manifest")
	}
	delete(e, EnvKopiaRetentionMode)
	delete(e, EnvKopiaRetentionPeriod)
	nextRun(e, "20261203T040000Z")
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() || res.RetentionMode != RetentionCompliance {
		t.Errorf("backup asking for no lock = %+v, want it made, reporting the repository's COMPLIANCE lock", res)
	}
}
