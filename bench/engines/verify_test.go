package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSameTreeFindsEveryDifference(t *testing.T) {
	d := dataset{name: "t", files: 5, perDir: 2, fileSize: 1000, fill: logFill}
	src, dst := t.TempDir(), t.TempDir()
	if err := d.generate(src); err != nil {
		t.Fatal(err)
	}
	if err := d.generate(dst); err != nil {
		t.Fatal(err)
	}
	if err := sameTree(src, dst); err != nil {
		t.Fatalf("identical trees: %v", err)
	}
	for name, change := range map[string]func(string) error{
		"content": func(root string) error { _, err := d.rewrite(root); return err },
		"mode":    func(root string) error { return os.Chmod(d.path(root, 1), 0o604) },
		"extra":   func(root string) error { return os.WriteFile(filepath.Join(root, "extra"), nil, 0o644) },
		"missing": func(root string) error { return os.Remove(d.path(root, 4)) },
	} {
		dst := t.TempDir()
		if err := d.generate(dst); err != nil {
			t.Fatal(err)
		}
		if err := change(dst); err != nil {
			t.Fatal(err)
		}
		if err := sameTree(src, dst); err == nil {
			t.Errorf("%s: a different tree passed", name)
		}
	}
}
