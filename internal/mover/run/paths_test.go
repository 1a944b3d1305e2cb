package run

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// pathsVolume is the volume of the file-level restore tests: nested directories, a symlink, a
// 1 MiB file, and a hard link whose first name (db/hard) is in another directory than its
// second (top.txt).
func pathsVolume(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "app/config/a.conf"), 300, 1)
	randomFile(t, filepath.Join(src, "app/config/nested/deep/b.conf"), 5000, 2)
	randomFile(t, filepath.Join(src, "app/logs/l.log"), 70000, 3)
	randomFile(t, filepath.Join(src, "db/data/big.bin"), 1<<20, 4)
	randomFile(t, filepath.Join(src, "db/hard"), 100, 5)
	if err := os.Symlink("a.conf", filepath.Join(src, "app/config/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "db/hard"), filepath.Join(src, "top.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "app/config"), 0o750); err != nil {
		t.Fatal(err)
	}
	return src
}

// onlyUnder fails t unless every entry of dst is under one of paths, a directory above one, or
// one of kept (files the target held before).
func onlyUnder(t *testing.T, dst string, paths, kept []string) {
	t.Helper()
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dst, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		for _, want := range append(append([]string(nil), paths...), kept...) {
			if Covers(want, rel) || strings.HasPrefix(want, rel+"/") {
				return nil
			}
		}
		t.Errorf("%s was restored, but is not under %v", rel, paths)
		return nil
	})
}

// samePath fails t unless dst holds src's rel exactly (a file, or a directory's whole tree).
func samePath(t *testing.T, src, dst, rel string) {
	t.Helper()
	want, err := os.Lstat(filepath.Join(src, rel))
	if err != nil {
		t.Fatal(err)
	}
	if want.IsDir() {
		sameTree(t, filepath.Join(src, rel), filepath.Join(dst, rel))
		return
	}
	got, err := os.Lstat(filepath.Join(dst, rel))
	if err != nil || got.Mode() != want.Mode() || got.Size() != want.Size() || sum(t, filepath.Join(src, rel)) != sum(t, filepath.Join(dst, rel)) {
		t.Errorf("%s: restored as %v (err %v), want %v %d bytes with the same content", rel, got, err, want.Mode(), want.Size())
	}
}

