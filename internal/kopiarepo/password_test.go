package kopiarepo

import (
	"context"
	"errors"
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
