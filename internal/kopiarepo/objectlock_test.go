package kopiarepo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

const lockedBucket = "locked"

// newLockedBucket is a real MinIO with a bucket made with object lock (versioned), and the
// repository configuration under prefix in it.
func newLockedBucket(t *testing.T, prefix string) (*minio.Client, S3Config) {
	t.Helper()
	m := testenv.StartMinIO(t)
	admin, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), lockedBucket, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		t.Fatal(err)
	}
	return admin, S3Config{Prefix: prefix, Config: objectstore.Config{
		Endpoint: m.Endpoint, Bucket: lockedBucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Insecure: true}}
}

// retainUntil is the lock of every current object under prefix whose name kopia locks
// (repo.GetLockingStoragePrefixes); it fails t for one that is not locked in mode.
func retainUntil(t *testing.T, admin *minio.Client, prefix, mode string) map[string]time.Time {
	t.Helper()
	ctx := context.Background()
	locks := map[string]time.Time{}
	for o := range admin.ListObjects(ctx, lockedBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if !lockedName(strings.TrimPrefix(o.Key, prefix)) {
			continue
		}
		m, until, err := admin.GetObjectRetention(ctx, lockedBucket, o.Key, "")
		switch {
		case err != nil:
			t.Errorf("%s: no retention: %v", o.Key, err)
		case m == nil || string(*m) != mode || until == nil:
			t.Errorf("%s: retention %v until %v, want %s", o.Key, m, until, mode)
		default:
			locks[o.Key] = *until
		}
	}
	if len(locks) < 4 {
		t.Fatalf("only %d locked blobs under %s: %v", len(locks), prefix, locks)
	}
	return locks
}

func lockedName(name string) bool {
	for _, p := range repo.GetLockingStoragePrefixes() {
		if strings.HasPrefix(name, string(p)) {
			return true
		}
	}
	return false
}

// A repository created with a Retention writes every pack, index and format blob locked for the
// period, says so (Repo.Retention, Info), turns kopia's lock extension on, and full maintenance
// moves the lock of the blobs in use forward. A second Open asking for another retention keeps
// the repository's.
func TestLockedRepositoryLocksItsBlobsAndMaintenanceExtendsThem(t *testing.T) {
	admin, cfg := newLockedBucket(t, "volumes/db")
	ctx := testContext(t)
	want := Retention{Mode: RetentionCompliance, Period: 48 * time.Hour}
	r, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir(), Retention: want})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background()) //nolint:errcheck
	src := t.TempDir()
	writeVolume(t, src)
	start := time.Now()
	if _, err := r.Backup(ctx, src, BackupOptions{Source: "shop/db"}); err != nil {
		t.Fatal(err)
	}
	before := retainUntil(t, admin, "volumes/db/", "COMPLIANCE")
	for key, until := range before {
		if d := until.Sub(start); d < want.Period-time.Minute || d > want.Period+time.Minute {
			t.Errorf("%s locked for %v after the backup started, want %v", key, d, want.Period)
		}
	}
	if got, err := r.Retention(ctx); err != nil || got != want {
		t.Errorf("Retention() = %v, %v; want %v", got, err, want)
	}
	if info, err := r.Info(ctx); err != nil || info.Retention != want {
		t.Errorf("Info().Retention = %v, %v; want %v", info.Retention, err, want)
	}
	p, err := maintenance.GetParams(ctx, r.rep)
	if err != nil || !p.ExtendObjectLocks {
		t.Fatalf("maintenance params %+v (%v): the locks are not extended", p, err)
	}

	time.Sleep(2 * time.Second) // S3 keeps the retain-until date in seconds
	if err := r.Maintenance(ctx, true, SafetyFull); err != nil {
		t.Fatal(err)
	}
	after := retainUntil(t, admin, "volumes/db/", "COMPLIANCE")
	for key, until := range before {
		if a, ok := after[key]; ok && !a.After(until) {
			t.Errorf("%s: full maintenance left the lock at %v (was %v)", key, a, until)
		}
	}

	other, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir(), Retention: Retention{Mode: RetentionGovernance, Period: 72 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background()) //nolint:errcheck
	if got, _ := other.Retention(ctx); got != want {
		t.Errorf("an Open asking for another retention changed it to %v, want the repository's %v", got, want)
	}
}