// TestRestoreOfSomePaths restores files and directories of one backup alone, with each engine,
// through the mover's own run (Restore reading RESTORE_PATHS) against a real MinIO.
func TestRestoreOfSomePaths(t *testing.T) {
	for _, engineName := range []string{EngineArchive, EngineKopia} {
		t.Run(engineName, func(t *testing.T) {
			src := pathsVolume(t)
			e, _ := setupFor(t, engineName, src)
			if res := Backup(context.Background(), e.get, "test"); res.Result != Succeeded {
				t.Fatalf("backup: %+v", res)
			}
			restorePaths := func(t *testing.T, target, overwrite string, paths ...string) Result {
				t.Helper()
				re := env{}
				for k, v := range e {
					re[k] = v
				}
				re[EnvTargetDir], re[EnvOverwrite], re[EnvRestorePaths] = target, overwrite, EncodePaths(paths)
				return Restore(context.Background(), re.get)
			}

			t.Run("a directory into a new volume", func(t *testing.T) {
				dst := t.TempDir()
				res := restorePaths(t, dst, "Refuse", "app/config")
				if res.Result != Succeeded || res.Files != 2 || res.RestoredBytes != 5300 || res.TotalFiles != 6 || res.TotalBytes != 300+5000+70000+(1<<20)+100+100 {
					if !(engineName == EngineArchive && res.TotalFiles == 5) { // the archive holds top.txt as a hard link, not a file
						t.Fatalf("restore: %+v", res)
					}
				}
				samePath(t, src, dst, "app/config")
				onlyUnder(t, dst, []string{"app/config"}, nil)
				fi, err := os.Stat(filepath.Join(dst, "app"))
				want, _ := os.Stat(filepath.Join(src, "app"))
				if err != nil || fi.Mode() != want.Mode() {
					t.Errorf("the directory above the path: %v, %v; want mode %v", fi, err, want.Mode())
				}
			})
			t.Run("a file and a nested directory, one path under another", func(t *testing.T) {
				dst := t.TempDir()
				res := restorePaths(t, dst, "Refuse", "db/data/big.bin", "app/config/nested", "app/config/nested/deep")
				if res.Result != Succeeded || res.Files != 2 || res.RestoredBytes != 5000+(1<<20) {
					t.Fatalf("restore: %+v", res)
				}
				samePath(t, src, dst, "db/data/big.bin")
				samePath(t, src, dst, "app/config/nested")
				onlyUnder(t, dst, []string{"db/data/big.bin", "app/config/nested"}, nil)
			})
			t.Run("an absent path fails before the target is touched", func(t *testing.T) {
				dst := t.TempDir()
				os.WriteFile(filepath.Join(dst, "mine"), []byte("unrelated"), 0o600)
				res := restorePaths(t, dst, "Merge", "app/config", "app/nope", "db/data/big.bin/x")
				if res.Result != Failed || res.Reason != ReasonPathNotInBackup ||
					!strings.Contains(res.Message, `"app/nope"`) || !strings.Contains(res.Message, `"db/data/big.bin/x"`) ||
					!strings.Contains(res.Message, "the target volume was not changed") {
					t.Fatalf("restore: %+v", res)
				}
				onlyUnder(t, dst, nil, []string{"mine"})
			})
			t.Run("merge writes only the paths and keeps the rest of the target", func(t *testing.T) {
				dst := t.TempDir()
				randomFile(t, filepath.Join(dst, "app/config/a.conf"), 10, 9) // replaced
				randomFile(t, filepath.Join(dst, "app/logs/mine.log"), 10, 9) // kept
				randomFile(t, filepath.Join(dst, "other"), 10, 9)             // kept
				res := restorePaths(t, dst, "Merge", "app/config")
				if res.Result != Succeeded || res.Files != 2 {
					t.Fatalf("restore: %+v", res)
				}
				samePath(t, src, dst, "app/config")
				onlyUnder(t, dst, []string{"app/config"}, []string{"app/logs/mine.log", "other"})
				for _, kept := range []string{"app/logs/mine.log", "other"} {
					if fi, err := os.Stat(filepath.Join(dst, kept)); err != nil || fi.Size() != 10 {
						t.Errorf("%s: %v %v, want it kept", kept, fi, err)
					}
				}
			})
			t.Run("refuse into a volume with data", func(t *testing.T) {
				dst := t.TempDir()
				os.WriteFile(filepath.Join(dst, "mine"), []byte("unrelated"), 0o600)
				if res := restorePaths(t, dst, "Refuse", "app/config"); res.Result != Failed || res.Reason != ReasonTargetNotEmpty {
					t.Fatalf("restore: %+v", res)
				}
				onlyUnder(t, dst, nil, []string{"mine"})
			})
			t.Run("clean is refused with paths", func(t *testing.T) {
				dst := t.TempDir()
				os.WriteFile(filepath.Join(dst, "mine"), []byte("unrelated"), 0o600)
				if res := restorePaths(t, dst, "Clean", "app/config"); res.Result != Failed || res.Reason != ReasonInvalidConfig {
					t.Fatalf("restore: %+v", res)
				}
				onlyUnder(t, dst, nil, []string{"mine"})
			})
			t.Run("a hard link whose first name is elsewhere", func(t *testing.T) {
				dst := t.TempDir()
				res := restorePaths(t, dst, "Refuse", "top.txt")
				if engineName == EngineKopia { // kopia holds hard links as separate files
					if res.Result != Succeeded || res.Files != 1 {
						t.Fatalf("restore: %+v", res)
					}
					samePath(t, src, dst, "top.txt")
					return
				}
				if res.Result != Failed || res.Reason != ReasonPathNotInBackup || !strings.Contains(res.Message, `add "db/hard" to paths`) {
					t.Fatalf("restore: %+v", res)
				}
				onlyUnder(t, dst, nil, nil)
			})
		})
	}
}
