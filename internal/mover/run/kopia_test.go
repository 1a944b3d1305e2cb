package run

import (
	"context"
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

const kopiaTestPassword = "correct horse battery staple"

// kopiaSetup is setup for the kopia engine: the mover environment of a PVCBackup whose
// repository is ns/app/kopia.
// openTestRepo opens the repository of kopiaSetup in MinIO m, as a new pod would.
func openTestRepo(t *testing.T, m *testenv.MinIO, opts kopiarepo.Options) *kopiarepo.Repo {
	t.Helper()
	r, err := kopiarepo.Open(context.Background(), kopiarepo.S3Config{Config: objectstore.Config{Endpoint: m.Endpoint, Bucket: "backups", Insecure: true,
		AccessKey: m.AccessKey, SecretKey: m.SecretKey}, Prefix: "ns/app/kopia"}, kopiaTestPassword, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kopiaSetup(t *testing.T, source string) (env, *testenv.MinIO, *minio.Client) {
	t.Helper()
	e, m := setup(t, source)
	e[EnvEngine] = EngineKopia
	e[EnvKopiaPrefix] = "ns/app/kopia"
	e[EnvKopiaPassword] = kopiaTestPassword
	e[EnvKopiaCacheDir] = t.TempDir()
	e[EnvKopiaCacheLimit] = "67108864"
	e[EnvProgressKey] = "ns/app/20261203T020000Z.progress.json"
	s3, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return e, m, s3
}

// nextRun points e at the backup of another scheduled run.
func nextRun(e env, id string) {
	e[EnvBackupID] = id
	e[EnvArchiveKey] = "ns/app/" + id + ".tar.zst"
	e[EnvManifestKey] = "ns/app/" + id + ".manifest.json"
	e[EnvProgressKey] = "ns/app/" + id + ".progress.json"
}

func randomFile(t *testing.T, path string, size int, seed byte) {
	t.Helper()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{seed}).Read(data)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// sameTree fails t unless dst holds src's files, symlinks and directories with their content
// and modes.
func sameTree(t *testing.T, src, dst string) {
	t.Helper()
	n := 0
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(src, p)
		want, _ := os.Lstat(p)
		got, err := os.Lstat(filepath.Join(dst, rel))
		n++
		switch {
		case err != nil:
			t.Errorf("%s: %v", rel, err)
		case got.Mode() != want.Mode():
			t.Errorf("%s: mode %v, want %v", rel, got.Mode(), want.Mode())
		case want.Mode().IsRegular() && (got.Size() != want.Size() || sum(t, p) != sum(t, filepath.Join(dst, rel))):
			t.Errorf("%s: content differs", rel)
		case want.Mode()&fs.ModeSymlink != 0:
			a, _ := os.Readlink(p)
			b, _ := os.Readlink(filepath.Join(dst, rel))
			if a != b {
				t.Errorf("%s: symlink to %q, want %q", rel, b, a)
			}
		}
		return nil
	})
	if n < 2 {
		t.Fatalf("compared only %d entries", n)
	}
}

func TestKopiaBackupIsIncrementalEncryptedAndRestoresExactly(t *testing.T) {
	src := t.TempDir()
	for i := range 20 {
		randomFile(t, filepath.Join(src, "data", "f"+string(rune('a'+i))), 1<<20, byte(i))
	}
	randomFile(t, filepath.Join(src, "small.txt"), 100, 99)
	randomFile(t, filepath.Join(src, "same.txt"), 100, 99) // one object in kopia, two files
	os.Symlink("data/fa", filepath.Join(src, "link"))
	os.Mkdir(filepath.Join(src, "empty"), 0o700)
	e, _, s3 := kopiaSetup(t, src)
	ctx := context.Background()

	first := Backup(ctx, e.get, "test")
	if !first.Succeeded() || first.SnapshotID == "" || first.Files != 22 || first.RepositoryBytes < 20<<20 {
		t.Fatalf("first backup = %+v", first)
	}
	if first.KeyDerivation != kopiarepo.KeyDerivationScrypt {
		t.Errorf("a repository created without %s: key derivation %q, want kopia's default %q", EnvKopiaKeyDerivation,
			first.KeyDerivation, kopiarepo.KeyDerivationScrypt)
	}
	if first.Maintenance != "" || first.LastFullMaintenance != nil || first.LastQuickMaintenance != nil || first.MaintenanceError != "" {
		t.Errorf("a new repository's first maintenance is an interval away (nothing to collect yet), not in its first backup: %+v", first)
	}
	m := readManifestObject(t, s3, e[EnvManifestKey])
	if m.Engine != EngineKopia || m.Kopia.SnapshotID != first.SnapshotID || m.Kopia.Repository != "ns/app/kopia" ||
		m.Kopia.Source != "ns/data" || m.ContentBytes != 20<<20+200 || m.Symlinks != 1 {
		t.Errorf("manifest = %+v, kopia %+v", m, m.Kopia)
	}
	var p Progress
	if err := json.Unmarshal(get(t, s3, e[EnvProgressKey]), &p); err != nil || p.HashedBytes < 20<<20+200 || p.UploadedBytes != first.Bytes {
		t.Errorf("progress report = %+v (%v): the final report counts every byte hashed and uploaded", p, err)
	}

	// Encrypted: no object of the repository holds a byte run of the data.
	data, _ := os.ReadFile(filepath.Join(src, "data", "fc"))
	needle := data[4096 : 4096+64]
	for o := range s3.ListObjects(ctx, "backups", minio.ListObjectsOptions{Prefix: "ns/app/kopia/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if strings.Contains(string(get(t, s3, o.Key)), string(needle)) {
			t.Errorf("%s holds plaintext of the volume", o.Key)
		}
	}

	// Incremental: one rewritten file of 20 MiB uploads about 1 MiB.
	randomFile(t, filepath.Join(src, "data", "fb"), 1<<20, 200)
	nextRun(e, "20261203T030000Z")
	second := Backup(ctx, e.get, "test")
	if !second.Succeeded() || second.SnapshotID == first.SnapshotID {
		t.Fatalf("second backup = %+v", second)
	}
	if second.Bytes > 2<<20 || second.RepositoryBytes-first.RepositoryBytes > 3<<20 {
		t.Errorf("second backup uploaded %d bytes, repository grew %d -> %d: not incremental", second.Bytes, first.RepositoryBytes, second.RepositoryBytes)
	}
	t.Logf("first backup uploaded %d bytes, second %d; repository %d -> %d bytes", first.Bytes, second.Bytes, first.RepositoryBytes, second.RepositoryBytes)

	// Verify, then restore the second backup into an empty volume.
	if res := Verify(ctx, e.get); !res.Succeeded() || res.SnapshotID != second.SnapshotID || res.Files != 22 {
		t.Errorf("verify = %+v", res)
	}
	e[EnvTargetDir] = t.TempDir()
	res := Restore(ctx, e.get)
	if !res.Succeeded() || res.Files != 22 || res.Bytes != 20<<20+200 {
		t.Fatalf("restore = %+v", res)
	}
	sameTree(t, src, e[EnvTargetDir])
}

func readManifestObject(t *testing.T, s3 *minio.Client, key string) archive.Manifest {
	t.Helper()
	m, err := ReadManifest(strings.NewReader(string(get(t, s3, key))))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKopiaWrongPasswordIsAPreciseReasonAndTouchesNothing(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, _, _ := kopiaSetup(t, src)
	ctx := context.Background()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup = %+v", res)
	}
	e[EnvKopiaPassword] = "another password"
	e[EnvKopiaCacheDir] = t.TempDir()
	nextRun(e, "20261203T030000Z")
	if res := Backup(ctx, e.get, "test"); res.Reason != ReasonRepositoryPasswordWrong {
		t.Errorf("backup with a wrong password = %+v", res)
	}
	nextRun(e, "20261203T020000Z")
	target := t.TempDir()
	randomFile(t, filepath.Join(target, "keep"), 10, 2)
	e[EnvTargetDir], e[EnvOverwrite] = target, "Clean"
	res := Restore(ctx, e.get)
	if res.Reason != ReasonRepositoryPasswordWrong || !strings.Contains(res.Message, "the target volume was not changed") {
		t.Errorf("restore with a wrong password = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Errorf("a failed restore touched the target: %v", err)
	}
}

// KOPIA_KEY_DERIVATION chooses the key derivation of the repository the first backup creates,
// and the result reports the repository's; a value kopia does not know is a configuration error
// that touches nothing.
func TestKopiaKeyDerivation(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, _, s3 := kopiaSetup(t, src)
	ctx := context.Background()

	e[EnvKopiaKeyDerivation] = "argon2"
	res := Backup(ctx, e.get, "test")
	if res.Reason != ReasonInvalidConfig || !strings.Contains(res.Message, EnvKopiaKeyDerivation) {
		t.Errorf("backup with an unknown key derivation = %+v, want %s naming %s", res, ReasonInvalidConfig, EnvKopiaKeyDerivation)
	}
	for o := range s3.ListObjects(ctx, "backups", minio.ListObjectsOptions{Prefix: "ns/app/", Recursive: true}) {
		t.Fatalf("the refused backup wrote %s (%v)", o.Key, o.Err)
	}

	e[EnvKopiaKeyDerivation] = kopiarepo.KeyDerivationPBKDF2
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() || res.KeyDerivation != kopiarepo.KeyDerivationPBKDF2 {
		t.Fatalf("backup creating a PBKDF2 repository = %+v", res)
	}
	e[EnvKopiaKeyDerivation] = kopiarepo.KeyDerivationScrypt
	e[EnvKopiaCacheDir] = t.TempDir()
	nextRun(e, "20261203T030000Z")
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() || res.KeyDerivation != kopiarepo.KeyDerivationPBKDF2 {
		t.Errorf("a second backup asking for scrypt = %+v, want the repository's %s kept", res, kopiarepo.KeyDerivationPBKDF2)
	}
}

func TestKopiaRestoreOfADamagedRepositoryNeverEmptiesTheTarget(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 1<<20, 1)
	e, _, s3 := kopiaSetup(t, src)
	ctx := context.Background()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup = %+v", res)
	}
	// Damage every metadata pack (directories live there): one byte in 64 flipped, since kopia
	// pads packs with random bytes that a single flip may hit.
	damaged := 0
	for o := range s3.ListObjects(ctx, "backups", minio.ListObjectsOptions{Prefix: "ns/app/kopia/q", Recursive: true}) {
		b := get(t, s3, o.Key)
		for i := 0; i < len(b); i += 64 {
			b[i] ^= 0xff
		}
		put(t, s3, o.Key, b)
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no metadata pack to damage")
	}
	target := t.TempDir()
	randomFile(t, filepath.Join(target, "keep"), 10, 2)
	e[EnvTargetDir], e[EnvOverwrite] = target, "Clean"
	e[EnvKopiaCacheDir] = t.TempDir() // a fresh pod: nothing cached
	res := Restore(ctx, e.get)
	if res.Succeeded() || !strings.Contains(res.Message, "the target volume was not changed") {
		t.Errorf("restore of a damaged repository = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Errorf("a restore of a damaged backup emptied the target: %v", err)
	}
	if res := Verify(ctx, e.get); res.Succeeded() {
		t.Errorf("verify of a damaged repository = %+v", res)
	}
}

func TestKopiaBackupSweepsSnapshotsWhoseManifestIsGone(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, m, s3 := kopiaSetup(t, src)
	ctx := context.Background()
	var ids []string
	for _, run := range []string{"20261203T020000Z", "20261203T030000Z", "20261203T040000Z"} {
		nextRun(e, run)
		randomFile(t, filepath.Join(src, "a"), 4096, run[10])
		res := Backup(ctx, e.get, "test")
		if !res.Succeeded() {
			t.Fatalf("backup %s = %+v", run, res)
		}
		ids = append(ids, res.SnapshotID)
		if run == "20261203T030000Z" { // retention pruned the first backup: its manifest is gone
			if err := s3.RemoveObject(ctx, "backups", "ns/app/20261203T020000Z.manifest.json", minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := openTestRepo(t, m, kopiarepo.Options{NoCreate: true})
	defer r.Close(ctx)
	snaps, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range snaps {
		left = append(left, s.ID)
	}
	if strings.Join(left, ",") != strings.Join(ids[1:], ",") {
		t.Errorf("snapshots after the third backup: %v, want %v (the first one's manifest was deleted)", left, ids[1:])
	}
}

func TestKopiaRestoreNeverCreatesARepository(t *testing.T) {
	e, _, s3 := kopiaSetup(t, t.TempDir())
	put(t, s3, e[EnvManifestKey], []byte(`{"formatVersion":1,"id":"20261203T020000Z","engine":"kopia",
		"kopia":{"repository":"ns/elsewhere/kopia","snapshotID":"k0123"}}`))
	e[EnvTargetDir] = t.TempDir()
	if res := Restore(context.Background(), e.get); res.Reason != ReasonBackupNotFound {
		t.Errorf("restore from a missing repository = %+v", res)
	}
	for o := range s3.ListObjects(context.Background(), "backups", minio.ListObjectsOptions{Prefix: "ns/elsewhere/", Recursive: true}) {
		t.Errorf("a restore wrote %s", o.Key)
	}
}

func TestKopiaBackupOfAFrozenStoreStallsInsteadOfHanging(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, m, _ := kopiaSetup(t, src)
	e[EnvIdleTimeout] = "2s"
	m.Freeze()
	defer m.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := Backup(ctx, e.get, "test")
	if res.Reason != ReasonStorageStalled {
		t.Errorf("backup into a frozen MinIO = %+v", res)
	}
}

// readRecord fetches the RepositoryRecord a run wrote at key.
func readRecord(t *testing.T, s3 *minio.Client, key string) RepositoryRecord {
	t.Helper()
	o, err := s3.GetObject(context.Background(), "backups", key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var rec RepositoryRecord
	if err := json.NewDecoder(o).Decode(&rec); err != nil {
		t.Fatalf("record %s: %v", key, err)
	}
	return rec
}

// Every kopia backup records what it found in the repository, after its manifest: the manifest
// among those judged and its snapshot, tagged with the backup. After a lost metadata blob (the
// oldest q blob: the repository's policies) the next backup heals and succeeds, its result
// names the lost blob in what it repaired, and the record finds nothing damaged any more.
func TestKopiaBackupRecordsTheRepositoryAndNamesALostBlob(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 200<<10, 1)
	e, _, s3 := kopiaSetup(t, src)
	e[EnvKopiaRecordKey] = "ns/app/" + RepositoryRecordName
	ctx := context.Background()
	res := Backup(ctx, e.get, "test")
	if !res.Succeeded() || res.RepositoryDamage != "" {
		t.Fatalf("first backup: %+v", res)
	}
	rec := readRecord(t, s3, e[EnvKopiaRecordKey])
	if rec.RunID != e[EnvBackupID] || len(rec.Manifests) != 1 || rec.Manifests[0] != e[EnvBackupID] ||
		rec.Snapshots[res.SnapshotID].Backup != e[EnvBackupID] || rec.Damage != "" || rec.Unlisted != "" {
		t.Fatalf("record after the first backup: %+v", rec)
	}

	var oldest minio.ObjectInfo
	for o := range s3.ListObjects(ctx, "backups", minio.ListObjectsOptions{Prefix: "ns/app/kopia/q", Recursive: true}) {
		if oldest.Key == "" || o.LastModified.Before(oldest.LastModified) {
			oldest = o
		}
	}
	if err := s3.RemoveObject(ctx, "backups", oldest.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	blobID := strings.TrimPrefix(oldest.Key, "ns/app/kopia/")
	nextRun(e, "20261203T030000Z")
	e[EnvKopiaCacheDir] = t.TempDir() // a new Job's emptyDir: the lost blob is not cached
	res = Backup(ctx, e.get, "test")
	t.Logf("backup after the loss: %+v", res)
	// The backup heals (the lost policies and maintenance owner written again, heal.go),
	// succeeds and says what it repaired; nothing else was in the blob, so nothing is damaged.
	if !res.Succeeded() || !strings.Contains(res.Repair, blobID) || res.RepositoryDamage != "" || res.MaintenanceError != "" {
		t.Fatalf("backup after a lost metadata blob: %+v, want it healed, naming %s", res, blobID)
	}
	rec = readRecord(t, s3, e[EnvKopiaRecordKey])
	if rec.RunID != "20261203T030000Z" || rec.Unlisted != "" || rec.Damage != "" || rec.Snapshots[res.SnapshotID].Backup != "20261203T030000Z" {
		t.Errorf("record after the loss: %+v, want the snapshots listed and nothing damaged", rec)
	}
}
