package main

import (
	"strings"
	"testing"
)

func TestRestoreFSNamesTheFileSystemOfADirectory(t *testing.T) {
	desc, _ := restoreFS(t.TempDir())
	if desc == "" || !strings.Contains(desc, " at /") {
		t.Fatalf("restoreFS: %q", desc)
	}
}
