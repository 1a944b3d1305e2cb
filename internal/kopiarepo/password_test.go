package kopiarepo

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A wrong password is told apart from any other failure, and leaves the repository as it was:
// the right password still opens it, with its snapshot.
func TestWrongPasswordIsRejected(t *testing.T) {
	b := newBucket(t)
	cfg, snap := backedUpVolume(t, b, "volumes/db")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cacheDir := t.TempDir()
	if r, err := Open(ctx, cfg, "not the password", Options{CacheDir: cacheDir}); !errors.Is(err, ErrWrongPassword) {
		if err == nil {
			r.Close(ctx)
		}
		t.Fatalf("open with a wrong password: %v, want ErrWrongPassword", err)
	}

	r, err := Open(ctx, cfg, testPassword, Options{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	list, err := r.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("after a wrong password, list = %v, %v; want the snapshot %s", list, err, snap.ID)
	}
}

// Open creates a repository only in an empty prefix: it refuses one holding other objects, and
// repositories under neighbouring prefixes ("db" and "db2") stay apart.
func TestOpenCreatesOnlyInAnEmptyPrefix(t *testing.T) {
	b := newBucket(t)
	b.put(t, "volumes/tar/archive.tar.zst", []byte("not kopia"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r, err := Open(ctx, b.config("volumes/tar"), testPassword, Options{}); !errors.Is(err, ErrNotARepository) {
		if err == nil {
			r.Close(ctx)
		}
		t.Fatalf("open over foreign objects: %v, want ErrNotARepository", err)
	}

	src := t.TempDir()
	writeVolume(t, src)
	if _, err := openRepo(t, b.config("volumes/db"), testPassword).Backup(ctx, src, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	other := openRepo(t, b.config("volumes/db2"), "another password")
	if list, err := other.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("the repository under volumes/db2 lists %v, %v; want nothing", list, err)
	}
	if n := len(b.objects(t, "volumes/tar/")); n != 1 {
		t.Errorf("volumes/tar/ holds %d objects after the refused create, want the 1 it had", n)
	}
}

// A repository created with PBKDF2 records it in its format blob, says so in Info, and keeps it:
// opening it again asking for scrypt changes nothing, the wrong password is still told apart,
// and the stock kopia CLI opens it. A repository created without a choice is kopia's scrypt.
func TestKeyDerivation(t *testing.T) {
	b := newBucket(t)
	ctx := testContext(t)
	keyAlgo := func(prefix string) string {
		t.Helper()
		var f struct {
			KeyAlgo string `json:"keyAlgo"`
		}
		if err := json.Unmarshal(b.get(t, prefix+"/kopia.repository"), &f); err != nil {
			t.Fatal(err)
		}
		return f.KeyAlgo
	}
	open := func(prefix, password, kd string) (*Repo, error) {
		return Open(ctx, b.config(prefix), password, Options{CacheDir: t.TempDir(), KeyDerivation: kd})
	}
	info := func(r *Repo) Info {
		t.Helper()
		i, err := r.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}

	src := t.TempDir()
	writeVolume(t, src)
	r, err := open("volumes/fast", testPassword, KeyDerivationPBKDF2)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := r.Backup(ctx, src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := info(r).KeyDerivation; got != KeyDerivationPBKDF2 {
		t.Errorf("Info of the new repository: key derivation %q, want %q", got, KeyDerivationPBKDF2)
	}
	r.Close(ctx)
	if got := keyAlgo("volumes/fast"); got != KeyDerivationPBKDF2 {
		t.Fatalf("kopia.repository says keyAlgo %q, want %q", got, KeyDerivationPBKDF2)
	}

	if r, err := open("volumes/fast", "not the password", KeyDerivationPBKDF2); !errors.Is(err, ErrWrongPassword) {
		if err == nil {
			r.Close(ctx)
		}
		t.Fatalf("open with a wrong password: %v, want ErrWrongPassword", err)
	}
	r, err = open("volumes/fast", testPassword, KeyDerivationScrypt)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := r.List(ctx); err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Errorf("reopened: list = %v, %v; want the snapshot %s", list, err, snap.ID)
	}
	if got := info(r).KeyDerivation; got != KeyDerivationPBKDF2 {
		t.Errorf("reopened asking for scrypt: Info says %q, want the repository's %q", got, KeyDerivationPBKDF2)
	}
	r.Close(ctx)
	if got := keyAlgo("volumes/fast"); got != KeyDerivationPBKDF2 {
		t.Errorf("after reopening, kopia.repository says keyAlgo %q, want %q", got, KeyDerivationPBKDF2)
	}

	r, err = open("volumes/default", testPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := info(r).KeyDerivation; got != KeyDerivationScrypt {
		t.Errorf("Info of a repository created without a choice: %q, want kopia's default %q", got, KeyDerivationScrypt)
	}
	r.Close(ctx)

	home, c := t.TempDir(), b.config("volumes/fast")
	cmd := exec.Command(kopiaCLI(t), "repository", "connect", "s3", "--bucket="+c.Bucket, "--endpoint="+c.Endpoint, "--disable-tls",
		"--prefix=volumes/fast/", "--access-key="+c.AccessKey, "--secret-access-key="+c.SecretKey, "--password="+testPassword,
		"--config-file="+filepath.Join(home, "repository.config"), "--cache-directory="+filepath.Join(home, "cache"))
	cmd.Env = append(os.Environ(), "HOME="+home, "KOPIA_LOG_DIR="+filepath.Join(home, "logs"), "KOPIA_CHECK_FOR_UPDATES=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kopia repository connect to the PBKDF2 repository: %v\n%s", err, out)
	}
}

// ChangePassword makes the new password the only one: the same connection goes on working (its
// sampled read opens a second connection, with the new password), a new connection opens only
// with the new password, and the snapshot made under the old one restores byte for byte.
func TestChangePassword(t *testing.T) {
	b := newBucket(t)
	cfg := b.config("volumes/db")
	ctx := testContext(t)
	const newPassword = "the rotated password"
	before := t.TempDir()
	writeVolume(t, before)
	r := openRepo(t, cfg, testPassword)
	snap, err := r.Backup(ctx, before, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := r.ChangePassword(ctx, newPassword); err != nil {
		t.Fatal(err)
	}
	healed, err := r.Heal(ctx, HealOptions{VerifyPercent: 100})
	if err != nil || healed.ReadPacks == 0 {
		t.Fatalf("the sampled read after the change = %+v, %v; want every pack read back", healed, err)
	}
	src := t.TempDir()
	writeVolume(t, src)
	if _, err := r.Backup(ctx, src, BackupOptions{}); err != nil {
		t.Fatalf("a backup on the connection that changed the password: %v", err)
	}

	if old, err := Open(ctx, cfg, testPassword, Options{NoCreate: true}); !errors.Is(err, ErrWrongPassword) {
		if err == nil {
			old.Close(ctx)
		}
		t.Fatalf("open with the old password after the change: %v, want ErrWrongPassword", err)
	}
	again := openRepo(t, cfg, newPassword)
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := again.Restore(ctx, snap.ID, dst); err != nil {
		t.Fatalf("restore of the snapshot made under the old password: %v", err)
	}
	assertSameTree(t, before, dst)
}

// kopia's password change writes kopia.blobcfg, then kopia.repository. A process killed between
// the two leaves a repository neither password opens; putting the old kopia.blobcfg back (from
// bucket versioning) makes the old password open it again, with its snapshot (docs/kopia.md).
func TestChangePasswordInterruptedBetweenItsTwoWrites(t *testing.T) {
	b := newBucket(t)
	cfg, snap := backedUpVolume(t, b, "volumes/db")
	ctx := testContext(t)
	oldFormat, oldBlobCfg := b.get(t, "volumes/db/kopia.repository"), b.get(t, "volumes/db/kopia.blobcfg")
	r := openRepo(t, cfg, testPassword)
	if err := r.ChangePassword(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	b.put(t, "volumes/db/kopia.repository", oldFormat) // as if the second PUT never happened

	_, errOld := Open(ctx, cfg, testPassword, Options{NoCreate: true, NoDiskCache: true})
	_, errNew := Open(ctx, cfg, "new", Options{NoCreate: true, NoDiskCache: true})
	if errOld == nil || !strings.Contains(errOld.Error(), "blobcfg") || !errors.Is(errNew, ErrWrongPassword) {
		t.Fatalf("half a password change: old %v, new %v; want the old refused naming kopia.blobcfg, the new a wrong password", errOld, errNew)
	}
	t.Logf("half a password change: with the old password %v (damaged: %t); with the new %v", errOld, IsDamaged(errOld), errNew)

	b.put(t, "volumes/db/kopia.blobcfg", oldBlobCfg)
	again := openRepo(t, cfg, testPassword)
	if list, err := again.List(ctx); err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("after putting kopia.blobcfg back, list = %v, %v; want the snapshot %s", list, err, snap.ID)
	}
}
