package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadRefusesEntriesThatLeaveTheDestination(t *testing.T) {
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	dir := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o777} }
	symlink := func(name, target string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
	}
	hardLink := func(name, target string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}
	}
	// Each case gets parent/dst as its destination and parent/outside/victim to attack; OUT in
	// a name or target stands for parent/outside. bad names the entry the error must mention.
	tests := []struct {
		name    string
		entries []*tar.Header
		bad     string
	}{
		{"dot-dot", []*tar.Header{reg("../escaped")}, "../escaped"},
		{"dot-dot after a directory", []*tar.Header{reg("a/../../escaped")}, "a/../../escaped"},
		{"absolute", []*tar.Header{reg("OUT/absolute")}, "OUT/absolute"},
		{"hard link up", []*tar.Header{hardLink("evil-link", "../../etc/passwd")}, `"evil-link"`},
		{"hard link absolute", []*tar.Header{hardLink("evil-link", "OUT/victim")}, `"evil-link"`},
		{"file through a symlink", []*tar.Header{symlink("a", "OUT"), reg("a/victim")}, "a/victim"},
		{"file through a symlink, deeper", []*tar.Header{symlink("a", "OUT"), reg("a/sub/file")}, "a/sub/file"},
		{"directory through a symlink", []*tar.Header{symlink("a", "OUT"), dir("a/sub/")}, "a/sub/"},
		{"symlink through a symlink", []*tar.Header{symlink("a", "OUT"), symlink("a/s", "x")}, "a/s"},
		{"hard link through a symlink", []*tar.Header{symlink("a", "OUT"), hardLink("evil-link", "a/victim")}, `"evil-link"`},
		{"hard link placed through a symlink", []*tar.Header{reg("f"), symlink("a", "OUT"), hardLink("a/evil-link", "f")}, `"a/evil-link"`},
		{"directory swapped for a symlink", []*tar.Header{dir("d/"), symlink("d", "OUT")}, "d/"},
		{"file replacing the destination", []*tar.Header{reg(".")}, `"."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst, outside := filepath.Join(parent, "dst"), filepath.Join(parent, "outside")
			victim := filepath.Join(outside, "victim")
			for _, err := range []error{os.Mkdir(dst, 0o755), os.Mkdir(outside, 0o700), os.WriteFile(victim, []byte("original"), 0o600)} {
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range tt.entries {
				h.Name = strings.ReplaceAll(h.Name, "OUT", outside)
				h.Linkname = strings.ReplaceAll(h.Linkname, "OUT", outside)
			}
			_, err := Read(context.Background(), bytes.NewReader(crafted(t, tt.entries...)), dst, ReadOptions{Chown: true})
			bad := strings.ReplaceAll(tt.bad, "OUT", outside)
			if err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("Read = %v, want an error naming %q", err, bad)
			}
			// Nothing outside dst was created, changed or linked.
			var found []string
			filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
				if p == dst {
					return fs.SkipDir
				}
				found = append(found, p)
				return err
			})
			if want := []string{parent, outside, victim}; strings.Join(found, "\n") != strings.Join(want, "\n") {
				t.Errorf("outside the destination:\n%s\nwant\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
			}
			if fi, err := os.Stat(outside); err != nil || fi.Mode() != fs.ModeDir|0o700 {
				t.Errorf("outside directory now %v (%v)", fi.Mode(), err)
			}
			fi, err := os.Stat(victim)
			data, _ := os.ReadFile(victim)
			if err != nil || fi.Mode() != 0o600 || fi.Sys().(*syscall.Stat_t).Nlink != 1 || string(data) != "original" {
				t.Errorf("victim changed: %v, %q", fi, data)
			}
		})
	}
}