// kopia refuses a period under a day, and could not keep the blobs in use locked with one under
// two: Open refuses both before it writes anything.
func TestRetentionTooShortToExtendIsRefused(t *testing.T) {
	admin, cfg := newLockedBucket(t, "volumes/db")
	for _, period := range []time.Duration{time.Hour, 47 * time.Hour} {
		_, err := Open(testContext(t), cfg, testPassword, Options{CacheDir: t.TempDir(), Retention: Retention{Mode: RetentionGovernance, Period: period}})
		if !errors.Is(err, ErrRetentionPeriod) {
			t.Errorf("Open with a %v lock: %v, want ErrRetentionPeriod", period, err)
		}
	}
	for o := range admin.ListObjects(context.Background(), lockedBucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		t.Errorf("a refused Open wrote %s", o.Key)
	}
}

// What someone holding the repository's S3 credentials can do to a locked repository within the
// period, and what still reads it. Deleting a key without a version id succeeds: S3 adds a
// delete marker and keeps the locked version. Putting over a key succeeds too: a new version on
// top. Deleting a locked version (by its id) fails. After that, the repository no longer opens
// as the bucket shows it now; opened as the bucket was before the attack (PointInTime) it
// restores byte for byte.
func TestPointInTimeRestoresALockedRepositoryAfterEveryKeyWasDeletedOrOverwritten(t *testing.T) {
	admin, cfg := newLockedBucket(t, "volumes/db")
	ctx := testContext(t)
	r, err := Open(ctx, cfg, testPassword, Options{CacheDir: t.TempDir(), Retention: Retention{Mode: RetentionCompliance, Period: 48 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := r.Backup(ctx, src, BackupOptions{Source: "shop/db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // versions are ordered by their second
	beforeAttack := time.Now()
	time.Sleep(1100 * time.Millisecond)

	var keys []minio.ObjectInfo
	for o := range admin.ListObjects(ctx, lockedBucket, minio.ListObjectsOptions{Prefix: "volumes/db/", Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o)
	}
	for _, o := range keys {
		if !lockedName(strings.TrimPrefix(o.Key, "volumes/db/")) {
			continue
		}
		if err := admin.RemoveObject(ctx, lockedBucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID}); err == nil {
			t.Errorf("deleting locked version %s of %s succeeded", o.VersionID, o.Key)
		}
	}
	for i, o := range keys {
		if i%2 == 0 {
			if err := admin.RemoveObject(ctx, lockedBucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
				t.Errorf("delete %s (a delete marker): %v", o.Key, err)
			}
			continue
		}
		garbage := bytes.Repeat([]byte{0xAA}, 64)
		if _, err := admin.PutObject(ctx, lockedBucket, o.Key, bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{}); err != nil {
			t.Errorf("overwrite %s: %v", o.Key, err)
		}
	}

	now := Options{NoCreate: true, NoDiskCache: true}
	if broken, err := Open(ctx, cfg, testPassword, now); err == nil {
		if _, err := broken.Restore(ctx, snap.ID, filepath.Join(t.TempDir(), "now")); err == nil {
			t.Error("the repository restored as the bucket shows it after the attack: the attack did nothing and this test proves nothing")
		}
		broken.Close(ctx) //nolint:errcheck
	} else {
		t.Logf("as the bucket shows it now, the repository does not open: %v", err)
	}

	asBefore := Options{NoCreate: true, NoDiskCache: true, PointInTime: &beforeAttack}
	old, err := Open(ctx, cfg, testPassword, asBefore)
	if err != nil {
		t.Fatalf("open as of %v: %v", beforeAttack, err)
	}
	defer old.Close(context.Background()) //nolint:errcheck
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := old.Restore(ctx, snap.ID, dst); err != nil {
		t.Fatalf("restore as of before the attack: %v", err)
	}
	assertSameTree(t, src, dst)

	// The stock CLI does the same with --point-in-time (the procedure docs/backup-restore.md gives).
	home := t.TempDir()
	kopia := func(args ...string) {
		t.Helper()
		cmd := exec.Command(kopiaCLI(t), append(args, "--config-file="+filepath.Join(home, "repository.config"))...)
		cmd.Env = append(os.Environ(), "HOME="+home, "KOPIA_LOG_DIR="+filepath.Join(home, "logs"), "KOPIA_CHECK_FOR_UPDATES=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kopia %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kopia("repository", "connect", "s3", "--bucket="+cfg.Bucket, "--endpoint="+cfg.Endpoint, "--disable-tls",
		"--prefix=volumes/db/", "--access-key="+cfg.AccessKey, "--secret-access-key="+cfg.SecretKey,
		"--password="+testPassword, "--cache-directory="+filepath.Join(home, "cache"),
		"--point-in-time="+beforeAttack.UTC().Format(time.RFC3339Nano))
	byCLI := filepath.Join(t.TempDir(), "cli")
	kopia("snapshot", "restore", snap.ID, byCLI)
	assertSameTree(t, src, byCLI)
}
