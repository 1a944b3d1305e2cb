package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// sameTree returns nil when dst holds exactly src's directories and regular files, with their
// modes and content (the datasets have no symlinks or hard links).
func sameTree(src, dst string) error {
	var entries int
	a, b := make([]byte, 1<<20), make([]byte, 1<<20)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		want, err := os.Lstat(p)
		if err != nil {
			return err
		}
		got, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		entries++
		if got.Mode() != want.Mode() {
			return fmt.Errorf("%s: mode %v, want %v", rel, got.Mode(), want.Mode())
		}
		if want.Mode().IsRegular() {
			if got.Size() != want.Size() {
				return fmt.Errorf("%s: size %d, want %d", rel, got.Size(), want.Size())
			}
			if eq, err := sameContent(p, filepath.Join(dst, rel), a, b); err != nil || !eq {
				return fmt.Errorf("%s: content differs (%v)", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var extra int
	err = filepath.WalkDir(dst, func(string, fs.DirEntry, error) error { extra++; return nil })
	if err == nil && extra != entries {
		err = fmt.Errorf("%s has %d entries, %s has %d", dst, extra, src, entries)
	}
	return err
}

func sameContent(p, q string, a, b []byte) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	g, err := os.Open(q)
	if err != nil {
		return false, err
	}
	defer g.Close()
	for {
		n, errA := io.ReadFull(f, a)
		m, errB := io.ReadFull(g, b[:len(a)])
		if n != m || !bytes.Equal(a[:n], b[:m]) {
			return false, nil
		}
		if errA != nil || errB != nil {
			return errA == errB || (n == m && isEOF(errA) && isEOF(errB)), nil
		}
	}
}

func isEOF(err error) bool { return err == io.EOF || err == io.ErrUnexpectedEOF }
