package run

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// A restore keeps setuid, setgid and sticky bits on files and directories, their mtimes, and the
// symlinks' own mtimes, with both engines. A FIFO is kept by the archive engine; kopia's snapshots
// cannot hold one, so the kopia backup counts it in its result (skipped), never drops it
// unseen. (kopia's restore passed Go's fs.FileMode bits to fchmod: 4755 came back 755; the
// archive engine restored symlinks with the restore's time; both dropped FIFOs silently.)
func TestRestoreKeepsSpecialModeBitsSymlinkTimesAndFIFOs(t *testing.T) {
	for _, engine := range []string{EngineArchive, EngineKopia} {
		t.Run(engine, func(t *testing.T) {
			src := t.TempDir()
			old := time.Date(2003, 4, 5, 6, 7, 8, 900000000, time.UTC)
			modes := map[string]fs.FileMode{
				"setuid":          0o755 | fs.ModeSetuid,
				"setgid":          0o755 | fs.ModeSetgid,
				"sticky-file":     0o644 | fs.ModeSticky,
				"tmp":             0o777 | fs.ModeSticky | fs.ModeDir,
				"shared":          0o775 | fs.ModeSetgid | fs.ModeDir,
				"tmp/setuid-big":  0o750 | fs.ModeSetuid, // above the archive's small-file path
				"shared/inherits": 0o640,
			}
			for _, name := range []string{"tmp", "shared"} {
				os.Mkdir(filepath.Join(src, name), 0o700)
			}
			for name, mode := range modes {
				p := filepath.Join(src, name)
				if !mode.IsDir() {
					size := 10
					if name == "tmp/setuid-big" {
						size = 3 << 20
					}
					randomFile(t, p, size, 7)
				}
				if err := os.Chmod(p, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
					t.Fatal(err)
				}
			}
			for name := range modes { // files first: creating them changed their directories' times
				if !modes[name].IsDir() {
					os.Chtimes(filepath.Join(src, name), old, old)
				}
			}
			for _, name := range []string{"tmp", "shared"} {
				os.Chtimes(filepath.Join(src, name), old, old)
			}
			if err := os.Symlink("setuid", filepath.Join(src, "link")); err != nil {
				t.Fatal(err)
			}
			ts, _ := unix.TimeToTimespec(old)
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, "link"), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o640); err != nil {
				t.Fatal(err)
			}

			e, _, _ := kopiaSetup(t, src)
			e[EnvEngine] = engine
			res := Backup(context.Background(), e.get, "test")
			if res.Result != Succeeded {
				t.Fatalf("backup: %+v", res)
			}
			e[EnvTargetDir] = t.TempDir()
			if rr := Restore(context.Background(), e.get); rr.Result != Succeeded {
				t.Fatalf("restore: %+v", rr)
			}
			dst := e[EnvTargetDir]
			for name := range modes {
				want, _ := os.Lstat(filepath.Join(src, name))
				got, err := os.Lstat(filepath.Join(dst, name))
				if err != nil || got.Mode() != want.Mode() || !got.ModTime().Equal(old) {
					t.Errorf("%s: restored mode %v, mtime %v (%v), want %v, %v", name, modeOf(got), modTimeOf(got), err, want.Mode(), old)
				}
			}
			if got, err := os.Lstat(filepath.Join(dst, "link")); err != nil || !got.ModTime().Equal(old) {
				t.Errorf("symlink: restored mtime %v (%v), want %v", modTimeOf(got), err, old)
			}
			fifo, err := os.Lstat(filepath.Join(dst, "pipe"))
			switch engine {
			case EngineArchive:
				if err != nil || fifo.Mode() != fs.ModeNamedPipe|0o640 || res.Skipped != 0 {
					t.Errorf("FIFO: restored %v (%v), backup skipped %d; want a named pipe 0640, none skipped", modeOf(fifo), err, res.Skipped)
				}
			case EngineKopia:
				if res.Skipped != 1 {
					t.Errorf("the kopia backup reports %d skipped entries for a volume with one FIFO: %+v", res.Skipped, res)
				}
			}
		})
	}
}

func modeOf(fi fs.FileInfo) any {
	if fi == nil {
		return nil
	}
	return fi.Mode()
}

func modTimeOf(fi fs.FileInfo) any {
	if fi == nil {
		return nil
	}
	return fi.ModTime()
}
