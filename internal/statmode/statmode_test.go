package statmode

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FileMode of a stat result is what os.Lstat reports, for every file type and special bit.
func TestFileModeIsLstats(t *testing.T) {
	dir := t.TempDir()
	paths := map[string]func(string) error{
		"file": func(p string) error { return os.WriteFile(p, nil, 0o640) },
		"setuid": func(p string) error {
			return errorsJoin(os.WriteFile(p, nil, 0o755), os.Chmod(p, os.ModeSetuid|os.ModeSetgid|0o755))
		},
		"dir":     func(p string) error { return os.Mkdir(p, 0o750) },
		"sticky":  func(p string) error { return errorsJoin(os.Mkdir(p, 0o777), os.Chmod(p, os.ModeSticky|0o777)) },
		"symlink": func(p string) error { return os.Symlink("file", p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o600) },
	}
	for name, create := range paths {
		if err := create(filepath.Join(dir, name)); err != nil {
			t.Fatal(name, err)
		}
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", "socket") // a short path: sockets' are limited to 108 bytes
	os.Chdir(wd)                           //nolint:errcheck // back where the test started
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, name := range []string{"file", "setuid", "dir", "sticky", "symlink", "fifo", "socket", "/dev/null"} {
		p := filepath.Join(dir, name)
		if filepath.IsAbs(name) {
			p = name
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := FileMode(st.Mode); got != fi.Mode() {
			t.Errorf("%s: %v, os.Lstat says %v", name, got, fi.Mode())
		}
	}
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
